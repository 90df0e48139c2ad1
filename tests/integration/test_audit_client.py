"""The audit client (AUD-2, AUD-4): never blocks, spools while the service is away and
replays in order without duplicates, isolates malformed events, several producers at once
keep per-session order."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.client.audit import AuditClient, AuditRecorder
from stockade.client.spool import Spool
from stockade.server.app import create_server, stop_server
from stockade.v1 import audit_service_pb2 as a_pb2


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Unix socket paths must stay short; tmp_path can be too long.
    path = Path(tempfile.mkdtemp(prefix="aud-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def audit_server(listen: str, state: Path) -> AsyncIterator[str]:
    settings = AuditSettings(listen=listen, state_dir=state, grace_seconds=1)
    async with AuditApp(settings).open() as registrations:
        running = await create_server("audit", settings, registrations)
        try:
            yield running.address
        finally:
            await stop_server(running)


def event(n: int, session: str = "s1", **fields: object) -> a_pb2.AuditEvent:
    message = a_pb2.AuditEvent(
        event_id=f"{session}-{n}",
        session_id=session,
        step=n,
        tool_name="read_file",
        status=a_pb2.AUDIT_STATUS_OK,
        agent_name="lead",
    )
    for name, value in fields.items():
        setattr(message, name, value)
    return message


async def stored_ids(address: str, session: str = "") -> list[str]:
    """Event ids in log order (oldest first)."""
    async with AuditClient(address) as client:
        request = a_pb2.QueryRequest(session_id=session, page_size=1000)
        records = [r async for r in client.query_all(request)]
    return [r.event.event_id for r in sorted(records, key=lambda r: r.sequence)]


async def test_spooled_while_down_then_replayed_in_order(tmp_path: Path, sock_dir: Path) -> None:
    listen = f"unix://{sock_dir}/audit.sock"
    spool = tmp_path / "spool" / "audit.spool"
    first = AuditRecorder(listen, spool, backoff_initial_s=0.01, backoff_max_s=0.05)
    await first.start()
    for n in range(500):
        first.enqueue(event(n))  # returns at once although nothing listens
    assert first.pending == 500
    assert not await first.flush(0.3)
    await first.close(timeout=0.1)
    assert spool.stat().st_size > 0

    async with audit_server(listen, tmp_path / "state") as address:
        second = AuditRecorder(address, spool)
        assert second.spooled == 500
        async with second:
            for n in range(500, 600):
                second.enqueue(event(n))
            assert await second.flush(30)
        assert await stored_ids(address) == [f"s1-{n}" for n in range(600)]
    assert spool.stat().st_size == 0


async def test_every_event_is_written_ahead_before_enqueue_returns(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorder = AuditRecorder(address, tmp_path / "audit.spool")
        async with recorder:
            # No await between enqueues: the sender cannot run, yet each event is already
            # on disk (a SIGKILL now would lose none of them).
            for n in range(1000):
                recorder.enqueue(event(n))
                assert recorder.spooled == n + 1
            assert recorder.backlog == 0
            assert await recorder.flush(30)
        assert await stored_ids(address) == [f"s1-{n}" for n in range(1000)]
    assert (tmp_path / "audit.spool").stat().st_size == 0


async def test_several_producers_keep_per_session_order(tmp_path: Path, sock_dir: Path) -> None:
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorders = [
            AuditRecorder(address, tmp_path / f"p{k}.spool", batch_events=37) for k in range(4)
        ]

        async def produce(k: int, recorder: AuditRecorder) -> None:
            async with recorder:
                for n in range(800):
                    recorder.enqueue(event(n, session=f"p{k}"))
                    if n % 25 == 0:
                        await asyncio.sleep(0)
                assert await recorder.flush(30)

        await asyncio.gather(*(produce(k, r) for k, r in enumerate(recorders)))
        for k in range(4):
            assert await stored_ids(address, f"p{k}") == [f"p{k}-{n}" for n in range(800)]
        async with AuditClient(address) as client:
            assert (await client.verify()).rows_checked == 3200


async def test_malformed_event_is_dead_lettered_and_a_stand_in_row_says_so(
    tmp_path: Path, sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorder = AuditRecorder(address, tmp_path / "audit.spool")
        bad = event(2, trace_id="not-a-trace-id")
        async with recorder:
            recorder.enqueue(event(1))
            recorder.enqueue(bad)
            recorder.enqueue(event(3))
            assert await recorder.flush(30)
        assert (recorder.rejected, recorder.dropped) == (1, 0)
        assert "trace_id" in caplog.text
        assert await stored_ids(address) == ["s1-1", "s1-2", "s1-3"]
        async with AuditClient(address) as client:
            rows = [r async for r in client.query_all(a_pb2.QueryRequest())]
        stand_in = next(r.event for r in rows if r.event.event_id == "s1-2")
        assert stand_in.output_preview.startswith("[audit event refused")
        assert "trace_id" in stand_in.output_preview
        marker = json.loads(stand_in.arguments_json)["$stockade_refused"]
        assert marker["sha256"] == hashlib.sha256(bad.SerializeToString()).hexdigest()
    letters = Spool(recorder.rejected_path)
    assert letters.peek(10)[0] == [bad.SerializeToString()]
    letters.close()


async def test_enqueue_from_another_thread(tmp_path: Path, sock_dir: Path) -> None:
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorder = AuditRecorder(address, tmp_path / "audit.spool")
        async with recorder:
            thread = threading.Thread(
                target=lambda: [recorder.enqueue(event(n)) for n in range(1000)]
            )
            thread.start()
            await asyncio.to_thread(thread.join)
            assert await recorder.flush(30)
        assert await stored_ids(address) == [f"s1-{n}" for n in range(1000)]


async def test_close_flushes_what_it_holds(tmp_path: Path, sock_dir: Path) -> None:
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorder = AuditRecorder(address, tmp_path / "audit.spool", linger_s=0.5)
        await recorder.start()
        for n in range(10):
            recorder.enqueue(event(n))
        await recorder.aclose()
        assert await stored_ids(address) == [f"s1-{n}" for n in range(10)]


async def test_queue_depth_and_spool_size_metrics(
    tmp_path: Path, sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])

    def sums() -> dict[str, int]:
        data = reader.get_metrics_data()
        assert data is not None
        return {
            metric.name: sum(int(p.value) for p in metric.data.data_points)  # type: ignore[union-attr]
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }

    listen = f"unix://{sock_dir}/audit.sock"
    recorder = AuditRecorder(
        listen, tmp_path / "audit.spool", backoff_max_s=0.05, meter=provider.get_meter("t")
    )
    await recorder.start()
    for n in range(100):
        recorder.enqueue(event(n))
    figures = sums()
    assert figures["stockade.audit.client.spool_size"] == 100  # written ahead at once
    assert figures.get("stockade.audit.client.queue_depth", 0) == 0  # none in memory
    assert not await recorder.flush(0.2)  # nothing listens: the events stay spooled
    figures = sums()
    assert figures.get("stockade.audit.client.queue_depth", 0) == 0
    assert figures["stockade.audit.client.spool_size"] == 100
    await recorder.close(timeout=0.1)
    # A closed recorder no longer counts what it left on disk; the next one will.
    assert sums()["stockade.audit.client.spool_size"] == 0
    async with audit_server(listen, tmp_path / "state"):
        again = AuditRecorder(listen, tmp_path / "audit.spool", meter=provider.get_meter("t"))
        assert sums()["stockade.audit.client.spool_size"] == 100
        async with again:
            assert await again.flush(30)
    figures = sums()
    assert figures["stockade.audit.client.spool_size"] == 0
    assert figures["stockade.audit.client.events_sent"] == 100
    provider.shutdown()


async def test_closed_recorder_refuses_events_and_closes_once(tmp_path: Path) -> None:
    recorder = AuditRecorder("unix:///nonexistent/audit.sock", tmp_path / "audit.spool")
    recorder.enqueue(event(1))  # never started: spooled at once, kept by close
    await recorder.close(timeout=0)
    await recorder.close(timeout=0)
    with pytest.raises(RuntimeError, match="closed"):
        recorder.enqueue(event(2))
    again = AuditRecorder("unix:///nonexistent/audit.sock", tmp_path / "audit.spool")
    assert again.spooled == 1
    await again.close(timeout=0)


async def test_big_arguments_are_recorded_cut_and_batches_split_to_fit(
    tmp_path: Path, sock_dir: Path
) -> None:
    # 100 KB arguments (a big file_write) are cut to a marker; 200 events of 60,000
    # characters each (12 MB, three times gRPC's 4 MB message limit) travel whole.
    big = json.dumps({"path": "big.txt", "content": "a" * 100_000}, sort_keys=True)
    fits = json.dumps({"content": "b" * 59_980})
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorder = AuditRecorder(address, tmp_path / "audit.spool")
        async with recorder:
            recorder.enqueue(event(0, tool_name="file_write", arguments_json=big))
            for n in range(1, 201):
                recorder.enqueue(event(n, arguments_json=fits))
            assert await recorder.flush(60)
        assert recorder.rejected == 0
        async with AuditClient(address) as client:
            rows = [r async for r in client.query_all(a_pb2.QueryRequest(page_size=50))]
            verdict = await client.verify()
    assert (verdict.cut_rows, verdict.refused_rows) == (1, 0)
    by_id = {r.event.event_id: r.event for r in rows}
    assert len(by_id) == 201
    cut = json.loads(by_id["s1-0"].arguments_json)
    assert cut["$stockade_cut"]["sha256"] == hashlib.sha256(big.encode()).hexdigest()
    assert cut["$stockade_cut"]["bytes"] == len(big)
    assert big.startswith(cut["head"])
    assert all(by_id[f"s1-{n}"].arguments_json == fits for n in range(1, 201))


@pytest.mark.parametrize(
    "fields",
    [
        {"output_preview": "x" * (5 << 20)},  # one event over 4 MB
        {"session_id": "s" * (1 << 20)},  # a field the service refuses, over 512 KB
        {"session_id": "s" * 300},  # a field the service refuses, small
        {"matched_rule": "r" * 5000, "output_preview": "y" * (3 << 20)},
    ],
    ids=["over-4MB", "1MB-session", "long-session", "3MB-and-bad"],
)
async def test_an_event_that_can_never_be_stored_does_not_block_the_stream(
    tmp_path: Path, sock_dir: Path, fields: dict[str, object]
) -> None:
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorder = AuditRecorder(address, tmp_path / "audit.spool")
        async with recorder:
            recorder.enqueue(event(0))
            bad = event(1, **fields)
            recorder.enqueue(bad)
            for n in range(2, 420):
                recorder.enqueue(event(n))
            assert await recorder.flush(60)
        assert (recorder.rejected, recorder.dropped, recorder.lost) == (1, 0, 0)
        assert recorder.spooled == 0
        async with AuditClient(address) as client:
            rows = [r async for r in client.query_all(a_pb2.QueryRequest(page_size=1000))]
            verdict = await client.verify()
    assert (verdict.ok, verdict.rows_checked, verdict.refused_rows) == (True, 420, 1)
    assert len(rows) == 420
    stand_in = next(r.event for r in rows if r.event.step == 1)
    assert stand_in.output_preview.startswith("[audit event refused")
    marker = json.loads(stand_in.arguments_json)["$stockade_refused"]
    assert marker["bytes"] == len(bad.SerializeToString())
    assert (tmp_path / "audit.spool").stat().st_size == 0  # nothing stuck after the stop
    letters = Spool(recorder.rejected_path)
    assert letters.pending == 1
    letters.close()


async def test_deeply_nested_arguments_are_cut_never_internal(
    tmp_path: Path, sock_dir: Path
) -> None:
    nested = "[" * 30_000 + "]" * 30_000  # under the length limit, far too deep
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorder = AuditRecorder(address, tmp_path / "audit.spool")
        async with recorder:
            recorder.enqueue(event(0, arguments_json=nested))
            recorder.enqueue(event(1))
            assert await recorder.flush(30)
        assert recorder.rejected == 0
        # A producer that does not cut: the service cuts (INVALID_ARGUMENT never, INTERNAL
        # never).
        async with AuditClient(address) as client:
            deep = "[" * 20_000 + "]" * 20_000
            await client.record(event(2, arguments_json=deep))
            rows = [r async for r in client.query_all(a_pb2.QueryRequest())]
    by_step = {r.event.step: r.event for r in rows}
    for step in (0, 2):
        reason = json.loads(by_step[step].arguments_json)["$stockade_cut"]["reason"]
        assert "nested deeper than 64" in reason
    assert set(by_step) == {0, 1, 2}


async def test_group_fsync_makes_events_durable_with_one_fsync_for_many_waiters(
    tmp_path: Path, sock_dir: Path
) -> None:
    async with audit_server(f"unix://{sock_dir}/a.sock", tmp_path / "state") as address:
        recorder = AuditRecorder(address, tmp_path / "audit.spool", fsync=True)
        async with recorder:

            async def call(n: int) -> None:
                recorder.enqueue(event(n))
                await recorder.wait_durable()

            await asyncio.gather(*(call(n) for n in range(100)))
            assert 1 <= recorder.syncs <= 2
            await call(100)
            assert recorder.syncs <= 3
            assert await recorder.flush(30)
        assert len(await stored_ids(address)) == 101
