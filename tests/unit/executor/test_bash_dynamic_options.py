"""Issue 11, red-team pass (session 6): a word only known at run time that splits into
options (EXE-8c), in the places the checker skipped.

Unquoted, `$x` becomes any number of words. The checker judged such words as unknown
files, but not where they become options or the command a wrapper runs — all of these
were ALLOWED:

- the value of a wrapper's option: `xargs -n $n echo` with n='1 sh -c …' runs sh
  (also `timeout -s`, `nice -n`, `env -u`, `stdbuf -o`): now refused, like a variable in
  command position;
- the first words of builtins whose options assign or run (`printf $x` with x='-v PATH
  ./bin' moves PATH, `hash $x` with '-p ./evil cat', `jobs $x` with '-x cmd',
  `compgen`, `wait`), and any word of a program that takes no files but has options that
  read or run (`date +$fmt` with fmt='x -f .env'): now bypass-immune ASKs;
- awk's `-v`/`-F` values: a piece can take the program's place (`{system(...)}`).

Each attack first runs in real bash inside a throwaway directory, the value coming from a
command substitution so only run time knows it. Attack strings are data here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

_MARKER = "PLANTED-RAN"
_SECRET = "hunter2-options"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / ".env").write_text(f"SECRET={_SECRET}\n")
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "bin").mkdir()
    for program in (tmp_path / "bin" / "ls", tmp_path / "evil"):
        program.write_text(f"#!/bin/sh\necho {_MARKER}\n")
        program.chmod(0o755)
    return tmp_path


def _judge(command: str, root: Path) -> tuple[str, bool]:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    result = analyze(command, sandbox=sandbox, denied_read_globs=("**/.env",))
    return result.verdict, result.bypass_immune


def _bash(command: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LC_ALL": "C"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.stdout + done.stderr


_RUNS = [
    # (command, what bash shows, verdict, immune)
    ("n=$(printf %s '1 ./evil'); echo a | xargs -n $n echo", _MARKER, "deny"),
    ("s=$(printf %s 'KILL 5 ./evil'); timeout -s $s 5 cat a.txt", _MARKER, "deny"),
    ("n=$(printf %s '1 ./evil'); nice -n $n cat a.txt", _MARKER, "deny"),
    ("x=$(printf %s '-x ./evil'); jobs $x", _MARKER, "ask"),
    ("x=$(printf %s '-v PATH ./bin'); printf $x; ls", _MARKER, "ask"),
    ("x=$(printf %s '-p ./evil cat'); hash $x; cat a.txt", _MARKER, "ask"),
    ("f=$(printf %s 'x -f .env'); date +$f", _SECRET, "ask"),
    (
        "v=$(printf %s '1 BEGIN{system(\"./evil\")}'); awk -v x=$v 1 a.txt",
        _MARKER,
        "ask",
    ),
]


@pytest.mark.parametrize(("command", "shows", "verdict"), _RUNS)
def test_bash_splits_the_word_into_options_and_the_checker_does_not_allow(
    command: str, shows: str, verdict: str, workspace: Path
) -> None:
    assert shows in _bash(command, workspace)
    judged, immune = _judge(command, workspace)
    assert judged == verdict
    assert immune or verdict == "deny"  # an ASK no allow rule or mode settles


@pytest.mark.parametrize(
    "command",
    [
        "xargs -P $p -n1 cat",
        "env -C $d cat a.txt",
        "stdbuf -o $m cat a.txt",
        "compgen $x",
        "wait $x",
        'printf "$f" x',
        "date $x",
        "awk -F $d 1 a.txt",
    ],
)
def test_variants_are_not_allowed(command: str, workspace: Path) -> None:
    assert _judge(command, workspace)[0] != "allow"


@pytest.mark.parametrize(
    "command",
    [
        'xargs -n "$n" echo',
        "printf '%s\\n' $x",
        'printf -- "$f" x',
        "echo $x",
        "seq $n",
        "date +%s",
        'awk -v "x=$v" 1 a.txt',
        "jobs -l",
        "wait -n",
        "n=2; xargs -n $n echo",
    ],
)
def test_ordinary_forms_stay_allowed(command: str, workspace: Path) -> None:
    assert _judge(command, workspace)[0] == "allow"
