"""The sed and awk program scanners."""

from __future__ import annotations

import pytest

from stockade.executor.bash.programs import awk_effects, sed_effects, strip_awk_literals


@pytest.mark.parametrize(
    ("script", "execute", "writes", "reads", "unknown"),
    [
        ("s/a/b/g", False, (), (), False),
        ("1,20p", False, (), (), False),
        ("/start/,/end/d; $q", False, (), (), False),
        ("y/abc/xyz/", False, (), (), False),
        ("s|/usr|/opt|2", False, (), (), False),
        ("/x/{p;d}", False, (), (), False),
        ("a appended text", False, (), (), False),
        ("1e id", True, (), (), False),
        ("s/x/id/e", True, (), (), False),
        ("s/x/y/w out.txt", False, ("out.txt",), (), False),
        ("w /tmp/copy", False, ("/tmp/copy",), (), False),
        ("w /dev/stdout", False, (), (), False),
        ("r /etc/shadow", False, (), ("/etc/shadow",), False),
        ("2R other.txt", False, (), ("other.txt",), False),
        ("# comment\np", False, (), (), True),
        ("s/unterminated", False, (), (), True),
        ("s/a/b/Z", False, (), (), True),
        ("k", False, (), (), True),
    ],
)
def test_sed_effects(
    script: str, execute: bool, writes: tuple[str, ...], reads: tuple[str, ...], unknown: bool
) -> None:
    effects = sed_effects(script)
    assert (effects.execute, effects.writes, effects.reads, effects.unknown) == (
        execute,
        writes,
        reads,
        unknown,
    )


@pytest.mark.parametrize(
    ("program", "stripped"),
    [
        ('{print "a|b > c"}', '{print ""}'),
        ("/a|b/ {n++}", "// {n++}"),
        ("$1 ~ /x|y/", "$1 ~ //"),
        ("{x = a / b / c}", "{x = a / b / c}"),
        ('{i--/2; print | "sh"}', '{i--/2; print | ""}'),
        ('/"/ ; system("sh") ; /"/', '// ; system("") ; //'),
        ("/[/]|x/ {print}", "// {print}"),
        ("{print} # a | comment", "{print} "),
    ],
)
def test_awk_literals_are_blanked_as_awk_lexes_them(program: str, stripped: str) -> None:
    assert strip_awk_literals(program) == stripped


@pytest.mark.parametrize(
    ("program", "runs", "writes", "reads", "argv"),
    [
        ("{print $1}", False, (), (), False),
        ("$3 > 100 {print $1}", False, (), (), False),  # a comparison, not a redirect
        ("{ if ($1 > 3) print $2 }", False, (), (), False),
        ("{ print (a > b) }", False, (), (), False),
        ('{print "a > b | c"}', False, (), (), False),
        ("/a|b/ {n++} END {print n}", False, (), (), False),
        ('BEGIN{print ENVIRON["HOME"]}', False, (), (), False),
        ('{print > "out.txt"}', False, ("out.txt",), (), False),
        ('{print $1 >> "log"}', False, ("log",), (), False),
        # A newline after a comma continues the statement: the redirect is print's.
        ('BEGIN{printf "x",\n "y" > "/etc/passwd"}', False, ("/etc/passwd",), (), False),
        ('BEGIN{print "x",\n\n "y" > "f"}', False, ("f",), (), False),
        ('BEGIN{print "x" \\\n > "f"}', False, ("f",), (), False),
        ('{printf("%s", $0) > "f"}', False, ("f",), (), False),
        ("{print $1 > $2}", False, (None,), (), False),
        (
            'BEGIN { while ((getline line < "/etc/shadow") > 0) print line }',
            False,
            (),
            ("/etc/shadow",),
            False,
        ),  # fmt: skip
        ("BEGIN { getline x < f }", False, (), (None,), False),
        ('BEGIN{ARGV[1]="/etc/shadow"; ARGC=2} {print}', False, (), (), True),
        ("{ split($0, ARGV) }", False, (), (), True),
        ('BEGIN { ENVIRON["X"] = 1 }', False, (), (), True),
        ("BEGIN { ARGC++ }", False, (), (), True),
        ('BEGIN{system("id")}', True, (), (), False),
        ('BEGIN{system\n("id")}', True, (), (), False),
        ('{ "date" | getline d }', True, (), (), False),
        ('{ print |& "cat" }', True, (), (), False),
        ('BEGIN{f="system"; @f("id")}', True, (), (), False),
        ('@load "filefuncs"', True, (), (), False),
        ('# print > "x"\n{print}', False, (), (), False),  # a comment
    ],
)
def test_awk_effects_from_tokens(
    program: str,
    runs: bool,
    writes: tuple[str | None, ...],
    reads: tuple[str | None, ...],
    argv: bool,
) -> None:
    effects = awk_effects(program)
    assert (bool(effects.runs), effects.writes, effects.reads, effects.argv) == (
        runs,
        writes,
        reads,
        argv,
    )
    assert not effects.unknown


def test_an_unterminated_awk_string_is_unknown() -> None:
    assert awk_effects('{print "x}').unknown
