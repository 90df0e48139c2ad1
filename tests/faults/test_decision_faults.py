"""The decision service hurt for real (#12 items 2, 7): SIGKILL and restart under load,
SIGSTOP past the callers' deadlines, SIGTERM with approval waits in flight, and watchers
that never read. Each scenario runs the real service process (``fault_stack``) and asserts
exact counts: every call answered, 0 ALLOWs while the service cannot decide (fail
closed), every approval wait re-attached and answered, nothing answerable that nobody
will act on."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.client.base import aio_channel
from stockade.client.decision import DecisionClient
from stockade.client.errors import FailedPreconditionError, ServiceError, UnavailableError
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc
from tests.faults.conftest import FaultStack, StartStack, wait_for

DECISION_ENV = {
    "STOCKADE_DECISION_ALLOW": "read_file",
    "STOCKADE_DECISION_ASK": "file_write",
    "STOCKADE_DECISION_APPROVAL_TIMEOUT_S": "600",
    "STOCKADE_DECISION_DENIAL_MAX_CONSECUTIVE": "1000000",
    "STOCKADE_DECISION_DENIAL_MAX_TOTAL": "1000000",
}


def read(session: str, call_id: str) -> d_pb2.DecideRequest:
    args = struct_pb2.Struct()
    args.update({"file_path": "/w/a.txt"})
    return d_pb2.DecideRequest(
        call=c_pb2.ToolCall(
            session_id=session, call_id=call_id, tool_name="read_file", arguments=args
        ),
        inspection=d_pb2.ToolInspection(read_only=True),
    )


def write(session: str, call_id: str) -> d_pb2.DecideRequest:
    args = struct_pb2.Struct()
    args.update({"file_path": f"/w/{call_id}.txt", "content": "x"})
    return d_pb2.DecideRequest(
        call=c_pb2.ToolCall(
            session_id=session, call_id=call_id, tool_name="file_write", arguments=args
        )
    )


@contextlib.asynccontextmanager
async def _decision(
    fault_stack: StartStack, **extra: str
) -> AsyncIterator[tuple[FaultStack, DecisionClient, DecisionClient]]:
    stack = await fault_stack(["decision"], env={"decision": {**DECISION_ENV, **extra}})
    address = stack.addresses["decision"]
    # A generous Decide deadline: the client's 2 s default turned 73 of 100 concurrent
    # asks into fail-closed DENYs on a busy machine. A dead service still fails at once
    # (UNAVAILABLE), which is what the scenarios here check.
    async with aio_channel(address) as ch, aio_channel(address) as admin_ch:
        yield (
            stack,
            DecisionClient(ch, decide_deadline_s=60),
            DecisionClient(admin_ch, decide_deadline_s=60, admin_token=stack.admin_token),
        )


def verdicts(responses: list[d_pb2.DecideResponse]) -> Counter[str]:
    return Counter(c_pb2.Verdict.Name(r.verdict) for r in responses)


async def test_sigkill_under_load_fails_closed_and_recovers(fault_stack: StartStack) -> None:
    async with _decision(fault_stack) as (stack, client, _):
        n = 150

        async def burst(tag: str) -> list[d_pb2.DecideResponse]:
            return await asyncio.gather(
                *(client.decide(read(f"s{i % 10}", f"{tag}-{i}")) for i in range(n))
            )

        phase = "up"
        loaded: list[tuple[str, str, d_pb2.DecideResponse]] = []
        stop_load = asyncio.Event()

        async def load() -> None:
            i = 0
            while not stop_load.is_set():
                started = phase
                resp = await client.decide(read("load", f"load-{i}"))
                loaded.append((started, phase, resp))
                i += 1
                await asyncio.sleep(0.005)

        loader = asyncio.create_task(load())
        before = await burst("before")
        assert verdicts(before) == {"VERDICT_ALLOW": n}
        assert all(r.HasField("grant") for r in before)
        await stack.kill("decision")
        phase = "down"
        down = await burst("down")
        # Fail closed: every call answered, every one a DENY saying why, no grant.
        assert verdicts(down) == {"VERDICT_DENY": n}
        assert all("fail closed" in r.reason and not r.HasField("grant") for r in down)
        # Keep the load running against the dead service for a while.
        await wait_for(
            lambda: sum(1 for s, e, _ in loaded if s == e == "down") >= 20,
            what="20 background calls while the service is down",
        )
        phase = "restarting"
        await stack.spawn("decision")
        await stack.wait_serving("decision")
        # The client's channel reconnects on its own backoff (at most 1 s): wait for it.

        async def allowed() -> bool:
            resp = await client.decide(read("probe", "probe"))
            return resp.verdict == c_pb2.VERDICT_ALLOW

        await wait_for(allowed, what="the client to reach the restarted service")
        phase = "up again"
        after = await burst("after")
        assert verdicts(after) == {"VERDICT_ALLOW": n}
        stop_load.set()
        await loader
        # The background load: whatever ran entirely while the service was down is a DENY.
        while_down = [r for s, e, r in loaded if s == e == "down"]
        assert while_down, "the load ran no call while the service was down"
        assert verdicts(while_down) == {"VERDICT_DENY": len(while_down)}
        assert all(r.verdict in (c_pb2.VERDICT_ALLOW, c_pb2.VERDICT_DENY) for _, _, r in loaded)


async def test_sigstop_past_deadlines_is_denied_then_recovers(fault_stack: StartStack) -> None:
    async with _decision(fault_stack) as (stack, client, _):
        assert (await client.decide(read("s", "warm"))).verdict == c_pb2.VERDICT_ALLOW
        client._decide_deadline = 0.5
        async with stack.paused("decision"):
            frozen = await asyncio.gather(*(client.decide(read("s", f"f{i}")) for i in range(40)))
        assert verdicts(frozen) == {"VERDICT_DENY": 40}
        assert all("fail closed" in r.reason and "DEADLINE_EXCEEDED" in r.reason for r in frozen)
        client._decide_deadline = 30.0
        thawed = await asyncio.gather(*(client.decide(read("s", f"t{i}")) for i in range(40)))
        assert verdicts(thawed) == {"VERDICT_ALLOW": 40}


async def _asks(client: DecisionClient, n: int, session: str = "s1") -> list[str]:
    asks = await asyncio.gather(*(client.decide(write(session, f"w{i}")) for i in range(n)))
    assert verdicts(asks) == {"VERDICT_ASK": n}
    return [a.approval_id for a in asks]


async def _resolve(admin: DecisionClient, approval_id: str) -> d_pb2.ResolveApprovalResponse:
    """ALLOW_ONCE, retried while the admin channel reconnects to a restarted service."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        try:
            return await admin.resolve_approval(
                d_pb2.ResolveApprovalRequest(
                    approval_id=approval_id,
                    resolution=d_pb2.RESOLUTION_ALLOW_ONCE,
                    resolver="tester",
                )
            )
        except ServiceError as err:
            if not isinstance(err, UnavailableError) or loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_approval_waits_reattach_across_a_sigkill(fault_stack: StartStack) -> None:
    async with _decision(
        fault_stack,
        STOCKADE_DECISION_APPROVAL_REATTACH_S="8",
        STOCKADE_DECISION_APPROVAL_SWEEP_S="0.2",
    ) as (stack, client, admin):
        approvals = await _asks(client, 12)
        orphan = (await _asks(client, 1, session="s2"))[0]
        waits = [asyncio.create_task(client.await_approval(a, timeout=300)) for a in approvals]
        await asyncio.sleep(0.2)  # let the waits reach the service before it dies
        await stack.kill("decision")
        assert not any(w.done() for w in waits), "a wait ended instead of re-attaching"
        await stack.spawn("decision")
        await stack.wait_serving("decision")
        # Answer each once the service is back; every waiter re-attached and gets ALLOW.
        for a in approvals:
            await _resolve(admin, a)
        answers = await asyncio.wait_for(asyncio.gather(*waits), 120)
        assert Counter(c_pb2.Verdict.Name(a.verdict) for a in answers) == {"VERDICT_ALLOW": 12}
        assert all(a.HasField("grant") for a in answers)
        # The approval nobody waits for any more is abandoned, and can no longer be answered.

        async def abandoned() -> bool:
            try:
                await _resolve(admin, orphan)
            except ServiceError as err:
                return isinstance(err, FailedPreconditionError) and "expired" in err.details
            raise AssertionError("an approval nobody waited for was answered")

        # Resolving it during the window would answer it; wait for the sweeper instead.
        await wait_for(lambda: _state(admin, orphan, "s2"), what="the orphan to be abandoned")
        assert await abandoned()


async def _state(admin: DecisionClient, approval_id: str, session: str) -> bool:
    """True once ``approval_id`` is no longer in the pending backlog."""
    stream = admin.stub.WatchApprovals(d_pb2.WatchApprovalsRequest(session_id=session))
    try:
        # A pending approval is sent at once; silence this long means none is pending
        # (generous: a short read timeout on a busy machine read "abandoned" too early).
        first = await asyncio.wait_for(stream.read(), 5)
    except TimeoutError:
        return True  # no pending approval in that session
    finally:
        stream.cancel()
    return first is grpc.aio.EOF or first.approval.approval_id != approval_id


async def test_sigterm_ends_approval_waits_at_once(fault_stack: StartStack, pg_dsn: str) -> None:
    # On PostgreSQL a wait leaves a trace the test can see: its first step touches the
    # approval's waiter heartbeat (``waiter_seen``) on the database's clock.
    async with _decision(
        fault_stack, STOCKADE_DECISION_GRACE_SECONDS="300", STOCKADE_DECISION_STORE_DSN=pg_dsn
    ) as (stack, client, admin):
        approvals = await _asks(client, 20)
        db = await asyncpg.connect(pg_dsn)
        try:
            before = await db.fetchval("SELECT extract(epoch from clock_timestamp())::float8")
            waits = [asyncio.create_task(client.await_approval(a, timeout=300)) for a in approvals]

            async def all_waiting() -> bool:
                touched = await db.fetchval(
                    "SELECT count(*) FROM decision_approvals "
                    "WHERE approval_id = ANY($1) AND waiter_seen > $2",
                    approvals,
                    before,
                )
                return bool(touched == len(approvals))

            # A condition, not a sleep: every wait is in the service before the signal.
            await wait_for(all_waiting, what="all 20 waits to reach the service")
        finally:
            await db.close()
        # With a 300 s grace the old service held its shutdown for the whole grace; now
        # the waits end with UNAVAILABLE and the process exits (stop fails past 60 s).
        await stack.stop("decision", timeout_s=60)
        assert not any(w.done() for w in waits), "a wait was denied instead of re-attaching"
        await stack.spawn("decision")
        await stack.wait_serving("decision")
        for a in approvals:
            await _resolve(admin, a)
        answers = await asyncio.wait_for(asyncio.gather(*waits), 120)
        assert Counter(c_pb2.Verdict.Name(a.verdict) for a in answers) == {"VERDICT_ALLOW": 20}


async def test_watchers_that_never_read_cannot_grow_memory(fault_stack: StartStack) -> None:
    async with _decision(
        fault_stack,
        STOCKADE_DECISION_APPROVAL_WATCH_QUEUE="20",
        STOCKADE_DECISION_MAX_APPROVAL_WATCHERS="10",
        STOCKADE_DECISION_MAX_PENDING_APPROVALS="600",
    ) as (stack, client, _):
        stub: d_grpc.DecisionServiceStub = client.stub
        await _asks(client, 1, session="warm")
        rss_before = stack.rss_kb("decision")
        silent = [stub.WatchApprovals(d_pb2.WatchApprovalsRequest()) for _ in range(10)]
        for w in silent:
            await w.read()  # connected and registered; then never read again
        extra = stub.WatchApprovals(d_pb2.WatchApprovalsRequest())
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await extra.read()
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_approval_watchers" in (info.value.details() or "")
        for batch in range(5):
            await _asks(client, 100, session=f"s{batch}")
        await _asks(client, 99, session="s5")
        # 600 pending: the limit. One more ASK is refused, naming it (a denial for the agent).
        over = await client.decide(write("over", "w-over"))
        assert over.verdict == c_pb2.VERDICT_DENY
        assert "max_pending_approvals" in over.reason and "RESOURCE_EXHAUSTED" in over.reason
        # Each silent watcher fell behind and was dropped with a status naming the limit.
        for w in silent:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                while True:
                    msg = await asyncio.wait_for(w.read(), 60)
                    assert msg is not grpc.aio.EOF
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "approval_watch_queue" in (info.value.details() or "")
        grown_mb = (stack.rss_kb("decision") - rss_before) / 1024
        assert grown_mb < 64, f"600 pending approvals and 10 silent watchers: +{grown_mb} MB"
        # A reconnect gets the whole current backlog.
        fresh = stub.WatchApprovals(d_pb2.WatchApprovalsRequest())
        got = 0
        while got < 600:
            msg = await asyncio.wait_for(fresh.read(), 60)
            assert msg is not grpc.aio.EOF
            got += 1
        fresh.cancel()
