"""The audit service over real gRPC (in-process server on port 0, real SQLite file):
every RPC, bad input as INVALID_ARGUMENT with ErrorInfo, tampering seen by VerifyLog."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.server.app import create_server, stop_server
from stockade.server.errors import error_info
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2

BASE_S = 1_700_000_000


@dataclass
class Served:
    stub: a_grpc.AuditServiceStub
    channel: grpc.aio.Channel
    db: Path


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    settings = AuditSettings(listen="127.0.0.1:0", state_dir=tmp_path / "audit", grace_seconds=1)
    app = AuditApp(settings)
    async with app.open() as registrations:
        running = await create_server("audit", settings, registrations)
        channel = grpc.aio.insecure_channel(running.address)
        try:
            yield Served(a_grpc.AuditServiceStub(channel), channel, Path(settings.db_path))
        finally:
            await channel.close(None)
            await stop_server(running)


def event(n: int, session: str = "s1", **fields: object) -> a_pb2.AuditEvent:
    message = a_pb2.AuditEvent(
        event_id=f"{session}-{n}",
        session_id=session,
        step=n,
        tool_name="read_file",
        status=a_pb2.AUDIT_STATUS_OK,
        elapsed_ms=3,
        output_preview=f"out {n}",
        agent_name="lead",
        call_id=f"c{n}",
        verdict=common_pb2.VERDICT_ALLOW,
        matched_rule="read_file(*)",
        rule_source=common_pb2.RULE_SOURCE_MANAGED,
        trace_id=f"{n:032x}",
    )
    message.time.seconds = BASE_S + n
    for name, value in fields.items():
        setattr(message, name, value)
    return message


async def batches(*groups: list[a_pb2.AuditEvent]) -> AsyncIterator[a_pb2.RecordBatchRequest]:
    for group in groups:
        yield a_pb2.RecordBatchRequest(events=group)


async def test_health_reports_the_audit_service(served: Served) -> None:
    health = health_pb2_grpc.HealthStub(served.channel)
    for name in ("", "stockade.v1.AuditService"):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_record_is_idempotent(served: Served) -> None:
    first = await served.stub.Record(a_pb2.RecordRequest(event=event(1)))
    again = await served.stub.Record(a_pb2.RecordRequest(event=event(1)))
    assert (first.duplicate, again.duplicate) == (False, True)
    page = await served.stub.Query(a_pb2.QueryRequest())
    assert [r.event.event_id for r in page.records] == ["s1-1"]
    expected = event(1)
    # Read back typed too (the event was sent with the deprecated strings only).
    expected.winning_rule.CopyFrom(
        common_pb2.Rule(pattern=expected.matched_rule, source=expected.rule_source)
    )
    assert page.records[0].event == expected


async def test_record_batch_stores_every_batch_in_order(served: Served) -> None:
    groups = [[event(n) for n in range(k * 100, (k + 1) * 100)] for k in range(5)]
    reply = await served.stub.RecordBatch(batches(*groups, groups[0]))
    assert (reply.accepted, reply.duplicates) == (500, 100)
    ids: list[str] = []
    request = a_pb2.QueryRequest(session_id="s1", page_size=64)
    while True:
        page = await served.stub.Query(request)
        ids.extend(r.event.event_id for r in page.records)
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    assert ids == [f"s1-{n}" for n in range(499, -1, -1)]


async def test_bad_event_is_invalid_argument_naming_the_field(served: Served) -> None:
    bad = event(2, trace_id="XYZ")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.stub.RecordBatch(batches([event(1), bad, event(3)]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "trace_id" in (caught.value.details() or "")
    info = error_info(caught.value)
    assert info is not None and info.reason == "INVALID_ARGUMENT"
    assert info.metadata["field"] == "trace_id" and info.metadata["index"] == "1"
    page = await served.stub.Query(a_pb2.QueryRequest())
    assert list(page.records) == []


async def test_a_refused_batch_ends_the_stream_before_later_batches(served: Served) -> None:
    """Several batches of a stream are in the store's hands at once, but a batch that is
    refused stops the stream first: the batches before it are stored, none after it."""
    groups = [[event(n) for n in range(k * 10, (k + 1) * 10)] for k in range(6)]
    groups[3][4] = event(34, trace_id="XYZ")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.stub.RecordBatch(batches(*groups))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info is not None and (info.metadata["field"], info.metadata["index"]) == (
        "trace_id",
        "4",
    )
    page = await served.stub.Query(a_pb2.QueryRequest(page_size=100))
    assert sorted(r.event.event_id for r in page.records) == sorted(f"s1-{n}" for n in range(30))
    verdict = await served.stub.VerifyLog(a_pb2.VerifyLogRequest())
    assert (verdict.ok, verdict.rows_checked) == (True, 30)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"event_id": ""}, "event_id"),
        ({"session_id": "s" * 300}, "session_id"),
        ({"matched_rule": "r" * 5000}, "matched_rule"),
        ({"conflict_log": "{broken"}, "conflict_log"),
        ({"status": 42}, "status"),
        ({"verdict": 9}, "verdict"),
        ({"status": a_pb2.AUDIT_STATUS_UNSPECIFIED}, "status"),
    ],
)
async def test_oversized_or_malformed_fields_are_refused(
    served: Served, fields: dict[str, object], field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.stub.Record(a_pb2.RecordRequest(event=event(1, **fields)))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info is not None and info.metadata["field"] == field


async def test_long_preview_is_cut_to_200(served: Served) -> None:
    await served.stub.Record(a_pb2.RecordRequest(event=event(1, output_preview="p" * 10_000)))
    page = await served.stub.Query(a_pb2.QueryRequest())
    assert page.records[0].event.output_preview == "p" * 200


@pytest.mark.parametrize("token", ["!!!", "eyJ2IjoyfQ", "bm90IGpzb24"])
async def test_malformed_page_token_is_invalid_argument(served: Served, token: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.stub.Query(a_pb2.QueryRequest(page_token=token))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info is not None and info.reason == "INVALID_PAGE_TOKEN"


async def test_query_filters_by_status_and_time(served: Served) -> None:
    denied = event(2, status=a_pb2.AUDIT_STATUS_DENIED, verdict=common_pb2.VERDICT_DENY)
    await served.stub.RecordBatch(batches([event(1), denied, event(3)]))
    page = await served.stub.Query(a_pb2.QueryRequest(status=a_pb2.AUDIT_STATUS_DENIED))
    assert [r.event.event_id for r in page.records] == ["s1-2"]
    assert page.records[0].event.verdict == common_pb2.VERDICT_DENY
    window = a_pb2.QueryRequest()
    window.start_time.seconds = BASE_S + 2
    window.end_time.seconds = BASE_S + 3
    page = await served.stub.Query(window)
    assert [r.event.event_id for r in page.records] == ["s1-2"]


async def test_tail_streams_new_rows_of_one_session(served: Served) -> None:
    await served.stub.Record(a_pb2.RecordRequest(event=event(0)))
    call = served.stub.Tail(a_pb2.TailRequest(session_id="s1"))
    got: list[str] = []

    async def read() -> None:
        async for reply in call:
            got.append(reply.record.event.event_id)
            if len(got) == 6:
                return

    reader = asyncio.create_task(read())
    # The tail starts at the head whenever it subscribes: keep writing batches (with rows
    # of another session between) until it has seen six rows of its own.
    n = 1
    while not reader.done() and n < 2000:
        await served.stub.RecordBatch(
            batches([event(n), event(n, session="s2"), event(n + 1)], [event(n + 2)])
        )
        n += 3
        await asyncio.sleep(0.01)
    await asyncio.wait_for(reader, 10)
    call.cancel()
    assert "s1-0" not in got
    numbers = [int(i.removeprefix("s1-")) for i in got]
    assert numbers == list(range(numbers[0], numbers[0] + 6))


async def test_session_metrics(served: Served) -> None:
    stop = event(
        9,
        tool_name="session",
        status=a_pb2.AUDIT_STATUS_SESSION_STOP,
        termination_reason="final answer",
        verdict=0,
        rule_source=0,
    )
    failed = event(2, tool_name="run_bash", status=a_pb2.AUDIT_STATUS_FAIL, elapsed_ms=40)
    await served.stub.RecordBatch(batches([event(1), failed, stop]))
    reply = await served.stub.GetSessionMetrics(a_pb2.GetSessionMetricsRequest(session_id="s1"))
    assert (reply.calls, reply.errors, reply.denials) == (2, 1, 0)
    assert reply.termination_reason == "final answer"
    assert {t.tool_name: t.max_elapsed_ms for t in reply.tools} == {"read_file": 3, "run_bash": 40}
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.stub.GetSessionMetrics(a_pb2.GetSessionMetricsRequest())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_verify_log_names_the_first_broken_link(served: Served) -> None:
    await served.stub.RecordBatch(batches([event(n) for n in range(1, 21)]))
    ok = await served.stub.VerifyLog(a_pb2.VerifyLogRequest())
    assert (ok.ok, ok.rows_checked, ok.head_sequence) == (True, 20, 20)
    assert len(ok.head_hash) == 64
    with sqlite3.connect(served.db) as db:
        db.execute("UPDATE agent_audit_log SET status = 'DENIED' WHERE sequence = 12")
        db.execute("DELETE FROM agent_audit_log WHERE sequence = 15")
    broken = await served.stub.VerifyLog(a_pb2.VerifyLogRequest())
    assert (broken.ok, broken.first_broken_sequence) == (False, 12)
    assert broken.detail


async def test_tail_resumes_after_a_sequence(served: Served) -> None:
    await served.stub.RecordBatch(batches([event(n) for n in range(1, 11)]))
    call = served.stub.Tail(a_pb2.TailRequest(session_id="s1", after_sequence=4))
    got: list[int] = []
    async for reply in call:
        got.append(reply.record.sequence)
        if len(got) == 6:
            break
    call.cancel()
    assert got == [5, 6, 7, 8, 9, 10]
    bad = served.stub.Tail(a_pb2.TailRequest(after_sequence=-1))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in bad:
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
