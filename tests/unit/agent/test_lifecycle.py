"""Lifecycle events typed per kind (#13): each kind's details, the remote hooks' wire
format (pinned key by key: it is the one remote hooks had before the details were typed),
the AuditLog hook's SESSION_STOP row, and delivery of every kind to a real HookService
over gRPC (port 0).
"""

from __future__ import annotations

import typing
from typing import Any

import grpc
import pytest

from stockade.agent.builtin_hooks import PREVIEW_CHARS, AuditLogHook, session_stop_row
from stockade.agent.convert import lifecycle_details_to_dict, lifecycle_to_pb
from stockade.agent.hooks import HookPipeline
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
from stockade.agent.remote_hooks import FailurePolicy, RemoteHook, RemoteHookConfig
from stockade.contract.toolspec import struct_to_dict
from stockade.v1 import agent_service_pb2 as agent_pb2
from stockade.v1 import audit_service_pb2 as audit_pb2
from stockade.v1 import hook_service_pb2 as hook_pb2
from stockade.v1 import hook_service_pb2_grpc as hook_grpc

# One event of every kind, with the details a remote hook receives for it.
CASES: list[tuple[LifecycleDetails, dict[str, Any]]] = [
    (SessionStartDetails(), {}),
    (
        SessionStopDetails(Termination.MAX_STEPS, "the step budget (8) is spent", 8),
        {"reason": "MAX_STEPS", "detail": "the step budget (8) is spent", "step": 8},
    ),
    (StepCompleteDetails(3, 1_234), {"step": 3, "tokens_used": 1_234}),
    (
        SubagentStartDetails("explore", "find the config"),
        {"profile": "explore", "task": "find the config"},
    ),
    (
        SubagentStopDetails(Termination.COMPLETED, "answered"),
        {"reason": "COMPLETED", "detail": "answered"},
    ),
    (PreCompactDetails(), {}),
    (
        PostCompactDetails("manual", 9_000, 1_200),
        {"kind": "manual", "tokens_before": 9_000, "tokens_after": 1_200},
    ),
]
IDS = [type(details).__name__ for details, _ in CASES]


def test_every_kind_has_one_details_class() -> None:
    classes = typing.get_args(LifecycleDetails)
    assert {cls.KIND for cls in classes} == set(LifecycleKind)
    assert len(classes) == len(LifecycleKind)
    assert {type(details) for details, _ in CASES} == set(classes)


@pytest.mark.parametrize(("details", "wire"), CASES, ids=IDS)
def test_each_kind_keeps_the_remote_hooks_wire_format(
    details: LifecycleDetails, wire: dict[str, Any]
) -> None:
    event = LifecycleEvent("s1", details, "kid")
    assert event.kind is type(details).KIND
    assert lifecycle_details_to_dict(details) == wire
    request = lifecycle_to_pb(event)
    assert hook_pb2.LifecycleEventKind.Name(request.kind) == (
        f"LIFECYCLE_EVENT_KIND_{event.kind.name}"
    )
    assert (request.session_id, request.agent_name) == ("s1", "kid")
    assert struct_to_dict(request.details) == wire
    # JSON types: text stays text, counts are numbers (a Struct has no integers).
    for key, value in struct_to_dict(request.details).items():
        assert type(value) in ((int, float) if isinstance(wire[key], int) else (str,)), key


@pytest.mark.parametrize("reason", list(Termination), ids=lambda r: r.name)
def test_the_session_stop_row_carries_the_typed_reason(reason: Termination) -> None:
    secret = "AKIAIOSFODNN7EXAMPLE"
    details = SessionStopDetails(reason, f"stopped with key={secret} " + "x" * 400, 5)
    row = session_stop_row(LifecycleEvent("s1", details, "lead"), details)
    assert agent_pb2.TerminationReason.Name(row.termination) == f"TERMINATION_REASON_{reason.name}"
    assert not row.termination_reason  # every reason has its enum value
    assert (row.session_id, row.agent_name, row.step) == ("s1", "lead", 5)
    assert (row.tool_name, row.status) == ("session", audit_pb2.AUDIT_STATUS_SESSION_STOP)
    assert secret not in row.output_preview and len(row.output_preview) == PREVIEW_CHARS
    assert row.event_id and row.HasField("time")


class Sink:
    def __init__(self) -> None:
        self.events: list[audit_pb2.AuditEvent] = []

    def enqueue(self, event: audit_pb2.AuditEvent) -> None:
        self.events.append(event)


@pytest.mark.parametrize(("details", "wire"), CASES, ids=IDS)
async def test_only_the_session_stop_writes_an_audit_row(
    details: LifecycleDetails, wire: dict[str, Any]
) -> None:
    sink = Sink()
    await AuditLogHook(sink).on_event(LifecycleEvent("s1", details))
    if isinstance(details, SessionStopDetails):
        (row,) = sink.events
        assert row.termination == agent_pb2.TERMINATION_REASON_MAX_STEPS and row.step == 8
    else:
        assert sink.events == []


class Recorder(hook_grpc.HookServiceServicer):
    def __init__(self) -> None:
        self.events: list[hook_pb2.OnEventRequest] = []

    async def OnEvent(
        self, request: hook_pb2.OnEventRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> hook_pb2.OnEventResponse:
        self.events.append(request)
        return hook_pb2.OnEventResponse()


async def test_a_remote_hook_receives_every_kind_over_grpc() -> None:
    server = grpc.aio.server()
    recorder = Recorder()
    hook_grpc.add_HookServiceServicer_to_server(recorder, server)  # type: ignore[arg-type]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    hook = RemoteHook(
        RemoteHookConfig(
            address=f"127.0.0.1:{port}", timeout_s=10, failure_policy=FailurePolicy.FAIL_OPEN
        )
    )
    try:
        pipeline = HookPipeline([hook])
        for details, _ in CASES:
            await pipeline.emit(LifecycleEvent("s1", details, "lead"))
    finally:
        await hook.close()
        await server.stop(None)
    got = [
        (hook_pb2.LifecycleEventKind.Name(e.kind), struct_to_dict(e.details))
        for e in recorder.events
    ]
    assert got == [
        (f"LIFECYCLE_EVENT_KIND_{type(details).KIND.name}", wire) for details, wire in CASES
    ]
