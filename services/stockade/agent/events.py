"""The events of one turn's stream, as typed values (AGT-6, AGT-7).

The loop, the pipeline and the built-in tools emit these dataclasses — one class per kind
of ``RunTurnResponse`` event — through an ``Emit`` callable; ``stockade.agent.convert``
turns each into its stream message. A misspelt event or field is a type error (mypy), not
a ``ValueError`` from a protobuf constructor at run time, and the servicer is the only
place that knows the wire shape.

Two fields pass through as protobuf messages because the agent only relays them from the
decision service: a call's winning rule (``c_pb2.Rule``) and a decision's explanation
(``c_pb2.Explanation``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from stockade.agent.limits import Termination
from stockade.agent.outcome import ExecutionStatus, Verdict
from stockade.v1 import common_pb2 as c_pb2

__all__ = [
    "AgentEvent",
    "CallInfo",
    "Compaction",
    "Emit",
    "Error",
    "EventFactory",
    "FinalAnswer",
    "PermissionRequested",
    "PermissionResolved",
    "StepComplete",
    "SubagentStarted",
    "SubagentStopped",
    "Terminated",
    "Text",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnEvent",
]


@dataclass(frozen=True)
class CallInfo:
    """A tool call as the stream shows it (and as the other services receive it)."""

    call_id: str
    """The model's call id."""
    tool_name: str
    """The tool."""
    arguments: Mapping[str, Any]
    """The arguments (after PreToolUse hooks; empty when they could not be used)."""
    session_id: str
    """The decision session."""
    agent_name: str
    """The agent that made the call (``lead`` or a subagent's name)."""
    from_subagent: bool = False
    """True for a subagent's call."""


@dataclass(frozen=True)
class Text:
    """Model text (not the final answer)."""

    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    """A call passed its checks (or is about to ask) and is announced."""

    call: CallInfo


@dataclass(frozen=True)
class ToolCallFinished:
    """A call ended, with what the model sees."""

    call_id: str
    tool_name: str
    status: ExecutionStatus
    verdict: Verdict
    content: str
    winning_rule: c_pb2.Rule = field(default_factory=c_pb2.Rule)
    """The rule that decided, as the decision service named it."""
    reason: str = ""
    elapsed_ms: int = 0


@dataclass(frozen=True)
class PermissionRequested:
    """A call needs a person's answer (ASK)."""

    approval_id: str
    call: CallInfo
    reason: str
    explanation: c_pb2.Explanation = field(default_factory=c_pb2.Explanation)
    """The decision's risk and one-sentence summary, relayed."""
    always_allow_applies: bool = False


@dataclass(frozen=True)
class PermissionResolved:
    """An approval was answered (or the wait ended)."""

    approval_id: str
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class SubagentStarted:
    """A subagent began its task."""

    agent_name: str
    profile: str
    task: str


@dataclass(frozen=True)
class SubagentStopped:
    """A subagent ended."""

    agent_name: str
    reason: Termination
    answer: str


@dataclass(frozen=True)
class StepComplete:
    """A model step and its tool calls are done."""

    step: int
    tokens_used: int


@dataclass(frozen=True)
class Compaction:
    """The context was compacted."""

    kind: str
    """``micro``, ``auto`` or ``manual``."""
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True)
class FinalAnswer:
    """The agent's answer to the user."""

    text: str


@dataclass(frozen=True)
class Terminated:
    """The turn ended; always the last event."""

    reason: Termination
    detail: str


@dataclass(frozen=True)
class Error:
    """Something went wrong that the user should see."""

    message: str


AgentEvent = (
    Text
    | ToolCallStarted
    | ToolCallFinished
    | PermissionRequested
    | PermissionResolved
    | SubagentStarted
    | SubagentStopped
    | StepComplete
    | Compaction
    | FinalAnswer
    | Terminated
    | Error
)
"""Every kind of event a turn streams."""


class Emit(Protocol):
    """Puts one event on the turn's stream, tagged with the agent that caused it."""

    def __call__(self, agent_name: str, event: AgentEvent) -> None:
        """Emit ``event``."""
        ...


@dataclass(frozen=True)
class TurnEvent:
    """One numbered event of a turn's stream."""

    sequence: int
    """From 1, in stream order."""
    session_id: str
    """The turn's session."""
    agent_name: str
    """``lead`` or the subagent that caused it."""
    time_ns: int
    """Wall-clock time it was emitted (ns since the epoch)."""
    event: AgentEvent
    """What happened."""


class EventFactory:
    """Numbers the events of one turn's stream."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._seq = 0

    def make(self, agent_name: str, event: AgentEvent) -> TurnEvent:
        """The next numbered event."""
        self._seq += 1
        return TurnEvent(self._seq, self.session_id, agent_name, time.time_ns(), event)
