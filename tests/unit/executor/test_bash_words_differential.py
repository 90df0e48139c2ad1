"""Differential fuzz test (EXE-8a): the checker's command boundaries and words against bash's.

Hypothesis builds scripts out of the pieces where a grammar and bash are known to disagree
(control characters, quoting, escapes, line continuations, comments, braces, expansions,
non-ASCII blanks). Every command name in them is one that does not exist (`c1`, `c2` ...)
and PATH is an empty directory, so real bash runs nothing: for each simple command it
calls ``command_not_found_handle``, which records the words bash really made. Each
command bash ran must be one the checker reported, with the same words wherever the
checker knows them statically. A script the checker refuses outright is safe whatever
bash would do. This is the test that finds the next class of parser divergence.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

BASH = shutil.which("bash") or "/bin/bash"

NAMES = ["c1", "c2", "c3"]

# Pieces of a word: where bash and tree-sitter-bash might read characters differently.
PIECES = [
    "a",
    "-x",
    "--o=v",
    "b=c",
    "'q w'",
    "'#'",
    '"d e"',
    '"$u"',
    '"${u:-c}"',
    "\\ ",
    "\\#",
    "#",
    "a#b",
    "\\\n",
    "\\\\",
    "\\'",
    '\\"',
    "{a,b}",
    "{1..3}",
    "{x,{y,z}}",
    "x{,-o}",
    "{a\\,b,c}",
    "'{'a,b}",
    "\\{a,b}",
    "{}",
    "{a}",
    "*",
    "?",
    "[ab]",
    "$'\\x41'",
    "$'a\\'b'",
    "$'\\t'",
    '$"t"',
    "$u",
    "${u}",
    "${u:-z}",
    "~",
    "%",
    "=",
    ":",
    "é",
    "\u00a0",
    "\u2028",
    "\u3000",
    "\u200b",
    "\t",
    "\r",
    "\x0c",
    "$((1+2))",
    "$[1]",
    "!",
    "c1=x",
    "x=",
    ">/dev/null",
    "2>&1",
    "<<<w",
    "$(c2 w)",
    '"`c3`"',
    "${u:-'x y'}",
    "${u#*}",
    "$'\\u00e9'",
    "$'\\c@'",
    "'\\''",
    "{",
    "}",
    ",",
    "..",
    "a{}x,y}",
    "{x}y,z}",
    ")",
    "&",
    ";;",
    "--",
    "$i",
    '"$i"',
    "${i}",
    # `{NAME}` right before a redirection: bash stores the descriptor in NAME, it is no
    # argument (found by a red-team pass, session 7).
    "{v}>/dev/null",
    "{v}<<<w",
    "{a[1]}>&2",
    " == ",
    " =~ ",
]

SEPARATORS = [" ; ", "\n", " && ", " || ", " | ", ";", "\n\n", " \\\n; "]

WORD = st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map("".join)
NAME = st.sampled_from([*NAMES, "'c1'", "c\\2", "c{3,4}"])


FORMS = [
    "{}",
    "( {} )",
    "{{ {}; }}",
    "c1 $({})",
    "c2 `{}`",
    'c3 "$({})"',
    "if {}; then c2; fi",
    "for i in a b; do {}; done",
    "for i in 'x y' -c '*'; do {}; done",
    "IFS=a; for i in bab; do {}; done",
    "case a in a) {};; esac",
    "f() {{ {}; }}; f",
    "x=1 {}",
    "{} >/dev/null",
    "! {}",
    "c1 <<EOF\n$({})\nEOF\n",
    # An expansion starting a body line after blanks: the grammar dropped it (session 3).
    # (`:` after the body: any separator may follow it and bash still runs the line.)
    "c1 <<EOF\n\t$({})\nEOF\n:",
    "c1 <<-EOF\n\t\t$({})\n\tEOF\n:",
    "c2 <<EOF\nw\n  ${{u:-$({})}}\nEOF\n:",
    "c2 ${{u:-$({})}}",
]


@st.composite
def simple_command(draw: st.DrawFn) -> str:
    words = draw(st.lists(WORD, max_size=4))
    return " ".join([draw(NAME), *words])


@st.composite
def statement(draw: st.DrawFn) -> str:
    inner = draw(simple_command())
    form = draw(st.sampled_from(FORMS))
    return form.format(inner)


SCRIPT = st.lists(st.tuples(statement(), st.sampled_from(SEPARATORS)), min_size=1, max_size=3).map(
    lambda parts: "".join(s + sep for s, sep in parts)
)

# One record is one write: the stages of a pipeline run the handler at the same time,
# and a record written in two pieces interleaved with another stage's (words of both
# commands in one record, then an empty one; seen as a flaky failure).
HANDLER = (
    "command_not_found_handle() {\n"
    "  local __record\n"
    "  printf -v __record '%s\\037' \"$@\"\n"
    '  printf \'%s\\036\' "$__record" >> "$__RECORDS"\n'
    "  return 0\n"
    "}\n"
)


@pytest.fixture(scope="module")
def places() -> Iterator[tuple[Path, Path, Path]]:
    """(an empty working directory, an empty PATH directory, the handler file)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "cwd").mkdir()
        (root / "bin").mkdir()
        handler = root / "handler.sh"
        handler.write_text(HANDLER)
        yield root / "cwd", root / "bin", handler


def bash_commands(script: str, places: tuple[Path, Path, Path]) -> list[tuple[str, ...]]:
    """The words of every simple command real bash ran for ``script``."""
    cwd, path_dir, handler = places
    for leftover in cwd.iterdir():  # files an earlier script made (`>&1ab`): globs stay literal
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    records = cwd.parent / "records"
    records.write_bytes(b"")
    subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", script],
        cwd=cwd,
        env={
            "PATH": str(path_dir),
            "BASH_ENV": str(handler),
            "__RECORDS": str(records),
            "LC_ALL": "C.UTF-8",
        },  # fmt: skip
        capture_output=True,
        timeout=20,
        check=False,
    )
    data = records.read_bytes().decode("utf-8", "surrogateescape")
    out = []
    for record in data.split("\x1e")[:-1]:
        out.append(tuple(record.split("\x1f")[:-1]))
    return out


def check(script: str, places: tuple[Path, Path, Path]) -> bool:
    """Assert the checker saw every command bash ran; False when it refused the script."""
    cwd = places[0]
    result = analyze(script, sandbox=PathSandbox([Root(str(cwd), True)], str(cwd)))
    if result.verdict == "deny" and any("cannot be parsed" in r for r in result.reasons):
        return False
    seen = [(c.name, c.argv) for c in result.commands]
    # Every command bash ran (a loop runs one several times) is one the checker reported:
    # with the same words, or with a word only known at run time (an argument with `$` or
    # a backtick; `~` is the home directory, which the analysis expands when it judges
    # paths).
    for words in bash_commands(script, places):
        name, args = words[0], words[1:]
        assert any(
            (seen_name == name or any(c in seen_name for c in "$`"))
            and (argv == args or any(c in a for a in argv for c in "$`~"))
            for seen_name, argv in seen
        ), f"bash ran {words!r} but the checker saw {seen!r} in {script!r} ({result.verdict})"
    return True


@settings(max_examples=300)
@given(script=SCRIPT)
def test_checker_words_match_bash(script: str, places: tuple[Path, Path, Path]) -> None:
    check(script, places)


HANDWRITTEN = [
    "c1 a{b,c}d {1..2} x\\ y 'q r' \"s t\"",
    "c1 a#b #c2\nc3",
    "c1 \\\nc2",
    "c1 {a,'b c'} {x\\,y,z}",
    "c1 $'a\\tb' \"$u\"x",
    "c1 {-c,-x}; c2 | c3",
    "{ c1 x; } && ( c2 y ) || c3 z",
    "c1 $(c2 in) `c3 bq`",
    "c1 {{a,b},{c,d}}e {z..x} {01..3}",
    "c1 {{a,b} a{b,c",  # an unclosed `{` is literal, the next one may open a list
    "c1 == x =~ y",  # the grammar took `==`/`=~` for operators and dropped them
]


@pytest.mark.parametrize("script", HANDWRITTEN)
def test_handwritten_words_match_bash(script: str, places: tuple[Path, Path, Path]) -> None:
    assert check(script, places), "these must be understood, not refused"


@pytest.mark.parametrize(
    "script",
    [
        "c1 \\  -x",  # `\ ` is a word to bash; tree-sitter drops it
        "c1 [ab]\\#",  # one word to bash, two to tree-sitter
        "c1 -\\\nc",  # bash joins the lines into `-c`
        "c1 \u2028-x",  # a Unicode blank: part of the word to bash
        "c1 a\u00a0b",
        "c1 a\r#-x",
        "c1 a\\\n#-x",  # bash joins `a#-x`; tree-sitter reads a comment
        "c1 >/dev/null\\\na",  # the target is /dev/nulla to bash
        "c1 <<<w\\\na",
        "c1 && c1 >/dev/null a",  # `a` is the second c1's argument
        "c1 { {",  # one word `{ {` to tree-sitter, two to bash
        "c1 &--o=v",  # an assignment to tree-sitter, a command to bash
        "c2 `c1 \\\\ a`",  # inside backticks `\\ ` is `\ `: a word of its own
        "c1 {v}>/dev/null",  # no argument to bash: v is set to the new descriptor
        "c1 a {v}<<<w",
        "c1 {a[1]}>&2",
        "c1 =~{v}",  # one word to bash; an operator and a word to the grammar
    ],
)
def test_divergences_found_by_the_fuzzer_are_refused(
    script: str, places: tuple[Path, Path, Path]
) -> None:
    ran = bash_commands(script, places)
    # bash runs them, with words the grammar misreads (in any order: `c1 &--o=v` runs c1 in
    # the background while `--o=v` runs in the foreground, so either may be recorded first)
    assert ran and any(words[0] == "c1" for words in ran)
    assert not check(script, places)


def test_words_after_a_redirection_are_arguments(places: tuple[Path, Path, Path]) -> None:
    # tree-sitter hangs them on the redirection: `cat >/dev/null /etc/shadow` was allowed.
    script = "c1 >/dev/null a 2>&1 -b </dev/null c"
    assert bash_commands(script, places) == [("c1", "a", "-b", "c")]
    assert check(script, places)
    result = analyze("cat >/dev/null /etc/shadow")
    assert result.verdict == "deny"


def test_the_record_is_real(places: tuple[Path, Path, Path]) -> None:
    # The harness itself: bash's words for a known script.
    assert bash_commands("c1 {a,b} 'x y'; c2", places) == [("c1", "a", "b", "x y"), ("c2",)]
    assert os.path.exists(places[2])
