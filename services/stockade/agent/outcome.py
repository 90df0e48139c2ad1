"""How one tool call ended, in the agent's own terms.

``Verdict`` and ``ExecutionStatus`` are the agent's domain enums: the pipeline, the loop
and the built-in tools speak them, and only ``stockade.agent.convert`` turns them into (or
reads them from) protobuf values. ``Outcome`` is what every path of a call produces — a
refusal by the checks, an executor or remote result, a built-in tool's answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from stockade.agent.hooks import CallStatus
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

__all__ = [
    "CANCELLED_TEXT",
    "ExecutionStatus",
    "Outcome",
    "Verdict",
    "cancelled_outcome",
    "denied_outcome",
    "error_outcome",
    "ok_outcome",
]

CANCELLED_TEXT = "Cancelled: the user cancelled the turn."


class Verdict(Enum):
    """The permission verdict of a call."""

    UNSPECIFIED = "UNSPECIFIED"
    """No decision was made (the call failed before, or never needed one)."""
    ALLOW = "ALLOW"
    """Allowed."""
    ASK = "ASK"
    """A person must answer."""
    DENY = "DENY"
    """Refused."""


class ExecutionStatus(Enum):
    """How the tool itself ended."""

    UNSPECIFIED = "UNSPECIFIED"
    """Not known (never produced by the agent for a finished call)."""
    OK = "OK"
    """It ran and succeeded."""
    ERROR = "ERROR"
    """It failed, or could not run (malformed call, broken tool)."""
    TIMEOUT = "TIMEOUT"
    """It ran out of time."""
    CANCELLED = "CANCELLED"
    """It was stopped (or never started) because the turn was cancelled."""
    REFUSED = "REFUSED"
    """It was refused: a denial, or the executor refused the grant."""


@dataclass
class Outcome:
    """How one call ended, before and after PostToolUse hooks."""

    status: ExecutionStatus
    """Execution status (REFUSED for denials and refusals)."""
    verdict: Verdict
    """The permission verdict (UNSPECIFIED when no decision was made)."""
    content: str
    """The result the model sees."""
    reason: str = ""
    """Why, for denials and errors."""
    rule: c_pb2.Rule = field(default_factory=c_pb2.Rule)
    """The rule that decided (as the decision service sent it)."""
    policy_version: str = ""
    """The decision's policy version."""
    conflicts: tuple[d_pb2.Conflict, ...] = ()
    """Every rule the winning rule overrode, as the decision service returned them."""
    decision_reason: str = ""
    """The decision service's reason for its verdict (``reason`` may say more, e.g. how an
    approval was answered)."""
    elapsed_ms: int = 0
    """Wall time from the start of the call's checks."""
    halt: bool = False
    """The decision service asked the agent to end the turn (DEC-9)."""
    halt_reason: str = ""
    """Why."""
    ends_turn: bool = False
    """A builtin (ask_user) ends the turn after this step."""
    outcome_unknown: bool = False
    """The agent stopped waiting for the executor (its deadline passed, or the stream
    broke after the call was sent): the tool may have run, so the audit row says UNKNOWN
    rather than a failure that may not have happened."""

    @property
    def call_status(self) -> CallStatus:
        """The status hooks and the audit log see."""
        if self.outcome_unknown:
            return CallStatus.UNKNOWN
        if self.status is ExecutionStatus.OK:
            return CallStatus.OK
        if self.status is ExecutionStatus.CANCELLED:
            return CallStatus.CANCELLED
        if self.verdict is Verdict.DENY or self.status is ExecutionStatus.REFUSED:
            return CallStatus.DENIED
        return CallStatus.FAIL


def ok_outcome(content: str, *, ends_turn: bool = False) -> Outcome:
    """An allowed call that ran and succeeded (built-in tools)."""
    return Outcome(ExecutionStatus.OK, Verdict.ALLOW, content, ends_turn=ends_turn)


def error_outcome(message: str, reason: str = "") -> Outcome:
    """A call that could not run because it was malformed (not a denial)."""
    return Outcome(ExecutionStatus.ERROR, Verdict.UNSPECIFIED, message, reason)


def denied_outcome(reason: str, rule: c_pb2.Rule | None = None) -> Outcome:
    """A refused call."""
    return Outcome(
        ExecutionStatus.REFUSED,
        Verdict.DENY,
        f"Denied: {reason}",
        reason,
        rule
        or c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, pattern="*", source=c_pb2.RULE_SOURCE_DEFAULT),
    )


def cancelled_outcome(reason: str = "cancelled by the user") -> Outcome:
    """A call stopped (or never started) because the turn was cancelled."""
    return Outcome(ExecutionStatus.CANCELLED, Verdict.UNSPECIFIED, CANCELLED_TEXT, reason)
