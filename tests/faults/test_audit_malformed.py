"""Malformed requests to every AuditService RPC (issue #12 item 11, the audit part), over
a real audit service process: each answers INVALID_ARGUMENT naming the problem (never
UNKNOWN or INTERNAL), and a deeply nested JSON field is stored cut, not refused."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from tests.faults.conftest import FaultStack, StartStack

MB = "x" * (1 << 20)


def _event(**fields: Any) -> a_pb2.AuditEvent:
    base: dict[str, Any] = {
        "event_id": "e1",
        "session_id": "s1",
        "tool_name": "read_file",
        "status": a_pb2.AUDIT_STATUS_OK,
    }
    base.update(fields)
    return a_pb2.AuditEvent(**base)


Call = Callable[[a_grpc.AuditServiceStub], Awaitable[Any]]


async def _tail_first(stub: a_grpc.AuditServiceStub, request: a_pb2.TailRequest) -> Any:
    call = stub.Tail(request, timeout=10)
    try:
        return await call.read()
    finally:
        call.cancel()


async def _batch(stub: a_grpc.AuditServiceStub, events: list[a_pb2.AuditEvent]) -> Any:
    async def messages() -> Any:
        yield a_pb2.RecordBatchRequest(events=events)

    return await stub.RecordBatch(messages(), timeout=30)


def _record(**fields: Any) -> Call:
    return lambda s: s.Record(a_pb2.RecordRequest(event=_event(**fields)))


def _query(**fields: Any) -> Call:
    return lambda s: s.Query(a_pb2.QueryRequest(**fields))


def _tail(**fields: Any) -> Call:
    return lambda s: _tail_first(s, a_pb2.TailRequest(**fields))


def _metrics(**fields: Any) -> Call:
    return lambda s: s.GetSessionMetrics(a_pb2.GetSessionMetricsRequest(**fields))


#: (case, call, text the status details must contain)
CASES: list[tuple[str, Call, str]] = [
    ("status out of range", _record(status=99), "status"),
    ("verdict out of range", _record(verdict=99), "verdict"),
    ("rule source out of range", _record(rule_source=77), "rule_source"),
    ("1 MB session id", _record(session_id=MB), "session_id"),
    ("empty event id", _record(event_id=""), "event_id"),
    ("arguments not JSON", _record(arguments_json="{x"), "arguments_json"),
    ("bad trace id", _record(trace_id="Z" * 32), "trace_id"),
    ("negative elapsed", _record(elapsed_ms=-1), "elapsed_ms"),
    ("batch over 10,000", lambda s: _batch(s, [_event(event_id=f"b{n}") for n in range(10_001)]),
     "at most 10000"),
    ("query status out of range", _query(status=42), "status"),
    ("query 1 MB session id", _query(session_id=MB), "session_id"),
    ("query 1 MB agent name", _query(agent_name=MB), "agent_name"),
    ("query garbage token", _query(page_token="!!not-a-token"), "token"),
    ("query huge token", _query(page_token=MB), "page_token"),
    ("query negative page size", _query(page_size=-1), "page_size"),
    ("tail 1 MB session id", _tail(session_id=MB), "session_id"),
    ("tail negative sequence", _tail(after_sequence=-1), "after_sequence"),
    ("metrics 1 MB session id", _metrics(session_id=MB), "session_id"),
    ("metrics no session id", _metrics(), "session_id"),
]  # fmt: skip


@pytest.fixture
async def audit(fault_stack: StartStack) -> FaultStack:
    return await fault_stack(["audit"])


async def test_every_malformed_request_is_invalid_argument_naming_the_problem(
    audit: FaultStack,
) -> None:
    wrong: list[str] = []
    async with grpc.aio.insecure_channel(audit.addresses["audit"]) as channel:
        stub = a_grpc.AuditServiceStub(channel)
        for case, call, names in CASES:
            try:
                await call(stub)
            except grpc.aio.AioRpcError as err:
                details = err.details() or ""
                if err.code() != grpc.StatusCode.INVALID_ARGUMENT or names not in details:
                    wrong.append(f"{case}: {err.code().name} {details[:200]}")
            else:
                wrong.append(f"{case}: accepted")
    assert not wrong, "\n".join(wrong)
    # Nothing malformed was stored.
    async with grpc.aio.insecure_channel(audit.addresses["audit"]) as channel:
        rows = await a_grpc.AuditServiceStub(channel).Query(a_pb2.QueryRequest())
    assert list(rows.records) == []


async def test_nested_and_oversized_json_is_stored_cut(audit: FaultStack) -> None:
    deep = "[" * 30_000 + "]" * 30_000
    big = json.dumps({"content": "z" * 200_000})
    async with grpc.aio.insecure_channel(audit.addresses["audit"]) as channel:
        stub = a_grpc.AuditServiceStub(channel)
        await stub.Record(a_pb2.RecordRequest(event=_event(event_id="d", arguments_json=deep)))
        await stub.Record(a_pb2.RecordRequest(event=_event(event_id="b", conflict_log=big)))
        rows = (await stub.Query(a_pb2.QueryRequest(session_id="s1"))).records
    by_id = {r.event.event_id: r.event for r in rows}
    assert "nested deeper" in json.loads(by_id["d"].arguments_json)["$stockade_cut"]["reason"]
    assert json.loads(by_id["b"].conflict_log)["$stockade_cut"]["bytes"] == len(big)
