"""What a rule is: its effect, where it came from, and the rule as configured (DEC-1/3)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Effect(Enum):
    """What a rule does when it matches."""

    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"


class Source(Enum):
    """Where a rule or signal came from (feeds precedence and the audit trail)."""

    MANAGED = "managed"
    ENV = "env"
    PROJECT = "project"
    SESSION = "session"
    TOOL = "tool"
    HOOK = "hook"
    DEFAULT = "default"
    MODE = "mode"


POLICY_SOURCES = frozenset({Source.MANAGED, Source.ENV, Source.PROJECT})
"""Sources whose rules make up the loaded policy (as opposed to session or call rules)."""


@dataclass(frozen=True)
class Rule:
    """One permission rule as configured (DEC-1)."""

    effect: Effect
    """What the rule does on a match."""
    pattern: str
    """The pattern text, e.g. ``run_bash(git *)``."""
    source: Source
    """Where the rule came from."""
    reason: str = ""
    """Optional human reason shown when the rule decides."""
    rule_id: str = ""
    """Server-assigned id for session rules and grants."""
    bypass_immune: bool = False
    """For tool-level ASKs: neither ALLOW rules nor bypass mode may settle it."""

    def describe(self) -> str:
        """A short label, e.g. ``deny run_bash(rm *) [managed]``."""
        return f"{self.effect.value} {self.pattern} [{self.source.value}]"
