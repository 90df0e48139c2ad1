"""Protobuf ↔ the agent's domain types, in one place.

The stream's events (``stockade.agent.events``) become ``RunTurnResponse`` messages here;
the agent's verdicts, execution statuses and termination reasons map to and from their
protobuf enums here; a call becomes the ``ToolCall`` message the other services receive;
a registry ``ToolSpec`` maps to and from the ``stockade.v1.ToolSpec`` of a provider's
ListTools answer (the wire form of each trait is the contract's,
``stockade.contract.toolspec``). Protobuf only, no gRPC.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from google.protobuf import struct_pb2, timestamp_pb2

from stockade.agent.events import (
    AgentEvent,
    CallInfo,
    Compaction,
    Error,
    FinalAnswer,
    PermissionRequested,
    PermissionResolved,
    StepComplete,
    SubagentStarted,
    SubagentStopped,
    Terminated,
    Text,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
)
from stockade.agent.lifecycle import (
    LifecycleDetails,
    LifecycleEvent,
    LifecycleKind,
    PostCompactDetails,
    PreCompactDetails,
    SessionStartDetails,
    SessionStopDetails,
    StepCompleteDetails,
    SubagentStartDetails,
    SubagentStopDetails,
)
from stockade.agent.limits import Termination
from stockade.agent.outcome import ExecutionStatus, Verdict
from stockade.agent.registry import InterruptBehavior, Location, ToolSpec
from stockade.contract.tools import Interrupt
from stockade.contract.tools import Location as ContractLocation
from stockade.contract.toolspec import (
    INTERRUPT_TO_PB,
    LOCATION_FROM_PB,
    LOCATION_TO_PB,
    dict_to_struct,
    struct_to_dict,
)
from stockade.errors import InvalidArgument
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import hook_service_pb2 as hook_pb2

SESSION_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
MAX_MESSAGE_CHARS = 200_000

_VERDICT_TO_PB: dict[Verdict, c_pb2.Verdict.ValueType] = {
    Verdict.UNSPECIFIED: c_pb2.VERDICT_UNSPECIFIED,
    Verdict.ALLOW: c_pb2.VERDICT_ALLOW,
    Verdict.ASK: c_pb2.VERDICT_ASK,
    Verdict.DENY: c_pb2.VERDICT_DENY,
}
_VERDICT_FROM_PB: dict[int, Verdict] = {int(v): k for k, v in _VERDICT_TO_PB.items()}

_STATUS_TO_PB: dict[ExecutionStatus, x_pb2.ExecutionStatus.ValueType] = {
    ExecutionStatus.UNSPECIFIED: x_pb2.EXECUTION_STATUS_UNSPECIFIED,
    ExecutionStatus.OK: x_pb2.EXECUTION_STATUS_OK,
    ExecutionStatus.ERROR: x_pb2.EXECUTION_STATUS_ERROR,
    ExecutionStatus.TIMEOUT: x_pb2.EXECUTION_STATUS_TIMEOUT,
    ExecutionStatus.CANCELLED: x_pb2.EXECUTION_STATUS_CANCELLED,
    ExecutionStatus.REFUSED: x_pb2.EXECUTION_STATUS_REFUSED,
}
_STATUS_FROM_PB: dict[int, ExecutionStatus] = {int(v): k for k, v in _STATUS_TO_PB.items()}

_TERMINATION_TO_PB: dict[Termination, a_pb2.TerminationReason.ValueType] = {
    Termination.COMPLETED: a_pb2.TERMINATION_REASON_COMPLETED,
    Termination.MAX_STEPS: a_pb2.TERMINATION_REASON_MAX_STEPS,
    Termination.TOKEN_BUDGET: a_pb2.TERMINATION_REASON_TOKEN_BUDGET,
    Termination.DIMINISHING_RETURNS: a_pb2.TERMINATION_REASON_DIMINISHING_RETURNS,
    Termination.CANCELLED: a_pb2.TERMINATION_REASON_CANCELLED,
    Termination.DENIAL_HALT: a_pb2.TERMINATION_REASON_DENIAL_HALT,
    Termination.COMPACTION_FAILED: a_pb2.TERMINATION_REASON_COMPACTION_FAILED,
    Termination.ERROR: a_pb2.TERMINATION_REASON_ERROR,
}


def verdict_to_pb(verdict: Verdict) -> c_pb2.Verdict.ValueType:
    """The protobuf verdict."""
    return _VERDICT_TO_PB[verdict]


def verdict_from_pb(value: int) -> Verdict:
    """The domain verdict of a protobuf value; an unknown value is UNSPECIFIED (never
    mistaken for an ALLOW)."""
    return _VERDICT_FROM_PB.get(value, Verdict.UNSPECIFIED)


def status_to_pb(status: ExecutionStatus) -> x_pb2.ExecutionStatus.ValueType:
    """The protobuf execution status."""
    return _STATUS_TO_PB[status]


def status_from_pb(value: int) -> ExecutionStatus:
    """The domain status of a protobuf value; an unknown value is ERROR (never OK)."""
    return _STATUS_FROM_PB.get(value, ExecutionStatus.ERROR)


def termination_to_pb(reason: Termination) -> a_pb2.TerminationReason.ValueType:
    """The protobuf termination reason."""
    return _TERMINATION_TO_PB[reason]


def call_to_pb(call: CallInfo) -> c_pb2.ToolCall:
    """The ``ToolCall`` message the executor, the decision service and providers receive."""
    return c_pb2.ToolCall(
        call_id=call.call_id,
        tool_name=call.tool_name,
        arguments=dict_to_struct(call.arguments),
        session_id=call.session_id,
        from_subagent=call.from_subagent,
        agent_name=call.agent_name,
    )


def spec_to_proto(spec: ToolSpec, arguments: Mapping[str, Any] | None = None) -> c_pb2.ToolSpec:
    """The message form of ``spec``; ``concurrency_safe`` is evaluated for ``arguments``.

    A predicate cannot travel over the wire, so a provider declaring an argument-dependent
    tool sends the value for empty arguments (the conservative reading is its job).
    """
    return c_pb2.ToolSpec(
        name=spec.name,
        description=spec.description,
        arguments_schema=dict_to_struct(spec.parameters),
        interrupt_behavior=INTERRUPT_TO_PB[Interrupt(spec.interrupt_behavior.value)],
        concurrency_safe=spec.is_concurrency_safe(arguments or {}),
        causes_sibling_abort=spec.causes_sibling_abort,
        read_only=spec.read_only,
        location=LOCATION_TO_PB[ContractLocation(spec.location.value)],
        primary_content_field=spec.primary_content_field,
    )


def spec_from_proto(message: c_pb2.ToolSpec, *, provider: str = "") -> ToolSpec:
    """A registry entry for a declared tool; unset traits take the conservative value."""
    interrupt = (
        InterruptBehavior.CANCEL
        if message.interrupt_behavior == c_pb2.INTERRUPT_BEHAVIOR_CANCEL
        else InterruptBehavior.BLOCK
    )
    parameters = (
        struct_to_dict(message.arguments_schema)
        if message.HasField("arguments_schema")
        else {"type": "object"}
    )
    location = LOCATION_FROM_PB.get(message.location, ContractLocation.REMOTE)
    return ToolSpec(
        name=message.name,
        description=message.description,
        parameters=parameters,
        interrupt_behavior=interrupt,
        concurrency_safe=message.concurrency_safe,
        causes_sibling_abort=message.causes_sibling_abort,
        read_only=message.read_only,
        location=Location(location.value),
        primary_content_field=message.primary_content_field,
        provider=provider,
    )


@dataclass(frozen=True)
class TurnRequest:
    """A RunTurn request, checked."""

    session_id: str
    """The session (a new random one when the caller gave none)."""
    message: str
    """The user's message (not blank, at most ``MAX_MESSAGE_CHARS``)."""
    script: str
    """The scripted provider's script name ("" for the default)."""
    mode: c_pb2.PermissionMode.ValueType
    """The permission mode to create the decision session with (UNSPECIFIED: leave it)."""


def turn_request_from_pb(request: a_pb2.RunTurnRequest) -> TurnRequest:
    """The checked request; ``InvalidArgument`` naming the field that is wrong."""
    session_id = request.session_id or f"s-{uuid.uuid4().hex[:12]}"
    if not SESSION_ID.match(session_id):
        raise InvalidArgument(
            "session_id must be 1-128 characters of letters, digits, '_', '.', ':' or '-'"
        )
    if not request.message.strip():
        raise InvalidArgument("message must not be empty")
    if len(request.message) > MAX_MESSAGE_CHARS:
        raise InvalidArgument(f"message is longer than {MAX_MESSAGE_CHARS} characters")
    return TurnRequest(session_id, request.message, request.script, request.mode)


def approval_answer_from_pb(
    request: a_pb2.ResolveAgentApprovalRequest,
) -> d_pb2.ResolveApprovalRequest:
    """The decision service's request for an answer given to the agent; checked."""
    if not request.approval_id:
        raise InvalidArgument("approval_id is required")
    if request.resolution == d_pb2.RESOLUTION_UNSPECIFIED:
        raise InvalidArgument("resolution must be ALLOW_ONCE, DENY or ALWAYS_ALLOW")
    forward = d_pb2.ResolveApprovalRequest(
        approval_id=request.approval_id,
        resolution=request.resolution,
        resolver=request.resolver,
    )
    if request.HasField("scope"):
        forward.scope.CopyFrom(request.scope)
    return forward


def event_to_pb(item: TurnEvent) -> a_pb2.RunTurnResponse:
    """The stream message of one numbered event."""
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(item.time_ns)
    message = a_pb2.RunTurnResponse(
        sequence=item.sequence, session_id=item.session_id, agent_name=item.agent_name, time=ts
    )
    _fill(message, item.event)
    return message


def _fill(message: a_pb2.RunTurnResponse, event: AgentEvent) -> None:
    """Set the oneof field of ``message`` that carries ``event``."""
    match event:
        case Text(text=text):
            message.text.text = text
        case ToolCallStarted(call=call):
            message.tool_call_started.call.CopyFrom(call_to_pb(call))
        case ToolCallFinished():
            message.tool_call_finished.CopyFrom(
                a_pb2.ToolCallFinishedEvent(
                    call_id=event.call_id,
                    tool_name=event.tool_name,
                    status=status_to_pb(event.status),
                    verdict=verdict_to_pb(event.verdict),
                    content=event.content,
                    winning_rule=event.winning_rule,
                    reason=event.reason,
                    elapsed_ms=event.elapsed_ms,
                )
            )
        case PermissionRequested():
            message.permission_requested.CopyFrom(
                a_pb2.PermissionRequestedEvent(
                    approval_id=event.approval_id,
                    call=call_to_pb(event.call),
                    reason=event.reason,
                    explanation=event.explanation,
                    always_allow_applies=event.always_allow_applies,
                )
            )
        case PermissionResolved():
            message.permission_resolved.CopyFrom(
                a_pb2.PermissionResolvedEvent(
                    approval_id=event.approval_id,
                    verdict=verdict_to_pb(event.verdict),
                    reason=event.reason,
                )
            )
        case SubagentStarted():
            message.subagent_started.CopyFrom(
                a_pb2.SubagentStartedEvent(
                    agent_name=event.agent_name, profile=event.profile, task=event.task
                )
            )
        case SubagentStopped():
            message.subagent_stopped.CopyFrom(
                a_pb2.SubagentStoppedEvent(
                    agent_name=event.agent_name,
                    reason=termination_to_pb(event.reason),
                    answer=event.answer,
                )
            )
        case StepComplete():
            message.step_complete.CopyFrom(
                a_pb2.StepCompleteEvent(step=event.step, tokens_used=event.tokens_used)
            )
        case Compaction():
            message.compaction.CopyFrom(
                a_pb2.CompactionEvent(
                    kind=event.kind,
                    tokens_before=event.tokens_before,
                    tokens_after=event.tokens_after,
                )
            )
        case FinalAnswer(text=text):
            message.final_answer.text = text
        case Terminated():
            message.terminated.CopyFrom(
                a_pb2.TerminatedEvent(reason=termination_to_pb(event.reason), detail=event.detail)
            )
        case Error(message=text):
            message.error.message = text
        case _:
            assert_never(event)


# ---------------------------------------------------------------- lifecycle events

_LIFECYCLE_TO_PB: dict[LifecycleKind, hook_pb2.LifecycleEventKind.ValueType] = {
    LifecycleKind.SESSION_START: hook_pb2.LIFECYCLE_EVENT_KIND_SESSION_START,
    LifecycleKind.SESSION_STOP: hook_pb2.LIFECYCLE_EVENT_KIND_SESSION_STOP,
    LifecycleKind.STEP_COMPLETE: hook_pb2.LIFECYCLE_EVENT_KIND_STEP_COMPLETE,
    LifecycleKind.SUBAGENT_START: hook_pb2.LIFECYCLE_EVENT_KIND_SUBAGENT_START,
    LifecycleKind.SUBAGENT_STOP: hook_pb2.LIFECYCLE_EVENT_KIND_SUBAGENT_STOP,
    LifecycleKind.PRE_COMPACT: hook_pb2.LIFECYCLE_EVENT_KIND_PRE_COMPACT,
    LifecycleKind.POST_COMPACT: hook_pb2.LIFECYCLE_EVENT_KIND_POST_COMPACT,
}


def lifecycle_details_to_dict(details: LifecycleDetails) -> dict[str, str | int]:
    """An event's details as the remote hooks' wire format has them (keys and JSON types
    per kind: ``stockade.agent.lifecycle``; a new kind fails mypy here until mapped)."""
    match details:
        case SessionStartDetails() | PreCompactDetails():
            return {}
        case SessionStopDetails(reason=reason, detail=detail, step=step):
            return {"reason": reason.value, "detail": detail, "step": step}
        case StepCompleteDetails(step=step, tokens_used=tokens):
            return {"step": step, "tokens_used": tokens}
        case SubagentStartDetails(profile=profile, task=task):
            return {"profile": profile, "task": task}
        case SubagentStopDetails(reason=reason, detail=detail):
            return {"reason": reason.value, "detail": detail}
        case PostCompactDetails(kind=kind, tokens_before=before, tokens_after=after):
            return {"kind": kind, "tokens_before": before, "tokens_after": after}
        case _:
            assert_never(details)


def lifecycle_details_to_struct(details: LifecycleDetails) -> struct_pb2.Struct:
    """An event's details as the ``details`` Struct remote hooks receive."""
    struct = struct_pb2.Struct()
    struct.update(lifecycle_details_to_dict(details))
    return struct


def lifecycle_to_pb(event: LifecycleEvent) -> hook_pb2.OnEventRequest:
    """The OnEvent request a remote hook receives for ``event``."""
    return hook_pb2.OnEventRequest(
        kind=_LIFECYCLE_TO_PB[event.kind],
        session_id=event.session_id,
        agent_name=event.agent_name,
        details=lifecycle_details_to_struct(event.details),
    )
