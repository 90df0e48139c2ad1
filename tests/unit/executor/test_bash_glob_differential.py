"""Pathname patterns as bash matches them (EXE-8a, EXE-8c), compared with real bash.

The checker looks at what a glob matches (a denied secret, a symlink out of the roots, a
file named like an option) with Python's glob, whose patterns are not bash's: `[^x]`
negates in bash and is a literal `^` to Python, and POSIX classes (`[[:alpha:]]`),
equivalence classes and collating symbols are bash's only. `cat .[^x]nv` and
`cat .[[:alpha:]]nv` read `.env` in bash while the checker matched nothing and allowed
them. The checker now translates bash's pattern into one that matches at least what bash
matches (executor/bash/globsyntax.py). This test asks bash itself, in a throwaway
directory of awkward names, for the matches of generated words (unquoted, quoted and
escaped pieces), and requires the checker's matches to include every one of them.
Attack strings are data here, never typed into a shell of ours.
"""

from __future__ import annotations

import glob as globmod
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.executor.bash import analyze
from stockade.executor.bash.globsyntax import python_glob
from stockade.executor.bash.parser import parse
from stockade.executor.paths import PathSandbox, Root

BASH = shutil.which("bash") or "/bin/bash"
NAMES = [".env", "a", "ab", "-x", "--output=o", "^a", "[x]", "x]", "!a", "E", "é", "a b", "]"]


@pytest.fixture(scope="module")
def names_dir() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        for name in NAMES:
            Path(tmp, name).write_text("x\n")
        yield os.path.realpath(tmp)


def _bash_matches(directory: str, word: str) -> set[str]:
    done = subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", f"shopt -s nullglob; printf '%s\\0' {word}"],
        cwd=directory,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]) & set(NAMES)


def _checker_matches(directory: str, word: str) -> set[str] | None:
    script = parse(f"c1 {word}")
    if script.error is not None:
        return None
    (arg,) = script.commands[0].args
    if arg.value is None or arg.braces is not None:
        return None
    if not arg.glob:
        return {arg.value} & set(NAMES)  # no expansion: the word names itself
    pattern = python_glob(arg.value, mixed_quoting=arg.quoted)
    found = globmod.glob(os.path.join(globmod.escape(directory), pattern))
    return {os.path.basename(m) for m in found}


PIECES = st.sampled_from(
    ["*", "?", "[", "]", "^", "!", "x", "a", ".", "e", "nv", "-", "[:alpha:]", "[:punct:]",
     "[=e=]", "[.a.]", "'['", "'*'", "\\[", "\\*", '"?"', "'x]'", "b", "E", "é"]
)  # fmt: skip


def _class_of(char: str) -> str:
    if char.isalpha():
        return "[[:alpha:]]"
    if char.isdigit():
        return "[[:digit:]]"
    if char.isspace():
        return "[[:space:]]"
    return "[[:punct:]]" if char.isascii() else "?"


def _as_pattern(name: str, choices: list[int]) -> str:
    """A bash word that matches ``name``: each character kept (quoted or escaped when the
    shell would read it), or replaced by ``?``, ``*``, a set, a negated set (``[^…]`` or
    ``[!…]``), a class or an equivalence class."""
    out: list[str] = []
    for k, char in enumerate(name):
        how = choices[k % len(choices)]
        if k == 0 and char == ".":
            how = 0  # a leading dot is matched only by a literal dot
        if how == 1:
            out.append("?")
        elif how == 2:
            out.append("*")
        elif how == 3 and char not in "]^!-":
            out.append(f"[{char}z]")
        elif how == 4 and char != "@":
            out.append("[^@]")
        elif how == 5 and char != "@":
            out.append("[!@]")
        elif how == 6:
            out.append(_class_of(char))
        elif how == 7 and char.isalnum():
            out.append(f"[[={char}=]]")
        elif how == 8:
            out.append("\\" + char)
        elif char.isalnum() or char in ".-=":
            out.append(char)
        else:
            out.append(f"'{char}'")
    return "".join(out)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(NAMES),
    st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=8),
    st.lists(PIECES, min_size=0, max_size=2),
)
def test_the_checker_matches_at_least_what_bash_matches(
    names_dir: str, name: str, choices: list[int], tail: list[str]
) -> None:
    """Words made to match a present name (so bash's side is rarely empty), sometimes
    followed by more pattern pieces."""
    word = _as_pattern(name, choices) + "".join(tail)
    checker = _checker_matches(names_dir, word)
    if checker is None:
        return  # refused or dynamic: not judged by matching
    missed = _bash_matches(names_dir, word) - checker
    assert not missed, (word, missed)


WORDS = [
    ".[^x]nv",
    ".[[:alpha:]]nv",
    ".[[:lower:]]n[[:alpha:]]",
    ".[[=e=]]nv",
    ".e[[.n.]]v",
    "'.'[^x]nv",
    "[[:punct:]]env",
    "'['x]",
    "\\[x]",
    "[]x]",
    "[!]a]",
    "[^[:alpha:]]x",
    "?-output=*",
    "[-]*",
]


@pytest.mark.parametrize("word", WORDS)
def test_fixed_words(names_dir: str, word: str) -> None:
    checker = _checker_matches(names_dir, word)
    assert checker is not None
    assert _bash_matches(names_dir, word) <= checker, word


@pytest.mark.parametrize(
    "command",
    ["cat .[^x]nv", "cat .[[:alpha:]]nv", "head -1 ./.[[:lower:]]n[^a]", "grep x .[[=e=]]nv"],
)
def test_bash_reads_the_secret_and_the_checker_refuses(tmp_path: Path, command: str) -> None:
    ws = Path(os.path.realpath(tmp_path))
    (ws / ".env").write_text("TOKEN=SEKRIT\n")
    done = subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", command],
        cwd=ws,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "SEKRIT" in done.stdout or "x" in command.split()[1]  # grep x prints nothing
    sandbox = PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=("**/.env",))
    result = analyze(command, sandbox=sandbox, denied_read_globs=("**/.env",))
    assert result.verdict in ("ask", "deny") and (result.verdict == "deny" or result.bypass_immune)


def test_a_class_glob_that_can_become_an_option_is_asked(tmp_path: Path) -> None:
    ws = Path(os.path.realpath(tmp_path))
    (ws / "a.txt").write_text("b\na\n")
    (ws / "-o").mkdir()  # `sort [[:punct:]]*` is `sort -o a.txt`: writes a.txt
    (ws / "--output=o").write_text("")
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    result = analyze("sort [[:punct:]]* a.txt", sandbox=sandbox)
    assert result.verdict == "ask" and result.bypass_immune
