"""Issue #14: an audit replica on PostgreSQL whose writer connection is terminated
(``pg_terminate_backend``) mid-stream reconnects by itself, says NOT_SERVING through the
standard gRPC health service meanwhile, and loses or doubles nothing: the producer keeps
its events in its spool while appends fail UNAVAILABLE, and sends them again after.

The test holds the chain's advisory lock from its own session right after the kill, so
the replica cannot take its chain back until the test lets go: the NOT_SERVING window is
as long as the test needs to see it, not a race."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade.audit.store.postgres import _CHAIN_LOCK_CLASS
from stockade.client.audit import AuditRecorder
from stockade.client.base import aio_channel
from stockade.server import LIVENESS, READINESS
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from tests.faults.conftest import StartStack, all_rows, verify_chain, wait_for

N = 900
REPLICA = "replica-r"
SERVICE = "stockade.v1.AuditService"


def _event(n: int) -> a_pb2.AuditEvent:
    message = a_pb2.AuditEvent(
        event_id=f"r-{n}",
        session_id="session-r",
        step=n,
        tool_name="read_file",
        status=a_pb2.AUDIT_STATUS_OK,
        agent_name="lead",
    )
    message.time.FromNanoseconds(1_700_000_000_000_000_000 + n)
    return message


async def _health(address: str, service: str = SERVICE) -> int:
    async with aio_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
    return int(reply.status)


async def _writer_pid(admin: asyncpg.Connection) -> int:
    """The backend that holds the replica's chain lock: its writer connection."""
    pid = await admin.fetchval(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid::bigint = $1 AND objid::bigint = hashtext($2)::bigint & 4294967295"
        " AND objsubid = 2",
        _CHAIN_LOCK_CLASS,
        REPLICA,
    )
    assert pid is not None, "the replica's writer holds no chain lock"
    return int(pid)


async def test_a_terminated_writer_reconnects_unhealthy_meanwhile_nothing_lost_or_doubled(
    fault_stack: StartStack, pg_dsn: str, tmp_path: Path
) -> None:
    stack = await fault_stack(
        ["audit"],
        common_env={"STOCKADE_AUDIT_STORE_DSN": pg_dsn, "STOCKADE_AUDIT_REPLICA_ID": REPLICA},
    )
    address = stack.addresses["audit"]
    recorder = AuditRecorder(
        address,
        tmp_path / "spool" / "audit.spool",
        batch_events=25,
        messages_per_call=2,
        linger_s=0.002,
        backoff_initial_s=0.02,
        backoff_max_s=0.2,
        deadline_s=5.0,
    )
    await recorder.start()
    admin = await asyncpg.connect(pg_dsn)
    terminated = asyncio.Event()

    async def produce() -> None:
        for start in range(0, N, 25):
            for n in range(start, start + 25):
                recorder.enqueue(_event(n))
            await asyncio.sleep(0.002)
            if start == N // 3:
                await terminated.wait()  # the rest is produced while the writer is down

    async def terminate_mid_stream() -> None:
        await wait_for(lambda: recorder.sent >= N // 4, what="a quarter to be stored")
        pid = await _writer_pid(admin)
        # Kill the writer and queue for its chain lock in one statement: this session
        # waits in the lock's queue while the killed backend exits, and the lock manager
        # hands the lock over on release, so the replica's new session cannot take it.
        await admin.execute(
            "SELECT pg_terminate_backend($1), pg_advisory_lock($2, hashtext($3))",
            pid,
            _CHAIN_LOCK_CLASS,
            REPLICA,
        )
        terminated.set()
        # Unhealthy while it cannot write; an append meanwhile is UNAVAILABLE.
        for _ in range(1200):
            if await _health(address) == health_pb2.HealthCheckResponse.NOT_SERVING:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the replica stayed SERVING without its writer")
        # Not ready, and alive: the liveness probe does not restart it for its database.
        assert await _health(address, LIVENESS) == health_pb2.HealthCheckResponse.SERVING
        assert await _health(address, READINESS) == health_pb2.HealthCheckResponse.NOT_SERVING
        async with aio_channel(address) as channel:
            try:
                await a_grpc.AuditServiceStub(channel).Record(
                    a_pb2.RecordRequest(event=_event(N + 1)), timeout=10
                )
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.UNAVAILABLE, err
            else:
                raise AssertionError("an append without a writer was accepted")
        await wait_for(lambda: recorder.spooled > 0, what="the producer to spool")
        await admin.execute(
            "SELECT pg_advisory_unlock($1, hashtext($2))", _CHAIN_LOCK_CLASS, REPLICA
        )
        for _ in range(1200):
            if await _health(address) == health_pb2.HealthCheckResponse.SERVING:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the replica did not come back")

    try:
        await asyncio.gather(produce(), terminate_mid_stream())
        assert await recorder.flush(120.0)
        await recorder.close()
    finally:
        await admin.close()

    records = await all_rows(address)
    ids = [r.event.event_id for r in records]
    assert len(ids) == len(set(ids)) == N  # nothing doubled, nothing lost
    assert set(ids) == {f"r-{n}" for n in range(N)}
    # One producer, one replica: its order is kept across the reconnection.
    assert [r.event.step for r in records] == list(range(N))
    verdict = await verify_chain(address)
    assert verdict.ok, verdict.detail
    [chain] = verdict.chains
    assert (chain.chain_id, chain.rows_checked, chain.head_position) == (REPLICA, N, N)
