"""Issue 11, red-team pass (session 6): how many words an option takes, as the program sees it.

The checker skips the word after an option it believes takes a value (`head -n 5`). Three
ways the program disagrees, each a read the checker never judged (all were ALLOWED):

- options whose value is optional, so only ever attached (`--color[=WHEN]`,
  `--unified[=NUM]`, `-I[FMT]`): `grep --color SECRET .env` and `date -I -f .env` print
  .env;
- flags listed as taking a value (`jq --tab`, `jq --seq`): the filter was skipped, and the
  file taken for the filter;
- abbreviations: GNU getopt takes `--time` as du's own `--time`, not as `--time-style`;
  a long option written shorter than the listed one it may stand for now has its value
  judged and the next word read as an operand as well;
- argument files: binutils' `strings @FILE` reads FILE as more arguments (and prints
  them back in its error), and `hexdump -f FILE` reads a format file the same way.

Each case is first run by real bash in a throwaway directory (the secret comes out), then
judged. Attack strings are data here, never pasted into a shell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from stockade.executor.bash import analyze, lists
from stockade.executor.paths import PathSandbox, Root

_PATH = "/usr/bin:/bin"
_SECRET = "hunter2-secret"
_DENIED = ("**/.env",)

# Each prints the denied .env (or a part of it) when bash runs it.
_LEAKS = [
    "grep --color SECRET .env",
    "grep --colour SECRET .env",
    "grep -n --color SECRET .env",
    "diff --unified .env a.txt",
    "diff --context .env a.txt",
    "diff --color .env a.txt",
    "date --iso-8601 -f .env",
    "date -I -f .env",
    "date --iso -f .env",
    "jq -R --tab . .env",
    "jq --seq -R . .env",
    "strings @.env",
    "strings -n 3 @.env",
    "hexdump -f.env a.txt",
    "hexdump -f .env a.txt",
    "hexdump --format-file=.env a.txt",
    "uniq --group .env",
]

# The same classes, judged only (the program may be missing here, or prints no content).
_VARIANTS = [
    "grep --colo SECRET .env",
    "egrep --color=always -i SECRET .env",
    "fgrep --colour SECRET /etc/shadow",
    "diff --unif .env a.txt",
    "date --iso-8601 --file .env",
    "date -I --file=.env",
    "jq --tab --seq -R . .env",
    "strings @/etc/shadow",
    "strings -a @~/.ssh/id_rsa",
    "hexdump -C -f/etc/shadow a.txt",
    "uniq --all-repeated .env",
    "od --width .env",
    "od --strings .env",
    "du --time .env",
    "du --time /etc/shadow",
    "ls --color ~/.ssh",
    "ls --hyperlink --color ~/.aws",
]

# Ordinary read-only commands of the same shapes stay allowed.
_ORDINARY = [
    "grep --color=auto -n hello a.txt",
    "grep --color hello a.txt",
    "diff --unified=3 a.txt b.txt",
    "diff -U 3 a.txt b.txt",
    "diff --context a.txt b.txt",
    "date -Iseconds",
    "date --iso-8601=seconds",
    "ls --color=auto -la",
    "ls --color",
    "jq --tab . a.json",
    "jq --indent 4 . a.json",
    "od -w16 -c a.txt",
    "du --time a.txt",
    "df --output=source .",
    "hexdump -C a.txt",
    "strings a.txt",
    "uniq --group a.txt",
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / ".env").write_text(f"SECRET={_SECRET}\n")
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "b.txt").write_text("hello there\n")
    (tmp_path / "a.json").write_text('{"a": 1}\n')
    return tmp_path


def _judge(command: str, root: Path) -> str:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    return analyze(command, sandbox=sandbox, denied_read_globs=_DENIED).verdict


def _bash(command: str, cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=cwd,
        env={"PATH": _PATH, "HOME": str(cwd), "LC_ALL": "C"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.stdout + done.stderr


@pytest.mark.parametrize("command", _LEAKS)
def test_bash_prints_the_secret_and_the_checker_refuses(command: str, workspace: Path) -> None:
    program = command.split()[0]
    assert shutil.which(program, path=_PATH), f"{program} is not installed here"
    assert _SECRET in _bash(command, workspace)
    assert _judge(command, workspace) == "deny"


@pytest.mark.parametrize("command", _VARIANTS)
def test_variants_of_the_class_are_refused(command: str, workspace: Path) -> None:
    assert _judge(command, workspace) in ("deny", "ask")
    assert _judge(command, workspace) != "allow"


@pytest.mark.parametrize("command", _ORDINARY)
def test_ordinary_forms_stay_allowed(command: str, workspace: Path) -> None:
    assert _judge(command, workspace) == "allow"


def _opens_after(program: str, words: list[str], directory: Path) -> bool:
    """Whether ``program WORDS... FIFO`` opens the FIFO (it is read as a file)."""
    fifo = directory / "P"
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [program, *words, str(fifo)],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": _PATH, "HOME": str(directory), "LC_ALL": "C"},
    )
    opened = False
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                opened = True
                break
            except OSError:
                time.sleep(0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return opened


def test_pattern_and_filter_programs_take_the_values_the_tables_say(tmp_path: Path) -> None:
    """The option-table test asks `PROG OPTION FIFO`; for grep and jq the word after a flag
    is the pattern or filter, so that probe cannot see a flag listed as a value option.
    Here a pattern comes first: `PROG OPTION . FIFO` opens FIFO only when OPTION took no
    value, which a listed value option must not do."""
    probed = 0
    wrong: list[tuple[str, str]] = []
    for name, spec in sorted(lists.SAFE_COMMANDS.items()):
        if spec.operands not in ("pattern_then_paths", "filter_then_paths"):
            continue
        program = shutil.which(name, path=_PATH)
        if program is None or name in ("awk", "gawk", "mawk", "nawk", "sed"):
            continue
        for option in sorted(spec.value_options - spec.pattern_options):
            probed += 1
            if _opens_after(program, [option, "."], tmp_path):
                wrong.append((name, option))
    assert probed >= 20
    assert not wrong, f"these options do not take the next word as a value: {wrong}"


# What each program needs around `OPTION WORD` so that WORD, if not the option's value,
# is a file it looks at.
_AROUND: dict[str, tuple[list[str], list[str]]] = {
    "grep": (["."], []),
    "egrep": (["."], []),
    "fgrep": (["."], []),
    "diff": ([], ["a"]),
    "date": (["-f"], []),
}


def test_optional_value_options_never_take_the_next_word(tmp_path: Path) -> None:
    """Every option listed as optional really is: after `PROG OPTION missing`, the program
    complains that the file `missing` does not exist (it did not take it as a value)."""
    (tmp_path / "a").write_text("x\n")
    probed = 0
    wrong: list[tuple[str, str]] = []
    for name, spec in sorted(lists.SAFE_COMMANDS.items()):
        program = shutil.which(name, path=_PATH)
        if program is None or not spec.optional_options:
            continue
        before, after = _AROUND.get(name, ([], []))
        for option in sorted(spec.optional_options):
            probed += 1
            done = subprocess.run(
                [program, option, *before, "missing-Q", *after],
                cwd=tmp_path,
                env={"PATH": _PATH, "HOME": str(tmp_path), "LC_ALL": "C"},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if "missing-Q" not in done.stderr or "No such file" not in done.stderr:
                wrong.append((name, option))
    assert probed >= 15
    assert not wrong, f"these options took the next word as their value: {wrong}"
