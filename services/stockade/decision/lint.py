"""Shadowed-rule detection (DEC-11): rules that can never take effect, with a reason and fix.

A rule never takes effect when an earlier-or-stronger rule already covers every call it
matches: an ALLOW or ASK under a DENY that covers it (DENY always wins), an ALLOW under a
covering ASK (an explicit ASK beats ALLOW), or an exact duplicate. Coverage is decided on
the pattern text: a broader rule covers a narrower one when its tool part includes the
other's and its content matches the other's content taken literally (``git *`` covers
``git status`` and ``git s*``). That is a sound test for the prefix/suffix/substring
patterns people write; it may miss exotic overlaps, never invents them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stockade.decision.rules import (
    Effect,
    Rule,
    _split_glob,
    compile_rule,
    parse_pattern,
)
from stockade.errors import InvalidPattern


@dataclass(frozen=True)
class Finding:
    """A rule that can never take effect."""

    rule: Rule
    shadowed_by: Rule
    reason: str
    fix: str


_STRENGTH = {Effect.DENY: 3, Effect.ASK: 2, Effect.ALLOW: 1}


@dataclass(frozen=True)
class _Parsed:
    rule: Rule
    tool: str | None
    content: str | None
    literal: str | None
    """The content with wildcards taken literally."""
    match: Callable[[str], bool] | None
    """The compiled content matcher (DENY/ASK or ALLOW semantics per the rule's effect)."""


def _parse(rule: Rule) -> _Parsed | None:
    try:
        p = parse_pattern(rule.pattern)
        compiled = compile_rule(rule, 0)
    except InvalidPattern:
        return None
    literal = None
    if p.content is not None:
        literal = "".join("*" if part is None else part for part in _split_glob(p.content))
    return _Parsed(rule, p.tool, p.content, literal, compiled._text)


def _covers(b: _Parsed, n: _Parsed) -> bool:
    if b.tool is not None and b.tool != n.tool:
        return False
    if b.content is None:
        return True
    if n.content is None or b.match is None or n.literal is None:
        return False
    return b.match(n.literal) or b.match(n.content)


def covers(broad: Rule, narrow: Rule) -> bool:
    """True when every call ``narrow`` matches is also matched by ``broad``."""
    b, n = _parse(broad), _parse(narrow)
    return b is not None and n is not None and _covers(b, n)


def lint_rules(rules: Sequence[Rule]) -> list[Finding]:
    """Report every rule that can never take effect, in rule order.

    Patterns are parsed once and only rules that can share a tool are compared, so a
    policy of a thousand rules lints in well under a second.
    """
    parsed = [_parse(r) for r in rules]
    by_tool: dict[str | None, list[tuple[int, _Parsed]]] = {}
    for i, p in enumerate(parsed):
        if p is not None:
            by_tool.setdefault(p.tool, []).append((i, p))
    findings: list[Finding] = []
    for i, p in enumerate(parsed):
        if p is None:
            continue
        candidates = sorted(by_tool.get(p.tool, []) + (by_tool.get(None, []) if p.tool else []))
        finding = _shadow(i, p, candidates)
        if finding is not None:
            findings.append(finding)
    return findings


def _shadow(index: int, p: _Parsed, candidates: list[tuple[int, _Parsed]]) -> Finding | None:
    rule = p.rule
    for j, other in candidates:
        if j >= index:
            break
        o = other.rule
        if o.effect is rule.effect and o.pattern.strip() == rule.pattern.strip():
            return Finding(
                rule,
                o,
                f"duplicate of an earlier {o.effect.value} rule from {o.source.value}",
                f"delete the second {rule.pattern!r}",
            )
    # DENY beats everything and ASK beats ALLOW whatever their order (DEC-3).
    for j, other in candidates:
        o = other.rule
        if j == index or _STRENGTH[o.effect] <= _STRENGTH[rule.effect]:
            continue
        if _covers(other, p):
            verb = "denied" if o.effect is Effect.DENY else "asked for"
            return Finding(
                rule,
                o,
                f"every call {rule.pattern!r} matches is already {verb} by "
                f"{o.pattern!r} ({o.effect.value} wins over {rule.effect.value})",
                f"narrow {o.pattern!r} so it excludes these calls, or delete {rule.pattern!r}",
            )
    return None
