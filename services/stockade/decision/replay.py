"""Policy replay (DEC-14): re-decide recorded calls under a candidate policy, list changes.

The audit trail keeps each call's tool, redacted arguments, verdict and winning rule. A
replay decides the same calls again with the candidate policy (and, through the
``facts`` callback, the executor's analysis) and reports every call whose verdict would
change. What a record does not keep cannot be replayed: session rules, the session's
mode at the time and hook signals. A record says which source decided it, so a change
to a call that one of those decided is marked uncertain, with why, instead of being
listed as a sure change; the report's note says what replay cannot know.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stockade.decision.engine import CompiledPolicy, DecisionRequest, Facts, decide
from stockade.decision.modes import Mode
from stockade.decision.rules import Effect, Source

LIMITATIONS = (
    "replayed with the candidate policy only: session rules, the session's mode at the "
    "time and hook signals are not in the audit trail and are not replayed; a change to a "
    "call that one of them decided is marked uncertain"
)

_UNKNOWN_AT_REPLAY = {
    Source.MODE: "the session's mode at the time decided it (replay does not know the mode)",
    Source.HOOK: "a hook decided it (replay does not run hooks)",
    Source.SESSION: "a session rule or always-allow grant decided it (replay does not know "
    "the session's rules)",
}


@dataclass(frozen=True)
class RecordedCall:
    """One decided call from the audit trail."""

    session_id: str
    call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    """The recorded arguments (after redaction; a cut marker when they were too big)."""
    verdict: Effect
    matched_rule: str
    agent_name: str = "lead"
    rule_source: Source | None = None
    """Where the recorded decision's winning rule came from (None when not recorded)."""


@dataclass(frozen=True)
class Change:
    """A call whose verdict would differ under the candidate policy."""

    call: RecordedCall
    new_verdict: Effect
    new_rule: str
    new_reason: str
    uncertain: str = ""
    """Why the change may not happen (state at the time that replay cannot see); empty
    for a change the candidate policy alone makes."""


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found."""

    policy_version: str
    replayed: int
    skipped: int
    """Records that could not be replayed (no verdict, unreadable arguments)."""
    changes: tuple[Change, ...]


def replay(
    policy: CompiledPolicy,
    records: Iterable[RecordedCall],
    *,
    facts: Callable[[str, Mapping[str, Any]], Facts] = lambda tool, args: Facts(),
    mode: Mode | None = None,
) -> ReplayReport:
    """Decide every record again under ``policy`` and collect the verdicts that change."""
    replayed = skipped = 0
    changes: list[Change] = []
    for rec in records:
        args = dict(rec.arguments)
        try:
            call_facts = facts(rec.tool_name, args)
        except Exception:
            skipped += 1
            continue
        d = decide(
            policy,
            DecisionRequest(
                tool_name=rec.tool_name,
                arguments=args,
                mode=mode or policy.mode,
                from_subagent=rec.agent_name not in ("", "lead"),
                facts=call_facts,
            ),
        )
        replayed += 1
        if d.verdict is not rec.verdict:
            why = _UNKNOWN_AT_REPLAY.get(rec.rule_source) if rec.rule_source else None
            changes.append(Change(rec, d.verdict, d.winning_rule.pattern, d.reason, why or ""))
    return ReplayReport(policy.version, replayed, skipped, tuple(changes))
