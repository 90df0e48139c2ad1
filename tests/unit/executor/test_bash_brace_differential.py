"""Brace expansion as bash does it (EXE-8c), compared with real bash word by word.

The differential fuzz test found two mismatches: a brace list after `{}'{'` (bash closes
a brace expression only after a top-level comma or `..`, so in `a{}x,y}` the first `}` is
text and bash makes `a}x ay`; the checker saw one word), and `c1 & {}` (tree-sitter reads
`{}` as an empty group, bash runs a command named `{}`). The first hid a path from the
checker: `cat {x}y,/etc/shadow}` reads /etc/shadow. Every case runs in real bash inside a
throwaway directory; attack strings are data, never typed into a shell of ours.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.executor.bash import analyze
from stockade.executor.bash.parser import parse
from stockade.executor.paths import PathSandbox, Root

BASH = shutil.which("bash") or "/bin/bash"


def _bash_words(word: str) -> list[str]:
    """The words bash makes of ``word`` (brace expansion, quote removal; no globbing)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [BASH, "--norc", "--noprofile", "-c", f"set -f; printf '%s\\0' {word}"],
            cwd=tmp,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=30,
        )
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def _checker_words(word: str) -> list[str] | None:
    """The words the checker judges for ``word``; None when it refuses the text."""
    script = parse(f"c1 {word}")
    if script.error is not None:
        return None
    (arg,) = script.commands[0].args
    if arg.braces == ():
        return None  # refused as too large or too unusual to follow
    items = arg.braces or (arg,)
    assert all(item.value is not None for item in items)
    return [str(item.value) for item in items]


WORDS = [
    "a{}x,y}",
    "{}x,y}",
    "a{x}y,z}",
    "a{}}x,y}",
    "x{}{a,b}",
    "a{}{}x,y}",
    "{{}x,y}",
    "a{'}'x,y}",
    "a{}'{'x,y}",
    "a{b}{c,d}",
    "a{}'}'x,y}",
    "a{},b}",
    "{a}b,c}",
    "a{{}b,c}",
    "a{1..3}}x,y}",
    "a{x..}y,z}",
    "{a..c}{}x,y}",
    "a{b..q}x{c,d}",
    "{x}y,/etc/shadow}",
    "a{}",
    "a{}b,c",
]


@pytest.mark.parametrize("word", WORDS)
def test_brace_expansion_matches_bash(word: str) -> None:
    assert _checker_words(word) == _bash_words(word), word


def test_a_path_hidden_behind_a_text_brace_is_judged() -> None:
    """bash: `cat x}y /etc/shadow`; the checker once judged one relative path."""
    assert _bash_words("{x}y,/etc/shadow}") == ["x}y", "/etc/shadow"]
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = PathSandbox([Root(tmp, True)], tmp)
        result = analyze("cat {x}y,/etc/shadow}", sandbox=sandbox)
        assert result.verdict == "deny", result.reasons
        result = analyze("cat a{}x,/../../etc/shadow}", sandbox=sandbox)
        assert result.verdict != "allow" and "a/../../etc/shadow" in " ".join(result.reasons)


def test_an_empty_group_is_a_command_to_bash_and_refused() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [BASH, "--norc", "--noprofile", "-c", "c1 & {}; wait"],
            cwd=tmp,
            env={"PATH": tmp},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "{}: command not found" in done.stderr  # bash tried to run `{}`
        sandbox = PathSandbox([Root(tmp, True)], tmp)
        for command in ("c1 & {}", "ls; {}", "{ {}; }", "true && {}"):
            assert analyze(command, sandbox=sandbox).verdict == "deny", command
        assert analyze("echo {}", sandbox=sandbox).verdict == "allow"  # an argument is text


_PIECES = ["a", "x", "1", "3", ",", "{", "}", "{}", "..", "'{'", "'}'", "','", "\\,", "-o", "/"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=9))
def test_brace_expansion_agrees_with_bash_on_generated_words(pieces: list[str]) -> None:
    word = "".join(pieces)
    ours = _checker_words(word)
    if ours is None:
        return  # refused: safe whatever bash makes of it
    assert ours == _bash_words(word), word


def test_the_refusal_of_unusual_shapes_is_a_deny(tmp_path: Path) -> None:
    """A shape the expander will not guess (bash looks at raw quote characters there) is
    refused, not judged as one word."""
    sandbox = PathSandbox([Root(str(tmp_path), True)], str(tmp_path))
    result = analyze("cat {x..y','}", sandbox=sandbox)
    assert result.verdict == "deny", result.reasons
