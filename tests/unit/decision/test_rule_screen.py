"""RuleScreen (the per-tier prefilter): it must say "some rule matches" exactly when one does.

A screen that said "no" while a rule matched would silently drop a DENY or ASK, so the
equivalence is checked on random rules and calls, plus patterns written to confuse a
combined regex (metacharacters, alternation bars, newlines, escaped stars).
"""

from __future__ import annotations

import posixpath
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.decision.rules import (
    BASH_TOOL,
    CompiledRule,
    Effect,
    Rule,
    RuleIndex,
    RuleScreen,
    Source,
    _normalize_both,
    call_content,
    normalize_command,
    normalize_path,
)

TOOLS = ["run_bash", "read_file", "fetch", "glob_files", "tool_x"]
PIECES = [
    "git", "status", "rm", "-rf", "/", "a.b", "a|b", "(x)", "$(id)", "[a-z]", "^", "$", "+",
    "?", "{2}", "\\*", "\\\\", "*", "**", "..", "//", "src", "*.py", "\n", "sudo", "env",
    "X=1", "/usr/bin/git", "'r'm", "\\rm", "https://a.org", ".", "secret",
]  # fmt: skip

words = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map(" ".join)
paths = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("/".join)


@st.composite
def rule_patterns(draw: st.DrawFn) -> str:
    tool = draw(st.sampled_from([*TOOLS, "*"]))
    if draw(st.integers(0, 4)) == 0:
        return tool
    content = draw(st.one_of(words, paths)).replace("(", "").replace(")", "").strip()
    return f"{tool}({content or 'x'})"


@st.composite
def call_args(draw: st.DrawFn) -> dict[str, str]:
    out = {}
    for name in ("command", "file_path", "path", "pattern", "url"):
        if draw(st.booleans()):
            out[name] = draw(st.one_of(words, paths))
    return out


def _tier(index: RuleIndex, tool: str, effect: Effect) -> tuple[CompiledRule, ...]:
    return index.for_tool(tool)[list(Effect).index(effect)]


@settings(max_examples=400, deadline=None)
@given(
    patterns=st.lists(rule_patterns(), max_size=8),
    effect=st.sampled_from(list(Effect)),
    tool=st.sampled_from(TOOLS),
    args=call_args(),
    subs=st.one_of(st.none(), st.lists(words, max_size=3)),
    cwd=st.sampled_from(["/", "/w", "/w/sub"]),
)
def test_screen_agrees_with_testing_each_rule(
    patterns: list[str],
    effect: Effect,
    tool: str,
    args: dict[str, str],
    subs: list[str] | None,
    cwd: str,
) -> None:
    index = RuleIndex([Rule(effect, p, Source.MANAGED) for p in patterns], cwd=cwd)
    rules = _tier(index, tool, effect)
    screen = RuleScreen(rules)
    content = call_content(tool, args, cwd=cwd, sub_commands=subs)
    assert screen.matches(content) == any(c.matches(content) for c in rules)
    assert screen.allows(content) == any(c.allows(content) for c in rules)
    if tool == BASH_TOOL:
        hit = any(
            c.allows_command(t)
            for c in rules
            for t in (content.whole_command, *content.allow_sub_commands)
        )
        # A screen may only say "no" when no rule allows the whole command or any part.
        assert hit <= screen.may_allow_command(content)


def _screen(effect: Effect, *patterns: str) -> tuple[RuleScreen, tuple[CompiledRule, ...]]:
    rules = RuleIndex([Rule(effect, p, Source.MANAGED) for p in patterns], cwd="/w")
    tier = rules.for_tool(patterns[0].split("(")[0])[list(Effect).index(effect)]
    return RuleScreen(tier), tier


def test_literal_metacharacters_are_not_regex() -> None:
    screen, _ = _screen(Effect.DENY, "fetch(a.b)", "fetch(a|b)", "fetch([a-z])")
    assert not screen.matches(call_content("fetch", {"url": "axb"}, cwd="/w"))
    assert not screen.matches(call_content("fetch", {"url": "a"}, cwd="/w"))
    assert not screen.matches(call_content("fetch", {"url": "q"}, cwd="/w"))
    assert screen.matches(call_content("fetch", {"url": "x a|b y"}, cwd="/w"))
    assert screen.matches(call_content("fetch", {"url": "[a-z]"}, cwd="/w"))


def test_alternation_does_not_leak_anchors_between_rules() -> None:
    # Two wildcard rules side by side must each stay anchored at both ends.
    screen, _ = _screen(Effect.DENY, "fetch(http://*.org)", "fetch(*/admin)")
    assert not screen.matches(call_content("fetch", {"url": "http://x.org/more"}, cwd="/"))
    assert not screen.matches(call_content("fetch", {"url": "ftp://y/admin/z"}, cwd="/"))
    assert screen.matches(call_content("fetch", {"url": "ftp://y/admin"}, cwd="/"))


def test_allow_literal_is_whole_string_not_up_to_a_trailing_newline() -> None:
    # `$` would accept "…org\n"; the screen anchors with \Z like the equality it replaces.
    screen, tier = _screen(Effect.ALLOW, "fetch(https://a.org)")
    tricked = call_content("fetch", {"url": "https://a.org\n"}, cwd="/")
    assert not screen.allows(tricked)
    assert not any(c.allows(tricked) for c in tier)
    assert screen.allows(call_content("fetch", {"url": "https://a.org"}, cwd="/"))


def test_deny_wildcard_crosses_newlines_like_each_rule() -> None:
    screen, _ = _screen(Effect.DENY, "run_bash(rm *)")
    content = call_content(BASH_TOOL, {"command": "rm a\nb"}, cwd="/", sub_commands=["rm a\nb"])
    assert screen.matches(content)


def test_escaped_star_is_a_literal_star() -> None:
    screen, _ = _screen(Effect.DENY, "glob_files(a\\*b)")
    assert screen.matches(call_content("glob_files", {"pattern": "x/a*b"}, cwd="/"))
    assert not screen.matches(call_content("glob_files", {"pattern": "x/aZZb"}, cwd="/"))


def test_bare_rule_screens_every_call_of_its_tool() -> None:
    screen, _ = _screen(Effect.DENY, "tool_x")
    assert screen.matches(call_content("tool_x", {}, cwd="/"))
    assert screen.allows(call_content("tool_x", {}, cwd="/"))


def test_empty_tier_never_matches() -> None:
    screen = RuleScreen(())
    content = call_content(BASH_TOOL, {"command": "rm -rf /"}, cwd="/")
    assert not screen.matches(content)
    assert not screen.allows(content)
    assert not screen.may_allow_command(content)


def test_tiers_are_memoised_and_bounded() -> None:
    index = RuleIndex([Rule(Effect.DENY, "*(secret)", Source.MANAGED)])
    first = index.tiers("a")
    assert index.tiers("a") is first
    for i in range(5000):
        index.tiers(f"t{i}")
    assert len(index._tiers) <= 4096
    # Past the bound, answers are still right, just not kept.
    deny = index.tiers("fresh")[0]
    assert deny.screen.matches(call_content("fresh", {"path": "/x/secret"}, cwd="/"))


@settings(max_examples=300, deadline=None)
@given(text=words)
def test_both_normal_forms_from_one_split(text: str) -> None:
    assert _normalize_both(text) == (
        normalize_command(text),
        normalize_command(text, look_through_privilege=False),
    )


def _normalize_path_by_regex(path: str, cwd: str) -> str:
    """The former implementation: normpath, then every run of slashes folded by a regex."""
    if path.startswith("/") and len(path) > 1 and re.search(r"//|/\.\.?(?:/|$)|/$", path) is None:
        return path
    return re.sub(r"/+", "/", posixpath.normpath(posixpath.join(cwd or "/", path)))


@settings(max_examples=500, deadline=None)
@given(
    path=st.lists(st.sampled_from(["", ".", "..", "a", "/", "//", "///", "b.txt"]), max_size=6).map(
        "".join
    ),
    cwd=st.sampled_from(["", "/", "//", "///x", "/w", "/w/", "//w//x/..", "rel", "."]),
)
def test_normalize_path_folds_every_slash_run(path: str, cwd: str) -> None:
    got = normalize_path(path, cwd)
    assert got == _normalize_path_by_regex(path, cwd)
    assert "//" not in got


def test_tools_with_the_same_rules_share_one_screen() -> None:
    # A stream of unknown tool names must not build (compile) a regex per name.
    index = RuleIndex(
        [
            Rule(Effect.DENY, "*(*secret*)", Source.MANAGED),
            Rule(Effect.ASK, "fetch", Source.MANAGED),
        ]
    )
    a, b = index.tiers("unknown_a"), index.tiers("unknown_b")
    assert a[0].screen is b[0].screen
    assert index.tiers("fetch")[1].screen is not a[1].screen
    assert b[0].screen.matches(call_content("unknown_b", {"path": "/top-secret/x"}, cwd="/"))
