"""RuleTier (one pattern-set look-up per content string): it must name exactly the rules
that matching them one by one names, in order (#18).

A tier that missed a rule would silently drop a DENY or ASK (or its conflict-log entry),
so the equivalence is checked on random rule sets (small ones, tested with plain string
operations, and large ones, through the anchor automaton) and calls, plus patterns written to
confuse a combined regex (metacharacters, alternation bars, newlines, escaped stars, NUL).
"""

from __future__ import annotations

import posixpath
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.decision.rules import (
    BASH_TOOL,
    CallContent,
    CompiledRule,
    Effect,
    Rule,
    RuleIndex,
    RuleTier,
    Source,
    call_content,
    normalize_both,
    normalize_command,
    normalize_path,
)

TOOLS = ["run_bash", "read_file", "fetch", "glob_files", "tool_x"]
PIECES = [
    "git", "status", "rm", "-rf", "/", "a.b", "a|b", "(x)", "$(id)", "[a-z]", "^", "$", "+",
    "?", "{2}", "\\*", "\\\\", "*", "**", "..", "//", "src", "*.py", "\n", "sudo", "env",
    "X=1", "/usr/bin/git", "'r'm", "\\rm", "https://a.org", ".", "secret", "\x00", "é",
    "./", "\ud800", "%", "\\x41", "", "a*b", "*/*",
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


def _agree(rules: tuple[CompiledRule, ...], tool: str, content: CallContent) -> None:
    tier = RuleTier(rules)
    assert tier.matching(content) == [c for c in rules if c.matches(content)]
    assert tier.allowing(content) == [c for c in rules if c.allows(content)]
    if tool == BASH_TOOL:
        for t in (content.whole_command, *content.allow_sub_commands, *content.sub_commands):
            assert tier.allowing_command(t) == [c for c in rules if c.allows_command(t)]


@settings(max_examples=300, deadline=None)
@given(
    patterns=st.lists(rule_patterns(), max_size=8),
    effect=st.sampled_from(list(Effect)),
    tool=st.sampled_from(TOOLS),
    args=call_args(),
    subs=st.one_of(st.none(), st.lists(words, max_size=3)),
    cwd=st.sampled_from(["/", "/w", "/w/sub"]),
)
def test_tier_names_the_rules_that_match_one_by_one(
    patterns: list[str],
    effect: Effect,
    tool: str,
    args: dict[str, str],
    subs: list[str] | None,
    cwd: str,
) -> None:
    index = RuleIndex([Rule(effect, p, Source.MANAGED) for p in patterns], cwd=cwd)
    content = call_content(tool, args, cwd=cwd, sub_commands=subs)
    _agree(_tier(index, tool, effect), tool, content)


@settings(max_examples=60, deadline=None)
@given(
    patterns=st.lists(rule_patterns(), min_size=10, max_size=60),
    effect=st.sampled_from(list(Effect)),
    tool=st.sampled_from(TOOLS),
    calls=st.lists(
        st.tuples(call_args(), st.one_of(st.none(), st.lists(words, max_size=3))),
        min_size=1,
        max_size=5,
    ),
    cwd=st.sampled_from(["/", "/w"]),
)
def test_large_tiers_agree_with_one_by_one(
    patterns: list[str],
    effect: Effect,
    tool: str,
    calls: list[tuple[dict[str, str], list[str] | None]],
    cwd: str,
) -> None:
    """Dense tiers (many rules on one tool: the automaton path) name the same rules."""
    index = RuleIndex([Rule(effect, p, Source.MANAGED) for p in patterns], cwd=cwd)
    rules = _tier(index, tool, effect)
    for args, subs in calls:
        _agree(rules, tool, call_content(tool, args, cwd=cwd, sub_commands=subs))


class _Screen:
    """The former screen's yes/no questions, answered by a tier (keeps the cases below)."""

    def __init__(self, tier: RuleTier) -> None:
        self.tier = tier

    def matches(self, content: CallContent) -> bool:
        return bool(self.tier.matching(content))

    def allows(self, content: CallContent) -> bool:
        return bool(self.tier.allowing(content))

    def may_allow_command(self, content: CallContent) -> bool:
        texts = (content.whole_command, *content.allow_sub_commands)
        return any(self.tier.allowing_command(t) for t in texts)


def _screen(effect: Effect, *patterns: str) -> tuple[_Screen, tuple[CompiledRule, ...]]:
    rules = RuleIndex([Rule(effect, p, Source.MANAGED) for p in patterns], cwd="/w")
    tier = rules.for_tool(patterns[0].split("(")[0])[list(Effect).index(effect)]
    return _Screen(RuleTier(tier)), tier


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
    screen = _Screen(RuleTier(()))
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
    assert deny.matching(call_content("fresh", {"path": "/x/secret"}, cwd="/"))


@settings(max_examples=300, deadline=None)
@given(text=words)
def test_both_normal_forms_from_one_split(text: str) -> None:
    assert normalize_both(text) == (
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


def test_tools_with_the_same_rules_share_one_tier() -> None:
    # A stream of unknown tool names must not build (compile) pattern sets per name.
    index = RuleIndex(
        [
            Rule(Effect.DENY, "*(*secret*)", Source.MANAGED),
            Rule(Effect.ASK, "fetch", Source.MANAGED),
        ]
    )
    a, b = index.tiers("unknown_a"), index.tiers("unknown_b")
    assert a[0] is b[0]
    assert index.tiers("fetch")[1] is not a[1]
    assert b[0].matching(call_content("unknown_b", {"path": "/top-secret/x"}, cwd="/"))
