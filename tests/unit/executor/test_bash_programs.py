"""The sed and awk program scanners."""

from __future__ import annotations

import pytest

from stockade.executor.bash.programs import sed_effects, strip_awk_literals


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
