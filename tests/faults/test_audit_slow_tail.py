"""Slow consumers of the audit Tail stream (issue #12): clients that open a tail and
never read cannot grow the audit service's memory without bound (gRPC flow control
holds the rows back; the store reads them in pages), and ingestion goes on."""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from stockade.client.audit import AuditRecorder
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from tests.faults.conftest import StartStack, all_rows

TAILS = 20
EVENTS = 8_000


async def test_tails_that_never_read_keep_memory_bounded(
    fault_stack: StartStack, tmp_path: object
) -> None:
    stack = await fault_stack(["audit"])
    address = stack.addresses["audit"]
    # Each stalled tail on its own connection (as separate clients would be): channels of
    # one process otherwise share a connection, whose window the stalled tails would
    # fill for everyone on it.
    local = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(address, options=local) for _ in range(TAILS)]
    recorder = AuditRecorder(address, f"{tmp_path}/tail.spool", linger_s=0.002)
    async with recorder:
        for first in ("t-a", "t-b"):
            recorder.enqueue(
                a_pb2.AuditEvent(event_id=first, session_id="s", tool_name="read_file", status=1)
            )
        assert await recorder.flush(60)
        calls = [
            a_grpc.AuditServiceStub(ch).Tail(a_pb2.TailRequest(after_sequence=1)) for ch in channels
        ]
        # Each tail reads one row, then is left alone (a stalled dashboard).
        for call in calls:
            first = await asyncio.wait_for(call.read(), 60)
            assert first.record.event.event_id == "t-b"
        before = stack.rss_kb("audit")
        for n in range(EVENTS):
            recorder.enqueue(
                a_pb2.AuditEvent(
                    event_id=f"t-{n}",
                    session_id=f"s{n % 7}",
                    tool_name="read_file",
                    status=a_pb2.AUDIT_STATUS_OK,
                    output_preview="o" * 200,
                    arguments_json='{"file_path":"' + "p" * 700 + '"}',
                )
            )
            if n % 500 == 0:
                await asyncio.sleep(0)
        assert await recorder.flush(120)
    after = stack.rss_kb("audit")
    # Unbounded buffering would hold every row once per tail: 20 x 8,000 x ~1.3 KB
    # = 200 MB. Flow control bounds each stalled tail to its window.
    growth_mb = (after - before) / 1024
    assert growth_mb < 80, f"audit RSS grew {growth_mb:.0f} MB with {TAILS} stalled tails"
    # A stalled tail that reads again gets the rows, in order, where it left off.
    second = await asyncio.wait_for(calls[0].read(), 30)
    assert second.record.sequence == 3 and second.record.event.event_id == "t-0"
    assert len(await all_rows(address)) == EVENTS + 2
    for call in calls:
        call.cancel()
    for ch in channels:
        with contextlib.suppress(Exception):
            await ch.close(None)
