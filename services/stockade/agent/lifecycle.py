"""Lifecycle events (AGT-3): what hooks hear besides tool calls, typed per kind.

Each kind has its own details class (a frozen dataclass), and an event's kind is its
details' class, so a SESSION_STOP without a reason, or a step count under a misspelt key,
fails in mypy rather than in a hook at run time. Two converters read them: the AuditLog
hook's SESSION_STOP row (``stockade.agent.builtin_hooks.session_stop_row``) and the
``details`` Struct sent to remote hooks (``stockade.agent.convert.lifecycle_details_to_struct``).

The remote hooks' wire format is the one they always had (``OnEventRequest.details``,
keys and JSON types per kind):

=================  ==================================================================
kind               ``details``
=================  ==================================================================
SESSION_START      ``{}``
SESSION_STOP       ``reason`` (a ``TerminationReason`` name without its prefix, e.g.
                   ``"MAX_STEPS"``), ``detail`` (text), ``step`` (number)
STEP_COMPLETE      ``step``, ``tokens_used`` (numbers)
SUBAGENT_START     ``profile``, ``task`` (text)
SUBAGENT_STOP      ``reason``, ``detail`` (as SESSION_STOP)
PRE_COMPACT        ``{}``
POST_COMPACT       ``kind`` (``"micro"``, ``"auto"`` or ``"manual"``), ``tokens_before``,
                   ``tokens_after`` (numbers)
=================  ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from stockade.agent.compaction import CompactionKind
from stockade.agent.limits import Termination


class LifecycleKind(Enum):
    """Lifecycle events (mirrors ``LifecycleEventKind``)."""

    SESSION_START = "session_start"
    SESSION_STOP = "session_stop"
    STEP_COMPLETE = "step_complete"
    SUBAGENT_START = "subagent_start"
    SUBAGENT_STOP = "subagent_stop"
    PRE_COMPACT = "pre_compact"
    POST_COMPACT = "post_compact"


@dataclass(frozen=True)
class SessionStartDetails:
    """A turn began (no details)."""

    KIND: ClassVar[LifecycleKind] = LifecycleKind.SESSION_START


@dataclass(frozen=True)
class SessionStopDetails:
    """A turn ended: why, in words, after how many steps."""

    KIND: ClassVar[LifecycleKind] = LifecycleKind.SESSION_STOP
    reason: Termination
    """Why it ended (AGT-6)."""
    detail: str = ""
    """The reason in words (e.g. which limit)."""
    step: int = 0
    """Model steps taken."""


@dataclass(frozen=True)
class StepCompleteDetails:
    """A model step and its tool calls finished."""

    KIND: ClassVar[LifecycleKind] = LifecycleKind.STEP_COMPLETE
    step: int
    """The step's number (from 1)."""
    tokens_used: int
    """Tokens the turn has used so far."""


@dataclass(frozen=True)
class SubagentStartDetails:
    """A subagent was spawned."""

    KIND: ClassVar[LifecycleKind] = LifecycleKind.SUBAGENT_START
    profile: str
    """Its profile (``explore`` …)."""
    task: str
    """What it was asked to do."""


@dataclass(frozen=True)
class SubagentStopDetails:
    """A subagent ended."""

    KIND: ClassVar[LifecycleKind] = LifecycleKind.SUBAGENT_STOP
    reason: Termination
    """Why it ended."""
    detail: str = ""
    """The reason in words."""


@dataclass(frozen=True)
class PreCompactDetails:
    """Compaction is about to run (no details)."""

    KIND: ClassVar[LifecycleKind] = LifecycleKind.PRE_COMPACT


@dataclass(frozen=True)
class PostCompactDetails:
    """Compaction ran."""

    KIND: ClassVar[LifecycleKind] = LifecycleKind.POST_COMPACT
    kind: CompactionKind
    """``auto`` (the loop near its token limit; ``micro`` when clearing old tool results
    was enough) or ``manual`` (the ``compress_context`` tool)."""
    tokens_before: int
    """Estimated context tokens before."""
    tokens_after: int
    """Estimated context tokens after."""


LifecycleDetails = (
    SessionStartDetails
    | SessionStopDetails
    | StepCompleteDetails
    | SubagentStartDetails
    | SubagentStopDetails
    | PreCompactDetails
    | PostCompactDetails
)
"""The details of any lifecycle event (one class per kind)."""


@dataclass(frozen=True)
class LifecycleEvent:
    """A lifecycle event: its kind is its details' class."""

    session_id: str
    """The session."""
    details: LifecycleDetails
    """What happened, typed per kind."""
    agent_name: str = "lead"
    """``lead`` or the subagent's name."""

    @property
    def kind(self) -> LifecycleKind:
        """What happened."""
        return self.details.KIND
