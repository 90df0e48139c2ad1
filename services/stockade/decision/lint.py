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

from collections.abc import Sequence
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


def covers(broad: Rule, narrow: Rule) -> bool:
    """True when every call ``narrow`` matches is also matched by ``broad``."""
    try:
        b = parse_pattern(broad.pattern)
        n = parse_pattern(narrow.pattern)
    except InvalidPattern:
        return False
    if b.tool is not None and b.tool != n.tool:
        return False
    if b.content is None:
        return True
    if n.content is None:
        return False
    literal = "".join("*" if p is None else p for p in _split_glob(n.content))
    compiled = compile_rule(broad, 0)
    assert compiled._text is not None
    return compiled._text(literal) or compiled._text(n.content)


def lint_rules(rules: Sequence[Rule]) -> list[Finding]:
    """Report every rule that can never take effect, in rule order."""
    findings: list[Finding] = []
    for i, rule in enumerate(rules):
        finding = _shadow(rule, rules[:i], rules[i + 1 :])
        if finding is not None:
            findings.append(finding)
    return findings


def _shadow(rule: Rule, before: Sequence[Rule], after: Sequence[Rule]) -> Finding | None:
    for other in before:
        if other.effect is rule.effect and other.pattern.strip() == rule.pattern.strip():
            return Finding(
                rule,
                other,
                f"duplicate of an earlier {other.effect.value} rule from {other.source.value}",
                f"delete the second {rule.pattern!r}",
            )
    # DENY beats everything and ASK beats ALLOW whatever their order (DEC-3).
    for other in (*before, *after):
        if other is rule or _STRENGTH[other.effect] <= _STRENGTH[rule.effect]:
            continue
        if covers(other, rule):
            verb = "denied" if other.effect is Effect.DENY else "asked for"
            return Finding(
                rule,
                other,
                f"every call {rule.pattern!r} matches is already {verb} by "
                f"{other.pattern!r} ({other.effect.value} wins over {rule.effect.value})",
                f"narrow {other.pattern!r} so it excludes these calls, or delete {rule.pattern!r}",
            )
    return None
