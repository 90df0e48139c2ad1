"""Pattern syntax, normalisation and the index (DEC-1, DEC-2)."""

from __future__ import annotations

import pytest

from stockade.decision.rules import (
    Effect,
    Rule,
    RuleIndex,
    Source,
    call_content,
    compile_rule,
    normalize_command,
    normalize_path,
    parse_pattern,
)
from stockade.errors import InvalidPattern


def matches(effect: Effect, rule_pattern: str, tool: str, cwd: str = "/w", **args: str) -> bool:
    c = compile_rule(Rule(effect, rule_pattern, Source.MANAGED), 0, cwd=cwd)
    content = call_content(tool, args, cwd=cwd)
    if effect is Effect.ALLOW:
        if tool == "run_bash":
            return all(c.allows_command(s) for s in content.allow_sub_commands)
        return c.allows(content)
    return c.matches(content)


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("", "empty"),
        ("run_bash(git *", "unbalanced parenthesis"),
        ("run_bash)", "unbalanced parenthesis"),
        ("run_bash()", "empty content"),
        ("run bash", "bad tool name"),
        ("(x)", "bad tool name"),
    ],
)
def test_bad_patterns_name_the_pattern_and_problem(pattern: str, problem: str) -> None:
    """DEC-7: invalid patterns are rejected naming the pattern and the problem."""
    with pytest.raises(InvalidPattern) as err:
        parse_pattern(pattern)
    assert err.value.metadata == {"pattern": pattern, "problem": problem}
    assert repr(pattern) in err.value.message or pattern == ""


def test_pattern_forms() -> None:
    assert parse_pattern("*").tool is None
    assert parse_pattern("read_file").content is None
    assert parse_pattern("run_bash(echo (x))").content == "echo (x)"
    assert parse_pattern("*(sudo)").tool is None
    assert parse_pattern("run_bash(*)").content is None


@pytest.mark.parametrize(
    ("effect", "pattern", "tool", "args", "expected"),
    [
        (Effect.DENY, "*", "anything", {}, True),
        (Effect.DENY, "run_bash", "read_file", {"file_path": "x"}, False),
        (Effect.DENY, "run_bash(git *)", "run_bash", {"command": "git push"}, True),
        (Effect.DENY, "run_bash(*--force)", "run_bash", {"command": "git push --force"}, True),
        (Effect.DENY, "run_bash(*force*)", "run_bash", {"command": "git push --force x"}, True),
        (Effect.DENY, "run_bash(curl)", "run_bash", {"command": "x=$(curl evil)"}, True),
        (Effect.DENY, "*(sudo)", "run_bash", {"command": "sudo ls"}, True),
        (Effect.DENY, "*(sudo)", "glob_files", {"pattern": "sudo*"}, True),
        (Effect.DENY, "*(evil.com)", "fetch", {"url": "https://evil.com/x"}, True),
        # a DENY/ASK rule matches any content field present, not only the primary one
        (Effect.DENY, "grep_files(*.env)", "grep_files", {"path": "/w", "pattern": "x.env"}, True),
        # ALLOW rules: bare content must equal the whole content
        (Effect.ALLOW, "run_bash(git status)", "run_bash", {"command": "git status"}, True),
        (Effect.ALLOW, "run_bash(git status)", "run_bash", {"command": "git status -s"}, False),
        (Effect.ALLOW, "run_bash(git)", "run_bash", {"command": "git push"}, False),
        (Effect.ALLOW, "run_bash(git *)", "run_bash", {"command": "  git   push "}, True),
        (
            Effect.ALLOW,
            "run_bash(/usr/bin/git status)",
            "run_bash",
            {"command": "git status"},
            True,
        ),
        # ALLOW matches the primary field only
        (Effect.ALLOW, "grep_files(*.py)", "grep_files", {"path": "/w", "pattern": "a.py"}, False),
    ],
)
def test_content_matching(
    effect: Effect, pattern: str, tool: str, args: dict[str, str], expected: bool
) -> None:
    """DEC-1: prefix*, *suffix, *mid*, bare substring for DENY/ASK, equality for ALLOW."""
    assert matches(effect, pattern, tool, **args) is expected


@pytest.mark.parametrize(
    "path",
    ["./x/../.env", "/w/.env", "sub//dir/../.env", "/w/a/b/c/.env", "../w/.env", "/w/./.env"],
)
def test_path_normalisation_defeats_dodges(path: str) -> None:
    """DEC-1: path contents are normalised before matching, so `./x/../.env` cannot dodge."""
    assert matches(Effect.DENY, "read_file(*.env)", "read_file", file_path=path)
    assert matches(Effect.DENY, "read_file(**/.env)", "read_file", file_path=path)


def test_star_stays_in_one_directory_and_double_star_crosses() -> None:
    """DEC-1 extension: `**` crosses directories, `*` does not."""
    assert matches(Effect.ALLOW, "read_file(/w/src/*.py)", "read_file", file_path="src/a.py")
    assert not matches(Effect.ALLOW, "read_file(/w/src/*.py)", "read_file", file_path="src/x/a.py")
    assert matches(Effect.ALLOW, "read_file(/w/src/**)", "read_file", file_path="src/x/a.py")
    assert matches(Effect.ALLOW, "read_file(/w/src/**/*.py)", "read_file", file_path="src/a.py")
    assert not matches(Effect.ALLOW, "read_file(/w/src/**)", "read_file", file_path="../etc/x")


def test_allow_path_never_matches_more_than_written() -> None:
    """DEC-1: a bare ALLOW path equals the normalised path; a relative one means the cwd."""
    assert matches(Effect.ALLOW, "read_file(README.md)", "read_file", file_path="./README.md")
    assert not matches(
        Effect.ALLOW, "read_file(README.md)", "read_file", file_path="/etc/README.md"
    )
    assert matches(Effect.ALLOW, "read_file(src/*.py)", "read_file", file_path="/w/src/a.py")
    assert not matches(Effect.ALLOW, "read_file(src/*.py)", "read_file", file_path="/tmp/src/a.py")
    # the same relative pattern as a DENY protects every src/ directory
    assert matches(Effect.DENY, "read_file(src/*.py)", "read_file", file_path="/tmp/src/a.py")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/tmp/git status", "git status"),
        ("env git status", "git status"),
        ("GIT_DIR=x git status", "git status"),
        ("env -u HOME A=1 /usr/bin/git   log", "git log"),
        ("timeout -s KILL 5 nice -n 3 rm -rf x", "rm -rf x"),
        ("sudo -u root rm x", "rm x"),
        ("command -p ls", "ls"),
        ("'r'm -rf /", "rm -rf /"),
        ("\\rm -rf /", "rm -rf /"),
        ('"/bin/rm" x', "rm x"),
        ("env 'rm' x", "rm x"),
        ("X='a b' rm x", "rm x"),
    ],
)
def test_command_name_normalisation(raw: str, expected: str) -> None:
    """DEC-1: assignments and wrappers are looked through and paths reduced to the name."""
    assert normalize_command(raw) == expected


def test_privilege_wrappers_are_kept_for_allow() -> None:
    assert normalize_command("sudo git status", look_through_privilege=False) == "sudo git status"
    # env may set variables (LD_PRELOAD=...): not transparent, so ALLOW keeps it
    assert normalize_command("env git status", look_through_privilege=False) == "env git status"


def test_normalize_path() -> None:
    assert normalize_path("a//b/./../c", "/w") == "/w/a/c"
    assert normalize_path("//etc//passwd", "/w") == "/etc/passwd"
    assert normalize_path("../../..", "/w") == "/"


def test_escaped_star_is_literal() -> None:
    """Grant patterns escape `*` so "always allow `ls *.py`" allows only that text."""
    assert matches(Effect.ALLOW, r"run_bash(ls \*.py)", "run_bash", command="ls *.py")
    assert not matches(Effect.ALLOW, r"run_bash(ls \*.py)", "run_bash", command="ls a.py")


def test_index_returns_only_rules_for_the_tool_in_order() -> None:
    """DEC-1: rules are indexed by tool name; wildcard-tool rules apply to every tool."""
    rules = [
        Rule(Effect.DENY, "read_file(*.pem)", Source.MANAGED),
        Rule(Effect.DENY, "*(sudo)", Source.MANAGED),
        Rule(Effect.ALLOW, "run_bash", Source.MANAGED),
        Rule(Effect.DENY, "read_file(**/.env)", Source.ENV),
    ]
    deny, ask, allow = RuleIndex(rules).for_tool("read_file")
    assert [c.rule.pattern for c in deny] == ["read_file(*.pem)", "*(sudo)", "read_file(**/.env)"]
    assert ask == () and allow == ()
    assert [c.rule.pattern for c in RuleIndex(rules).for_tool("run_bash")[2]] == ["run_bash"]
