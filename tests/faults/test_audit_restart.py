"""AUD-4: the audit service is SIGKILLed and restarted twice while a producer sends N
events through the audit client; afterwards exactly N rows exist, in order per session,
with no duplicates, and the hash chain verifies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stockade.client.audit import AuditRecorder
from stockade.v1 import audit_service_pb2 as a_pb2
from tests.faults.conftest import StartStack, all_rows, verify_chain

N = 6000
SESSIONS = 3


def _event(n: int) -> a_pb2.AuditEvent:
    session = f"session-{n % SESSIONS}"
    message = a_pb2.AuditEvent(
        event_id=f"ev-{n}",
        session_id=session,
        step=n // SESSIONS,
        tool_name="read_file",
        status=a_pb2.AUDIT_STATUS_OK,
        elapsed_ms=1,
        output_preview=f"n={n}",
        agent_name="lead",
    )
    message.time.FromNanoseconds(1_700_000_000_000_000_000 + n)
    return message


async def test_no_event_lost_or_duplicated_across_two_sigkills(
    fault_stack: StartStack, tmp_path: Path
) -> None:
    stack = await fault_stack(["audit"])
    address = stack.addresses["audit"]
    recorder = AuditRecorder(
        address,
        tmp_path / "spool" / "audit.spool",
        batch_events=100,
        messages_per_call=2,
        linger_s=0.002,
        backoff_initial_s=0.02,
        backoff_max_s=0.2,
        deadline_s=5.0,
    )
    await recorder.start()
    most_spooled = 0
    kills = 0
    produced = asyncio.Event()

    async def produce() -> None:
        nonlocal most_spooled
        for start in range(0, N, 30):
            for n in range(start, min(start + 30, N)):
                recorder.enqueue(_event(n))
            most_spooled = max(most_spooled, recorder.spooled)
            await asyncio.sleep(0.002)
        produced.set()

    async def kill_and_restart(after_sent: int) -> None:
        nonlocal kills, most_spooled
        while recorder.sent < after_sent:
            await asyncio.sleep(0.002)
        await stack.kill("audit")
        kills += 1
        # Keep producing while the service is down, so events go through the spool.
        for _ in range(40):
            most_spooled = max(most_spooled, recorder.spooled)
            await asyncio.sleep(0.005)
        await stack.spawn("audit")
        await stack.wait_serving("audit")

    async def killer() -> None:
        await kill_and_restart(N // 6)
        await kill_and_restart(N // 2)

    await asyncio.gather(produce(), killer())
    assert await recorder.flush(60.0)
    await recorder.close()
    assert kills == 2
    assert most_spooled > 0, "the outage never reached the spool; the test proved nothing"

    records = await all_rows(address)
    verdict = await verify_chain(address)
    ids = [r.event.event_id for r in records]
    assert len(ids) == N
    assert len(set(ids)) == N
    assert set(ids) == {f"ev-{n}" for n in range(N)}
    for k in range(SESSIONS):
        in_log_order = [
            int(r.event.event_id[3:])
            for r in sorted(records, key=lambda r: r.sequence)
            if r.event.session_id == f"session-{k}"
        ]
        assert in_log_order == list(range(k, N, SESSIONS))
    assert verdict.ok and verdict.rows_checked == N
