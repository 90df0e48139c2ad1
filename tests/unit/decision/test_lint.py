"""Shadowed rules (DEC-11)."""

from __future__ import annotations

from stockade.decision.lint import covers, lint_rules
from stockade.decision.rules import Effect, Rule, Source


def r(effect: Effect, pattern: str) -> Rule:
    return Rule(effect, pattern, Source.MANAGED)


def test_allow_under_broader_deny_is_reported_with_fix() -> None:
    rules = [r(Effect.DENY, "run_bash(git *)"), r(Effect.ALLOW, "run_bash(git status)")]
    [finding] = lint_rules(rules)
    assert finding.rule.pattern == "run_bash(git status)"
    assert finding.shadowed_by.pattern == "run_bash(git *)"
    assert "already denied" in finding.reason and finding.fix


def test_order_does_not_matter_for_deny_over_allow() -> None:
    rules = [r(Effect.ALLOW, "read_file(/w/.env)"), r(Effect.DENY, "read_file")]
    assert [f.rule.pattern for f in lint_rules(rules)] == ["read_file(/w/.env)"]


def test_allow_under_ask_and_duplicates() -> None:
    rules = [
        r(Effect.ASK, "*"),
        r(Effect.ALLOW, "run_bash(ls)"),
        r(Effect.DENY, "run_bash(rm *)"),
        r(Effect.DENY, "run_bash(rm *)"),
    ]
    findings = lint_rules(rules)
    assert [(f.rule.pattern, "duplicate" in f.reason) for f in findings] == [
        ("run_bash(ls)", False),
        ("run_bash(rm *)", True),
    ]


def test_no_false_positives() -> None:
    rules = [
        r(Effect.DENY, "run_bash(rm *)"),
        r(Effect.ALLOW, "run_bash(git status)"),
        r(Effect.ASK, "file_write"),
        r(Effect.ALLOW, "read_file"),
        r(Effect.DENY, "read_file(**/.env)"),
    ]
    assert lint_rules(rules) == []
    assert not covers(r(Effect.DENY, "run_bash(git status)"), r(Effect.ALLOW, "run_bash(git *)"))
    assert covers(r(Effect.DENY, "*(sudo)"), r(Effect.ALLOW, "run_bash(sudo ls)"))
