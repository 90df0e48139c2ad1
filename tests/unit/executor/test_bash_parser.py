"""The tree-sitter walk: every simple command, redirect and assignment, with word facts."""

from __future__ import annotations

import pytest

from stockade.executor.bash.parser import parse


def names(source: str) -> list[str | None]:
    result = parse(source)
    assert result.error is None, result.error
    return [c.name.value for c in result.commands]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("a; b && c || d | e", ["a", "b", "c", "d", "e"]),
        ("a $(b) `c`", ["a", "b", "c"]),
        ("a <(b) >(c)", ["a", "b", "c"]),
        ('a "$(b "$(c)")"', ["a", "b", "c"]),
        ("(a; (b))", ["a", "b"]),
        ("{ a; { b; }; }", ["a", "b"]),
        ("f() { a; }; f", ["a", "f"]),
        ("function g { a; }", ["a"]),
        ("if a; then b; elif c; then d; else e; fi", ["a", "b", "c", "d", "e"]),
        ("while a; do b; done; until c; do d; done", ["a", "b", "c", "d"]),
        ("for x in $(a); do b; done", ["a", "b"]),
        ("for ((i=$(a); i<3; i++)); do b; done", ["a", "b"]),
        ("case $(a) in x) b;; y) c;; esac", ["a", "b", "c"]),
        ("[[ -n $(a) ]] && b", ["a", "b"]),
        ("echo $(( $(a) + 1 ))", ["echo", "a"]),
        ("echo ${x:-$(a)} ${y/$(b)/z}", ["echo", "a", "b"]),
        ("x[$(a)]=1", ["a"]),
        ("x=$(a) y=`b` c", ["c", "a", "b"]),
        ("export X=$(a)", ["export", "a"]),
        ("cat <<EOF\n$(a)\n`b`\nEOF", ["cat", "b", "a"]),
        ("cat <<EOF\n${x:-`a`} `b`\nEOF", ["cat", "b", "a"]),
        ('echo "${x:-`a`}" ${y/`b`/z}', ["echo", "a", "b"]),
        ("echo `echo \\`a\\``", ["echo", "echo", "a"]),
        ("[[ $x =~ `a` ]]", ["a"]),
        ("cat <<'EOF'\n$(a)\nEOF", ["cat"]),
        ("a & b", ["a", "b"]),
        ("! a", ["a"]),
        ("a |& b", ["a", "b"]),
        ("coproc a", ["coproc"]),
        ("a > $(b)", ["a", "b"]),
        ("a <<< $(b)", ["a", "b"]),
    ],
)
def test_every_position_is_found_in_source_order(source: str, expected: list[str]) -> None:
    assert names(source) == expected


def test_quote_removal_and_word_facts() -> None:
    (cmd,) = parse("""x 'a b' "c\\"d" e\\ f $'\\x41\\n' g*.txt "h*" $v "$(y)"z""").commands[:1]
    values = [w.value for w in cmd.args]
    assert values == ["a b", 'c"d', "e f", "A\n", "g*.txt", "h*", None, None]
    quoted = [w.quoted for w in cmd.args]
    assert quoted == [True, True, True, True, False, True, False, True]
    globs = [w.glob for w in cmd.args]
    assert globs == [False, False, False, False, True, False, False, False]
    assert [w.expanded for w in cmd.args][-2:] == [True, True]


@pytest.mark.parametrize(
    ("source", "value", "quoted"),
    [
        ("rm", "rm", False),
        ("'r''m'", "rm", True),
        ('"rm"', "rm", True),
        ("\\rm", "rm", True),
        ("r\\m", "rm", True),
        ("$'\\x72m'", "rm", True),
        ("$'\\162m'", "rm", True),
        ("$'\\u0072m'", "rm", True),
        ("$'r\\cAm'", "r\x01m", True),
        ("/usr/bin/rm", "/usr/bin/rm", False),
    ],
)
def test_command_names_are_unquoted_and_flagged(source: str, value: str, quoted: bool) -> None:
    (cmd,) = parse(source + " x").commands
    assert cmd.name.value == value
    assert cmd.name.quoted is quoted


def test_home_expansion_is_tracked_for_paths() -> None:
    (cmd,) = parse('cat $HOME/.ssh/id_rsa "${HOME}/x" $HOMEX/y a$HOME').commands
    assert [w.path_value for w in cmd.args] == ["~/.ssh/id_rsa", "~/x", None, None]


def test_redirects_with_operators_descriptors_and_targets() -> None:
    result = parse("a > o1 2>> o2 &> o3 < i1 2>&1 >&- <<EOF > o4\nx\nEOF\nb <<< s")
    got = [(r.op, r.fd, r.target.value if r.target else None) for r in result.redirects]
    assert ("<<", None, None) in got
    assert ("<<<", None, None) in got
    for expected in [
        (">", None, "o1"),
        (">>", "2", "o2"),
        ("&>", None, "o3"),
        ("<", None, "i1"),
        (">&", "2", "1"),
        (">", None, "o4"),
    ]:
        assert expected in got, got


def test_redirects_on_groups_loops_and_subshells_are_found() -> None:
    result = parse("{ a; } > g; (b) > s; while c; do d; done > w; f() { e; } > fn")
    targets = [r.target.value for r in result.redirects if r.target]
    assert targets == ["g", "s", "w", "fn"]


def test_assignments_from_every_form() -> None:
    result = parse(
        "A=1 cmd; B=$(x); export C=2 D; local E; for F in 1; do :; done; : ${G:=1} ${H=2} ${I:-3}"
    )
    assert [a.name for a in result.assignments] == ["A", "B", "C", "D", "E", "F", "G", "H"]
    assert result.assignments[0].value is not None
    assert result.assignments[0].value.value == "1"
    assert result.assignments[1].value is not None
    assert result.assignments[1].value.value is None


def test_recursive_functions_are_reported() -> None:
    assert parse(":(){ :|:& };:").recursive_functions == (":", ":")
    assert parse("f() { g; }; g() { echo; }").recursive_functions == ()
    assert parse("f() { if x; then f; fi; }").recursive_functions == ("f",)


def test_text_evaluated_as_code_later_is_reported() -> None:
    assert parse("x='a[$(id)]'").evaluated_texts == ("a[$(id)]",)
    assert parse("[[ $x -eq 'a[$(id)]' ]]").evaluated_texts == ("a[$(id)]",)
    assert parse("declare y='`id`'").evaluated_texts == ("`id`",)
    assert parse("echo '$(id)'").evaluated_texts == ()


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ('echo "a', "syntax error"),
        ("if true; then ls", "syntax error"),
        ("ls )", "syntax error"),
        ("echo $(", "syntax error"),
        ("echo ${x:-$(}", "syntax error"),
        ("echo `echo \\$(a)`", "syntax error"),
        ("python3 - <<EOF\nx\nEOF", "did not understand"),
        ("cat <<EOF\nE\\\nOF\nsudo id\nEOF", "backslash-newline"),
        ("echo " + "$(" * 100 + "x" + ")" * 100, "nesting"),
    ],
)
def test_what_cannot_be_parsed_is_an_error(source: str, fragment: str) -> None:
    result = parse(source)
    assert result.error is not None and fragment in result.error
    assert result.commands == ()


def test_arithmetic_contexts_report_the_variables_they_evaluate() -> None:
    result = parse(
        "echo $((a + b)) ${arr[c]} ${s:d:e}; ((f++)); [[ $g -eq 1 && -n $h ]]; "
        "for ((i=0; i<j; i++)); do :; done; echo $(( $(k) ))"
    )
    # `$(k)`: not the name k (a command there), but its output, evaluated as arithmetic.
    expected = {"a", "b", "c", "d", "e", "f", "g", "i", "j", "$(k)"}
    assert set(result.arithmetic_names) == expected


def test_for_loops_over_static_words_assign_a_known_value() -> None:
    one, two, globbed = parse("for x in 1 2; do :; done; for y in *; do :; done").assignments
    # Every static value is an assignment of its own (`for y in 1 'a[$(id)]'` feeds both
    # values to arithmetic); a glob names files, known only at run time.
    assert [one.value and one.value.value, two.value and two.value.value] == ["1", "2"]
    assert globbed.name == "y" and globbed.value is None


@pytest.mark.parametrize(
    "source", ["{\U000dd9d6", "echo {\U0009c6ca,", "echo \udc80", "echo \U000e0041", "ls \ud800"]
)
def test_characters_that_crash_or_cannot_be_encoded_are_refused(source: str) -> None:
    # `{` + a plane 3-16 code point segfaults tree-sitter-bash's scanner: never parsed.
    result = parse(source)
    assert result.error is not None and "not accepted" in result.error


def test_ordinary_unicode_is_parsed() -> None:
    assert names("echo 日本語 😀 {é,ü} $'\u00e9'") == ["echo"]


def test_comments_only_is_empty() -> None:
    assert parse("# nothing here\n# at all").empty
    assert not parse("ls # list").empty
    assert names("ls # ; rm -rf ~") == ["ls"]


def test_commands_inside_functions_know_their_function() -> None:
    result = parse("f() { a; g() { b; }; }; c")
    assert [(c.name.value, c.in_function) for c in result.commands] == [
        ("a", "f"),
        ("b", "g"),
        ("c", None),
    ]


@pytest.mark.parametrize(
    "source",
    [
        "ls -la | grep -v x && echo done > /tmp/log 2>&1; cd src || exit 1",
        "a=(1 2); echo ${a[@]:1:2} ${!b} ${c@P} $((x + 1)) [[ -v y && z -eq 1 ]] <(z) >(w)",
        "for ((i=0; i<3; i++)); do f() { :; }; f; done; case $x in y|z) ;; esac",
        "cat <<EOF | tee x\nbody $(id) `id`\nEOF\nwhile read -r l; do echo \"$l\"; done <<< 'w'",
        'echo $\'\\x41\' "a${b}c" $"t" {a,b} *.py ~/x \\$y # comment',
        "export A=1; declare -x B; unset C; local D=2; select s in a b; do :; done",
        "echo $(",  # ERROR and MISSING nodes: kinds past the table
        "if then fi",
        "echo 'unterminated",
    ],
)
def test_kind_table_names_every_node_as_node_type(source: str) -> None:
    """The walk reads node kinds from a table by symbol id (cheaper than ``node.type``);
    the table must name every node exactly as ``node.type`` does, error nodes included."""
    from stockade.executor.bash.parser import _PARSER, _kind

    stack = [_PARSER.parse(source.encode()).root_node]
    seen = 0
    while stack:
        node = stack.pop()
        assert _kind(node) == node.type
        seen += 1
        stack.extend(node.children)
    assert seen > 3
