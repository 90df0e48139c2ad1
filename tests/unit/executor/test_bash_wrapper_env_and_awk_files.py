"""Issue 11, red-team pass (session 6): environment set by a wrapper's option (EXE-8b), and
files awk writes through its options (EXE-8e). Both were ALLOWED.

- `xargs --process-slot-var=NAME` puts NAME=<slot number> in the environment of the
  command it runs: `xargs --process-slot-var=PATH echo` makes xargs exec ./0/echo. The
  option's value is now judged as the assignment it is (PATH, BASH_* refused; any other
  name asked, as for `env NAME=…`).
- gawk's `--dump-variables[=FILE]`, `--pretty-print[=FILE]`, `--profile[=FILE]` (`-d`,
  `-o`, `-p` with FILE attached, or `-W dump-variables=FILE`) write FILE, or awkvars.out /
  awkprof.out: `awk -v x='…' -d.bashrc 1` wrote a shell start-up file. They are judged as
  writes; `-W` options the analysis does not know are asked. (gawk is not installed on
  this machine, so these are judged only; mawk ignores them.)

Attack strings are data here, never pasted into a shell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

_MARKER = "PLANTED-ECHO-RAN"


def _judge(command: str, root: Path) -> str:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    return analyze(command, sandbox=sandbox).verdict


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A workspace where an approved write left ./0/echo."""
    (tmp_path / "0").mkdir()
    program = tmp_path / "0" / "echo"
    program.write_text(f"#!/bin/sh\necho {_MARKER}\n")
    program.chmod(0o755)
    (tmp_path / "a.txt").write_text("hello\n")
    return tmp_path


_SLOT_RUNS = [
    "echo a | xargs --process-slot-var=PATH echo",
    "echo a | xargs --process-slot-var PATH echo",
    "echo a | xargs --process-slot=PATH -P2 echo",
    "echo a | xargs -P1 --proc=PATH echo",
]


@pytest.mark.parametrize("command", _SLOT_RUNS)
def test_xargs_slot_variable_runs_a_planted_program_and_is_refused(
    command: str, planted: Path
) -> None:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=planted,
        env={"PATH": "/usr/bin:/bin", "HOME": str(planted), "LC_ALL": "C"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert _MARKER in done.stdout
    assert _judge(command, planted) == "deny"


@pytest.mark.parametrize(
    ("command", "verdict"),
    [
        ("xargs --process-slot-var=BASH_ENV env", "deny"),
        ("xargs --process-slot-var=LD_PRELOAD cat", "deny"),
        ("xargs --process-slot-var=HOME echo", "deny"),
        ("xargs --process-slot-var=SLOT echo", "ask"),
        ('xargs --process-slot-var="$v" echo', "deny"),
        ("xargs -P4 echo", "allow"),
    ],
)
def test_xargs_slot_variable_is_judged_as_an_assignment(
    command: str, verdict: str, planted: Path
) -> None:
    assert _judge(command, planted) == verdict


@pytest.mark.parametrize(
    "command",
    [
        "awk -d.bashrc 1",
        "gawk -o.bashrc 'BEGIN { id }'",
        "awk -p.git/hooks/pre-commit 'BEGIN{}'",
        "awk --dump-variables=.bashrc 'BEGIN{}'",
        "awk --pretty-print=.vscode/tasks.json 'BEGIN{}'",
        "awk --profile=.envrc 'BEGIN{}'",
        "awk --pro=.bashrc 1",
        "awk --dump=.bashrc 1",
        "awk -W dump-variables=.bashrc 1",
        "awk -Wdump-variables=.bashrc 1",
        "gawk -W profile=.git/config 1",
        "awk -v 'x=$(id)' -d.profile 'BEGIN{}'",
    ],
)
def test_awk_output_file_options_to_protected_files_are_refused(
    command: str, planted: Path
) -> None:
    assert _judge(command, planted) == "deny"


@pytest.mark.parametrize(
    "command",
    [
        "awk -d 1 a.txt",
        "gawk --pretty-print 'BEGIN{}'",
        "awk --profile=prof.out 1 a.txt",
        "awk -W exec prog a.txt",
        "awk -W some-new-option 1 a.txt",
        "awk -D 1 a.txt",
    ],
)
def test_awk_output_and_unknown_options_are_writes(command: str, planted: Path) -> None:
    assert _judge(command, planted) == "ask"


@pytest.mark.parametrize(
    "command",
    [
        "awk '{print $1}' a.txt",
        "awk -F: -v n=1 '{print $n}' a.txt",
        "awk --version",
        "awk -W version",
        "gawk --help",
        "awk -W dump 1",
    ],
)
def test_ordinary_awk_stays_allowed(command: str, planted: Path) -> None:
    assert _judge(command, planted) == "allow"
