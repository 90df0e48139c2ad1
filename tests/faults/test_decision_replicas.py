"""STORE-2 with real processes: two decision service replicas share one PostgreSQL (the
suite's own server, tests/pg.py). Racing resolvers on both replicas (exactly one wins);
SIGKILL of the replica holding a waiter (the approval survives, the agent's client
re-attaches to the other replica and gets the answer given there, and an approval
nobody waits for is abandoned by the survivor); a rule or mode change on one replica
seen by Decide on the other; denial counters exact under concurrent denials on both;
both replicas' change feeds cut by the server (the answer and the mode change made
meanwhile still reach the other replica); a replica whose feed stays cut reports
NOT_SERVING, serves nothing stale meanwhile, and SERVING again once it has caught up."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade.client.base import aio_channel
from stockade.client.decision import DecisionClient
from stockade.client.errors import FailedPreconditionError, ServiceError
from stockade.decision.store.postgres import LISTEN_APPLICATION_NAME
from stockade.server import LIVENESS, READINESS
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from tests.faults.conftest import FaultStack, StartStack, wait_for

DECISION_ENV = {
    "STOCKADE_DECISION_ALLOW": "read_file",
    "STOCKADE_DECISION_ASK": "file_write",
    "STOCKADE_DECISION_DENY": "run_bash(rm *)",
    "STOCKADE_DECISION_APPROVAL_TIMEOUT_S": "600",
    "STOCKADE_DECISION_DENIAL_MAX_CONSECUTIVE": "1000000",
    "STOCKADE_DECISION_DENIAL_MAX_TOTAL": "1000000",
    "STOCKADE_DECISION_APPROVAL_REATTACH_S": "10",
    "STOCKADE_DECISION_APPROVAL_SWEEP_S": "0.2",
}


def _call(session: str, call_id: str, tool: str, **args: str) -> d_pb2.DecideRequest:
    arguments = struct_pb2.Struct()
    arguments.update(args)
    return d_pb2.DecideRequest(
        call=c_pb2.ToolCall(
            session_id=session, call_id=call_id, tool_name=tool, arguments=arguments
        ),
        inspection=d_pb2.ToolInspection(read_only=tool == "read_file"),
    )


def read(session: str, call_id: str) -> d_pb2.DecideRequest:
    return _call(session, call_id, "read_file", file_path="/w/a.txt")


def write(session: str, call_id: str) -> d_pb2.DecideRequest:
    return _call(session, call_id, "file_write", file_path=f"/w/{call_id}.txt", content="x")


def remove(session: str, call_id: str) -> d_pb2.DecideRequest:
    return _call(session, call_id, "run_bash", command=f"rm /w/{call_id}")


class Replica:
    """One decision process (its own stack and state folder) and its clients."""

    def __init__(self, stack: FaultStack, client: DecisionClient, admin: DecisionClient) -> None:
        self.stack = stack
        self.client = client
        self.admin = admin

    @property
    def address(self) -> str:
        return self.stack.addresses["decision"]


@contextlib.asynccontextmanager
async def _replicas(
    fault_stack: StartStack, pg_dsn: str, tmp_path: Path
) -> AsyncIterator[tuple[Replica, Replica]]:
    stacks = [
        await fault_stack(
            ["decision"],
            env={"decision": DECISION_ENV},
            common_env={"STOCKADE_DECISION_STORE_DSN": pg_dsn},
            base=tmp_path / name,
        )
        for name in ("a", "b")
    ]
    async with contextlib.AsyncExitStack() as exits:
        replicas = []
        for stack in stacks:
            address = stack.addresses["decision"]
            ch = await exits.enter_async_context(aio_channel(address))
            admin_ch = await exits.enter_async_context(aio_channel(address))
            replicas.append(
                Replica(
                    stack,
                    DecisionClient(ch, decide_deadline_s=60),
                    DecisionClient(admin_ch, decide_deadline_s=60, admin_token=stack.admin_token),
                )
            )
        yield replicas[0], replicas[1]


async def _resolve(
    replica: Replica, approval_id: str, resolution: int = d_pb2.RESOLUTION_ALLOW_ONCE
) -> d_pb2.ResolveApprovalResponse:
    return await replica.admin.resolve_approval(
        d_pb2.ResolveApprovalRequest(approval_id=approval_id, resolution=resolution)  # type: ignore[arg-type]
    )


async def _pending_ids(replica: Replica, session: str) -> set[str]:
    """The approvals ``replica``'s WatchApprovals backlog holds for ``session`` now."""
    stream = replica.admin.stub.WatchApprovals(
        d_pb2.WatchApprovalsRequest(session_id=session),
        metadata=(("authorization", f"Bearer {replica.stack.admin_token}"),),
    )
    seen: set[str] = set()
    try:
        while True:
            # The backlog is sent at once; 3 s of silence after it means it is complete.
            message = await asyncio.wait_for(stream.read(), 3)
            if message is grpc.aio.EOF:
                break
            if message.approval.state == d_pb2.APPROVAL_STATE_PENDING:
                seen.add(message.approval.approval_id)
    except TimeoutError:
        pass
    finally:
        stream.cancel()
    return seen


async def test_racing_resolvers_on_two_replicas_exactly_one_wins(
    fault_stack: StartStack, pg_dsn: str, tmp_path: Path
) -> None:
    async with _replicas(fault_stack, pg_dsn, tmp_path) as (a, b):
        for round_ in range(3):
            asked = await b.client.decide(write("race", f"w{round_}"))
            assert asked.verdict == c_pb2.VERDICT_ASK, asked.reason
            approval = asked.approval_id
            # A watcher on a sees the approval raised on b.
            await wait_for(
                lambda ap=approval: _has(a, "race", ap), what="a's watcher to see b's approval"
            )
            resolutions = [d_pb2.RESOLUTION_ALLOW_ONCE, d_pb2.RESOLUTION_DENY] * 8
            outcomes = await asyncio.gather(
                *(_resolve((a, b)[i % 2], approval, r) for i, r in enumerate(resolutions)),
                return_exceptions=True,
            )
            won = [o for o in outcomes if isinstance(o, d_pb2.ResolveApprovalResponse)]
            lost = [o for o in outcomes if isinstance(o, ServiceError)]
            assert len(won) == 1, outcomes
            assert len(lost) == len(resolutions) - 1
            assert {type(e) for e in lost} == {FailedPreconditionError}
            assert {e.code for e in lost} == {"FAILED_PRECONDITION"}
            # Both replicas report the one winning answer.
            for replica in (a, b):
                answer = await replica.client.await_approval(approval, timeout=60)
                assert answer.approval.state == won[0].approval.state


async def _has(replica: Replica, session: str, approval_id: str) -> bool:
    return approval_id in await _pending_ids(replica, session)


async def test_sigkill_of_the_replica_holding_the_waiter(
    fault_stack: StartStack, pg_dsn: str, tmp_path: Path
) -> None:
    async with _replicas(fault_stack, pg_dsn, tmp_path) as (a, b):
        asks = [await a.client.decide(write("kill", f"w{i}")) for i in range(4)]
        assert {r.verdict for r in asks} == {c_pb2.VERDICT_ASK}
        approvals = [r.approval_id for r in asks]
        orphan = (await a.client.decide(write("orphan", "w"))).approval_id
        # The agent waits through replica a's address (as through a Service).
        waits = [asyncio.create_task(a.client.await_approval(ap, timeout=300)) for ap in approvals]
        await asyncio.sleep(0.3)  # let the waits reach replica a before it dies
        await a.stack.kill("decision")
        assert not any(w.done() for w in waits), "a wait ended instead of re-attaching"
        # The Service now routes to the surviving replica: a's address leads to b.
        a_sock = a.address.removeprefix("unix://")
        b_sock = b.address.removeprefix("unix://")
        os.unlink(a_sock)
        os.symlink(b_sock, a_sock)
        # The approval nobody waits for is abandoned by b once the re-attach window has
        # passed; the ones whose callers re-attached to b are not.
        await wait_for(
            lambda: _gone(b, "orphan", orphan), timeout_s=120, what="the orphan to be abandoned"
        )
        with contextlib.suppress(ServiceError):
            await _resolve(b, orphan)
            raise AssertionError("an approval nobody waited for was answered")
        assert await _pending_ids(b, "kill") == set(approvals)
        for ap in approvals:
            await _resolve(b, ap)
        answers = await asyncio.wait_for(asyncio.gather(*waits), 120)
        assert Counter(c_pb2.Verdict.Name(x.verdict) for x in answers) == {"VERDICT_ALLOW": 4}
        assert all(x.HasField("grant") for x in answers)


async def _gone(replica: Replica, session: str, approval_id: str) -> bool:
    return approval_id not in await _pending_ids(replica, session)


async def test_a_rule_or_mode_change_on_one_replica_reaches_decide_on_the_other(
    fault_stack: StartStack, pg_dsn: str, tmp_path: Path
) -> None:
    async with _replicas(fault_stack, pg_dsn, tmp_path) as (a, b):
        # b decides (and caches the session) first.
        assert (await b.client.decide(read("s", "r0"))).verdict == c_pb2.VERDICT_ALLOW
        rule = c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, pattern="read_file(/w/a.txt)")
        await a.admin.stub.AddRule(
            d_pb2.AddRuleRequest(session_id="s", rule=rule),
            metadata=(("authorization", f"Bearer {a.stack.admin_token}"),),
        )

        async def b_denies(request: d_pb2.DecideRequest, verdict: int) -> bool:
            return (await b.client.decide(request)).verdict == verdict

        await wait_for(
            lambda: b_denies(read("s", "r1"), c_pb2.VERDICT_DENY), what="b to apply a's rule"
        )
        assert (await b.client.decide(write("s", "w0"))).verdict == c_pb2.VERDICT_ASK
        await a.admin.stub.SetMode(
            d_pb2.SetModeRequest(session_id="s", mode=c_pb2.PERMISSION_MODE_DONT_ASK),
            metadata=(("authorization", f"Bearer {a.stack.admin_token}"),),
        )
        await wait_for(
            lambda: b_denies(write("s", "w1"), c_pb2.VERDICT_DENY), what="b to apply a's mode"
        )
        session = await b.admin.stub.GetSession(d_pb2.GetSessionRequest(session_id="s"))
        assert session.session.mode == c_pb2.PERMISSION_MODE_DONT_ASK


async def test_denial_counters_are_exact_under_concurrent_denials_on_both(
    fault_stack: StartStack, pg_dsn: str, tmp_path: Path
) -> None:
    async with _replicas(fault_stack, pg_dsn, tmp_path) as (a, b):
        denied = await asyncio.gather(
            *(r.client.decide(remove("c", f"x{i}")) for i in range(30) for r in (a, b))
        )
        assert Counter(c_pb2.Verdict.Name(x.verdict) for x in denied) == {"VERDICT_DENY": 60}
        # Every one of them was decided (not a fail-closed stand-in) and counted once.
        assert all("fail closed" not in x.reason for x in denied)
        # Exact on both replicas (each replica's cached copy follows the other's
        # notifications, so it may trail by one notification: poll).
        for replica in (a, b):
            await wait_for(lambda r=replica: _counters(r, "c", (60, 60)), what="60 denials counted")
        # An ALLOW on either replica resets the run of denials for both.
        assert (await a.client.decide(read("c", "r"))).verdict == c_pb2.VERDICT_ALLOW
        await wait_for(lambda: _counters(b, "c", (0, 60)), what="b to see the reset")


async def _counters(replica: Replica, session: str, want: tuple[int, int]) -> bool:
    got = await replica.admin.stub.GetSession(d_pb2.GetSessionRequest(session_id=session))
    return (got.session.consecutive_denials, got.session.total_denials) == want


async def _listen_backends(dsn: str, terminate: bool = False) -> int:
    """How many decision replicas listen on this database now (terminating them first
    when asked: the server cuts their change feeds)."""
    conn = await asyncpg.connect(dsn)
    try:
        what = "count(pg_terminate_backend(pid))" if terminate else "count(*)"
        return int(
            await conn.fetchval(
                f"SELECT {what} FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = $1",
                LISTEN_APPLICATION_NAME,
            )
        )
    finally:
        await conn.close()


async def test_cut_change_feeds_come_back_and_nothing_is_missed(
    fault_stack: StartStack, pg_dsn: str, tmp_path: Path
) -> None:
    async with _replicas(fault_stack, pg_dsn, tmp_path) as (a, b):
        assert await _listen_backends(pg_dsn) == 2
        # b caches the session; an approval raised on a has a waiter on b.
        assert (await b.client.decide(read("f", "r0"))).verdict == c_pb2.VERDICT_ALLOW
        asked = await a.client.decide(write("f", "w0"))
        assert asked.verdict == c_pb2.VERDICT_ASK
        wait = asyncio.create_task(b.client.await_approval(asked.approval_id, timeout=300))
        # The server cuts both replicas' change feeds; the answer and a mode change land
        # on a while the feeds reconnect, so their notifications may never reach b.
        assert await _listen_backends(pg_dsn, terminate=True) == 2
        await _resolve(a, asked.approval_id, d_pb2.RESOLUTION_DENY)
        await a.admin.stub.SetMode(
            d_pb2.SetModeRequest(session_id="f", mode=c_pb2.PERMISSION_MODE_DONT_ASK),
            metadata=(("authorization", f"Bearer {a.stack.admin_token}"),),
        )
        # b's waiter gets the answer, b decides with the new mode, never the cached one.
        answer = await asyncio.wait_for(wait, 120)
        assert answer.verdict == c_pb2.VERDICT_DENY
        assert answer.approval.state == d_pb2.APPROVAL_STATE_DENIED

        async def b_applies_the_mode() -> bool:
            got = await b.client.decide(write("f", "w1"))
            return got.verdict == c_pb2.VERDICT_DENY and "fail closed" not in got.reason

        await wait_for(b_applies_the_mode, what="b to apply a's mode")
        await wait_for(lambda: _two_listening(pg_dsn), what="both feeds to be back")


async def _two_listening(dsn: str) -> bool:
    return await _listen_backends(dsn) == 2


async def _health(replica: Replica, service: str = "stockade.v1.DecisionService") -> int:
    """The replica's standard gRPC health status of ``service`` (by default the decision
    service's readiness, which its readiness probe asks)."""
    async with aio_channel(replica.address) as channel:
        got = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
    return int(got.status)


@contextlib.asynccontextmanager
async def _connections_refused(server_dsn: str, db_dsn: str) -> AsyncIterator[None]:
    """No new connection to the test's database for the block (connections already open
    stay up): a replica whose change feed is cut cannot bring it back until then."""
    database = urlsplit(db_dsn).path.lstrip("/")
    admin = await asyncpg.connect(server_dsn)  # the maintenance database, not the test's
    try:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            yield
        finally:
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
    finally:
        await admin.close()


async def test_a_replica_without_its_change_feed_is_not_serving_and_serves_no_stale_state(
    fault_stack: StartStack, pg_server: str, pg_dsn: str, tmp_path: Path
) -> None:
    async with _replicas(fault_stack, pg_dsn, tmp_path) as (a, b):
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        assert (await _health(a), await _health(b)) == (serving, serving)
        # b caches the session; an approval raised on a has a waiter on b. Several
        # sessions at once open a few pooled connections on each replica, which stay
        # open while new ones are refused below.
        assert (await b.client.decide(read("h", "r0"))).verdict == c_pb2.VERDICT_ALLOW
        for replica in (a, b):
            await asyncio.gather(*(replica.client.decide(read(f"warm{i}", "r")) for i in range(8)))
        asked = await a.client.decide(write("h", "w0"))
        assert asked.verdict == c_pb2.VERDICT_ASK
        wait = asyncio.create_task(b.client.await_approval(asked.approval_id, timeout=300))
        async with _connections_refused(pg_server, pg_dsn):
            # The server cuts both change feeds, and they cannot come back yet.
            assert await _listen_backends_via(pg_server, pg_dsn) == 2
            await wait_for(lambda: _status_is(b, not_serving), what="b to report NOT_SERVING")
            await wait_for(lambda: _status_is(a, not_serving), what="a to report NOT_SERVING")
            # Not ready, and alive: the liveness probe does not restart a replica for its
            # database (the overall and "readiness" statuses follow the service's).
            for replica in (a, b):
                assert await _health(replica, LIVENESS) == serving
                assert await _health(replica, READINESS) == not_serving
                assert await _health(replica, "") == not_serving
            # What still reaches b is served from the database, never from its cache: a
            # mode change made on a applies to b's very next Decide...
            await a.admin.stub.SetMode(
                d_pb2.SetModeRequest(session_id="h", mode=c_pb2.PERMISSION_MODE_PLAN),
                metadata=(("authorization", f"Bearer {a.stack.admin_token}"),),
            )
            got = await b.client.decide(write("h", "w1"))
            assert got.verdict == c_pb2.VERDICT_DENY and "fail closed" not in got.reason, got
            # ...and an answer given on a reaches b's waiter without any notification.
            await _resolve(a, asked.approval_id, d_pb2.RESOLUTION_DENY)
            answer = await asyncio.wait_for(wait, 120)
            assert answer.approval.state == d_pb2.APPROVAL_STATE_DENIED
            assert await _status_is(b, not_serving)  # still cut off: still not ready
        # Connections are allowed again: both feeds come back, resynchronise, and serve.
        await wait_for(lambda: _status_is(b, serving), what="b to report SERVING again")
        await wait_for(lambda: _status_is(a, serving), what="a to report SERVING again")
        assert await _health(a, READINESS) == serving and await _health(a, LIVENESS) == serving
        assert await _listen_backends(pg_dsn) == 2
        got = await b.client.decide(write("h", "w2"))
        assert got.verdict == c_pb2.VERDICT_DENY and "fail closed" not in got.reason, got


async def _status_is(replica: Replica, status: int) -> bool:
    return await _health(replica) == status


async def _listen_backends_via(server_dsn: str, db_dsn: str) -> int:
    """Terminate the listening connections of the test's database from the maintenance
    database (the test's own refuses new connections now); how many there were."""
    conn = await asyncpg.connect(server_dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = $1 AND application_name = $2",
                urlsplit(db_dsn).path.lstrip("/"),
                LISTEN_APPLICATION_NAME,
            )
        )
    finally:
        await conn.close()
