"""STORE-4: two audit service processes write to one PostgreSQL, each its own hash chain;
one is SIGKILLed mid-stream and restarted while both producers keep sending (some events
to both replicas). Afterwards every event is stored exactly once, each producer's events
are in order, and every chain verifies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stockade.client.audit import AuditRecorder
from stockade.v1 import audit_service_pb2 as a_pb2
from tests.faults.conftest import StartStack, all_rows, verify_chain, wait_for

N = 1500  # events per producer
SHARED = 200  # the first SHARED events of producer a are also sent to replica b


def _event(producer: str, n: int) -> a_pb2.AuditEvent:
    message = a_pb2.AuditEvent(
        event_id=f"{producer}-{n}",
        session_id=f"session-{producer}",
        step=n,
        tool_name="read_file",
        status=a_pb2.AUDIT_STATUS_OK,
        elapsed_ms=1,
        output_preview=f"n={n}",
        agent_name="lead",
    )
    message.time.FromNanoseconds(1_700_000_000_000_000_000 + n)
    return message


def _recorder(address: str, spool: Path) -> AuditRecorder:
    return AuditRecorder(
        address,
        spool,
        batch_events=50,
        messages_per_call=2,
        linger_s=0.002,
        backoff_initial_s=0.02,
        backoff_max_s=0.2,
        deadline_s=5.0,
    )


async def test_two_writers_one_killed_every_chain_verifies_nothing_lost_or_doubled(
    fault_stack: StartStack, pg_dsn: str, tmp_path: Path
) -> None:
    stacks = {
        replica: await fault_stack(
            ["audit"],
            common_env={
                "STOCKADE_AUDIT_STORE_DSN": pg_dsn,
                "STOCKADE_AUDIT_REPLICA_ID": f"replica-{replica}",
            },
            base=tmp_path / f"r{replica}",
        )
        for replica in ("a", "b")
    }
    addresses = {replica: stack.addresses["audit"] for replica, stack in stacks.items()}
    recorders = {
        replica: _recorder(addresses[replica], tmp_path / f"spool-{replica}" / "audit.spool")
        for replica in ("a", "b")
    }
    for recorder in recorders.values():
        await recorder.start()

    killed = asyncio.Event()

    async def produce(replica: str) -> None:
        recorder = recorders[replica]
        for start in range(0, N, 25):
            if replica == "b" and start == N // 2:
                # The second half of b's events is produced while its replica is down.
                await killed.wait()
            for n in range(start, min(start + 25, N)):
                recorder.enqueue(_event(replica, n))
                if replica == "b" and n < SHARED:
                    recorder.enqueue(_event("a", n))  # the same event through both replicas
            await asyncio.sleep(0.002)

    async def kill_b_mid_stream() -> None:
        await wait_for(lambda: recorders["b"].sent >= N // 3, what="b to store a third")
        await stacks["b"].kill("audit")
        killed.set()
        # Producer b keeps going while its replica is down: its events wait in the spool.
        await wait_for(lambda: recorders["b"].spooled > 0, what="b's spool to fill")
        await stacks["b"].spawn("audit")
        await stacks["b"].wait_serving("audit", timeout_s=60.0)

    await asyncio.gather(produce("a"), produce("b"), kill_b_mid_stream())
    for recorder in recorders.values():
        assert await recorder.flush(60.0)
        await recorder.close()

    records = await all_rows(addresses["a"])
    ids = [r.event.event_id for r in records]
    expected = {f"{p}-{n}" for p in ("a", "b") for n in range(N)}
    assert len(ids) == len(set(ids)) == len(expected)
    assert set(ids) == expected
    for producer in ("a", "b"):
        in_log_order = [
            r.event.step for r in records if r.event.session_id == f"session-{producer}"
        ]
        if producer == "b":  # one producer, one replica: its order is kept
            assert in_log_order == list(range(N))
        else:
            assert sorted(in_log_order) == list(range(N))
    for replica in ("a", "b"):
        verdict = await verify_chain(addresses[replica])
        assert verdict.ok, verdict.detail
        assert verdict.rows_checked == len(expected)
        assert "'replica-a'" in verdict.detail and "'replica-b'" in verdict.detail
