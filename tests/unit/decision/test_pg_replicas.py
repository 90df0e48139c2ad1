"""STORE-2 on a real PostgreSQL, two replicas in one process (each its own store: its own
pool, LISTEN connection, cache and approval broker), as two decision processes would be:
approvals fan out, answers wake waiters elsewhere, first answer wins, counters are
atomic, caches are invalidated by notifications, a lost LISTEN connection fails closed and
resynchronises, and the ALLOW path of Decide reads no database on a cached session."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from stockade.decision.approvals import ApprovalBroker, ApprovalLimits, Resolution
from stockade.decision.core import CallInput, DecisionCore
from stockade.decision.engine import Facts
from stockade.decision.grants import GrantSigner
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyStore
from stockade.decision.rules import Effect, Rule, Source
from stockade.decision.store import ApprovalRecord, ApprovalState, PendingCall
from stockade.decision.store.postgres import (
    LISTEN_APPLICATION_NAME,
    MIGRATIONS,
    PostgresDecisionStore,
)
from stockade.errors import (
    ApprovalAlreadyResolved,
    DependencyUnavailable,
    InvalidArgument,
    ResourceExhausted,
)
from tests.unit.decision.conftest import age_approvals


async def wait_for(
    condition: Callable[[], Awaitable[bool] | bool], what: str, timeout_s: float = 60.0
) -> None:
    """Poll ``condition`` until true (a generous deadline: the machine is shared)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = condition()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.fixture
async def replicas(pg_dsn: str) -> AsyncIterator[tuple[PostgresDecisionStore, ...]]:
    """Two replicas on one fresh database."""
    a, b = await asyncio.gather(
        PostgresDecisionStore.open(pg_dsn, pool_size=4),
        PostgresDecisionStore.open(pg_dsn, pool_size=4),
    )
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def ask(broker: ApprovalBroker, session: str = "s1", n: int = 0) -> str:
    rec = await broker.create(
        session,
        PendingCall(f"c{n}", "run_bash", {"command": f"make {n}"}),
        reason="needs approval",
        risk="medium",
        summary="Runs make",
        timeout_s=600,
    )
    return rec.approval_id


async def test_a_watcher_on_a_sees_approvals_raised_on_b_and_b_waiter_wakes_on_a_answer(
    replicas: tuple[PostgresDecisionStore, ...],
) -> None:
    a, b = replicas
    broker_a, broker_b = ApprovalBroker(a), ApprovalBroker(b)
    await broker_a.load()
    await broker_b.load()
    await a.create_session("s1", Mode.DEFAULT)
    watch = broker_a.watch("")
    approval = await ask(broker_b)
    seen = await asyncio.wait_for(anext(watch), 60)
    assert seen.approval_id == approval and seen.state is ApprovalState.PENDING
    waiter = asyncio.create_task(broker_b.wait(approval))
    await wait_for(lambda: broker_b.waiting(approval) == 1, "b's waiter")
    resolved = await broker_a.resolve(approval, Resolution.ALLOW_ONCE, resolver="alice")
    assert resolved.approval.state is ApprovalState.ALLOWED
    final = await asyncio.wait_for(waiter, 60)
    assert final.state is ApprovalState.ALLOWED and final.resolver == "alice"
    # The watcher on a got the answer once (its own broker published it); b's broker
    # learnt of it by notification and holds nothing pending any more.
    update = await asyncio.wait_for(anext(watch), 60)
    assert update.approval_id == approval and update.state is ApprovalState.ALLOWED
    await wait_for(lambda: broker_b.pending_count == 0, "b to drop the answered approval")
    await watch.aclose()


async def test_racing_resolvers_on_both_replicas_exactly_one_wins(
    replicas: tuple[PostgresDecisionStore, ...],
) -> None:
    a, b = replicas
    brokers = [ApprovalBroker(a), ApprovalBroker(b)]
    for broker in brokers:
        await broker.load()  # as the service does at start
    await a.create_session("s1", Mode.DEFAULT)
    for round_ in range(5):
        approval = await ask(brokers[0], n=round_)
        await wait_for(lambda a=approval: a in brokers[1]._pending, "b to learn of the approval")

        async def answer(i: int, approval: str = approval) -> str | None:
            resolution = (Resolution.ALLOW_ONCE, Resolution.DENY, Resolution.ALWAYS_ALLOW)[i % 3]
            try:
                done = await brokers[i % 2].resolve(approval, resolution, resolver=f"r{i}")
            except ApprovalAlreadyResolved:
                return None
            return done.approval.resolver

        results = await asyncio.gather(*(answer(i) for i in range(12)))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, results
        stored = await b.get_approval(approval)
        assert stored.resolver == winners[0]
    # An ALWAYS_ALLOW winner made exactly one grant per answered approval at most.
    assert len(await a.list_grants("s1")) <= 5


async def test_a_mode_or_rule_change_on_a_reaches_b_cached_session(
    replicas: tuple[PostgresDecisionStore, ...],
) -> None:
    a, b = replicas
    await a.create_session("s1", Mode.DEFAULT)
    assert (await b.get_session("s1")).mode is Mode.DEFAULT
    assert [r.pattern for r in (await b.session_rules("s1")).rules] == []
    assert b.cached_sessions == 1  # cached now: later reads cost nothing
    await a.set_mode("s1", Mode.PLAN)
    await wait_for(lambda: b.cached_sessions == 0, "the notification to reach b")
    assert (await b.get_session("s1")).mode is Mode.PLAN
    await b.session_rules("s1")
    await a.add_rule("s1", Effect.DENY, "run_bash(rm *)")
    await wait_for(lambda: _patterns(b, "s1"), "b to see the new rule", timeout_s=60)
    grant = await a.add_grant("s1", "run_bash(make)", remaining_uses=1)
    await wait_for(lambda: _has_rule(b, "s1", grant.grant_id), "b to see the grant")
    assert await a.revoke_grant(grant.grant_id)
    await wait_for(lambda: _lacks_rule(b, "s1", grant.grant_id), "b to see the revocation")


async def _patterns(store: PostgresDecisionStore, sid: str) -> bool:
    return [r.pattern for r in (await store.session_rules(sid)).rules] == ["run_bash(rm *)"]


async def _has_rule(store: PostgresDecisionStore, sid: str, rule_id: str) -> bool:
    return rule_id in {r.rule_id for r in (await store.session_rules(sid)).rules}


async def _lacks_rule(store: PostgresDecisionStore, sid: str, rule_id: str) -> bool:
    return not await _has_rule(store, sid, rule_id)


async def test_denial_counters_are_atomic_across_replicas(
    replicas: tuple[PostgresDecisionStore, ...],
) -> None:
    a, b = replicas
    await a.create_session("s1", Mode.DEFAULT)
    await asyncio.gather(*(s.record_outcome("s1", denied=True) for s in (a, b) * 40))
    # Exact on both replicas once the last notifications arrived (no update was lost).
    for store in (a, b):
        await wait_for(lambda s=store: _counters(s, "s1", (80, 80)), "80 denials counted")
    await b.record_outcome("s1", denied=False)
    await wait_for(lambda: _counters(a, "s1", (0, 80)), "a to see the reset run of denials")


async def _counters(store: PostgresDecisionStore, sid: str, want: tuple[int, int]) -> bool:
    rec = await store.get_session(sid)
    return (rec.consecutive_denials, rec.total_denials) == want


async def test_a_counted_grant_is_spent_once_across_replicas(
    replicas: tuple[PostgresDecisionStore, ...],
) -> None:
    a, b = replicas
    await a.create_session("s1", Mode.DEFAULT)
    for _ in range(5):
        grant = await a.add_grant("s1", "run_bash(make)", remaining_uses=1)
        # Both replicas hold the grant in their compiled rules, then both spend it.
        for store in (a, b):
            await wait_for(lambda s=store, g=grant.grant_id: _has_rule(s, "s1", g), "the grant")
        spent = await asyncio.gather(*(s.use_grants("s1", (grant.rule,)) for s in (a, b)))
        assert sorted(spent) == [False, True]
        assert grant.grant_id not in {g.grant_id for g in await b.list_grants("s1")}
    three = await a.add_grant("s1", "run_bash(make all)", remaining_uses=3)
    for store in (a, b):
        await wait_for(lambda s=store: _has_rule(s, "s1", three.grant_id), "the grant")
    spent = await asyncio.gather(*(s.use_grants("s1", (three.rule,)) for s in (a, b, a, b)))
    assert spent.count(True) == 3


async def test_an_allow_on_a_grant_spent_meanwhile_is_decided_again(
    replicas: tuple[PostgresDecisionStore, ...], pg_dsn: str, tmp_path: Any
) -> None:
    a, b = replicas
    policy = tmp_path / "p.toml"
    policy.write_text("[permissions]\n")
    core_b = DecisionCore(PolicyStore(policy, {}), b, GrantSigner(Ed25519PrivateKey.generate()))
    await a.create_session("s1", Mode.DEFAULT)
    call = CallInput("s1", "c1", "run_bash", {"command": "make"})
    # The executor's own ask for the command (P6): a session grant settles it.
    facts = Facts(tool_rules=(Rule(Effect.ASK, "run_bash", Source.TOOL),))
    assert (await core_b.decide(call, facts)).decision.verdict is Effect.ASK
    grant = await a.add_grant("s1", "run_bash(make)", remaining_uses=5)
    await wait_for(lambda: _has_rule(b, "s1", grant.grant_id), "b to cache the grant")
    assert (await core_b.decide(call, facts)).decision.verdict is Effect.ALLOW
    assert [g.remaining_uses for g in await a.list_grants("s1")] == [4]
    await b.session_rules("s1")  # b holds the grant in its compiled rules again
    # The grant's uses are spent elsewhere and the news has not reached b (a direct write,
    # no notification: the window between another replica's commit and its NOTIFY).
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("DELETE FROM decision_grants WHERE grant_id = $1", grant.grant_id)
    finally:
        await conn.close()
    assert _has_rule_cached(b, "s1", grant.grant_id)
    # b's cached rules still ALLOW, but spending the use fails: b decides again, on the
    # rules as stored, and asks.
    assert (await core_b.decide(call, facts)).decision.verdict is Effect.ASK


def _has_rule_cached(store: PostgresDecisionStore, sid: str, rule_id: str) -> bool:
    entry = store._cache.get(sid)
    return (
        entry is not None
        and entry.index is not None
        and any(r.rule_id == rule_id for r in entry.index.rules)
    )


async def test_a_lost_listen_connection_fails_closed_and_resynchronises(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # the suite disables the SDK
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    a = await PostgresDecisionStore.open(pg_dsn, pool_size=4)
    b = await PostgresDecisionStore.open(pg_dsn, pool_size=4, meter=provider.get_meter("t"))
    try:
        await _lost_listen(a, b, monkeypatch)
    finally:
        await a.close()
        await b.close()
    data = reader.get_metrics_data()
    assert data is not None
    feed = {
        point.attributes["event"]: point.value  # type: ignore[index, union-attr]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "stockade.decision.store.feed"
        for point in metric.data.data_points
    }
    assert feed == {"lost": 1, "resynced": 1}
    provider.shutdown()


async def _lost_listen(
    a: PostgresDecisionStore, b: PostgresDecisionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker_a, broker_b = ApprovalBroker(a), ApprovalBroker(b)
    health: list[bool] = []
    b.on_health(health.append)
    await broker_a.load()
    await broker_b.load()
    await a.create_session("s1", Mode.DEFAULT)
    await b.get_session("s1")
    assert b.cached_sessions == 1
    approval = await ask(broker_a)
    await wait_for(lambda: approval in broker_b._pending, "b to learn of the approval")
    waiter = asyncio.create_task(broker_b.wait(approval))
    await wait_for(lambda: broker_b.waiting(approval) == 1, "b's waiter")
    # Cut b's LISTEN connection and keep it from coming back for a while.
    good_dsn = b._dsn
    monkeypatch.setattr(b, "_dsn", "postgresql://x@/nowhere?host=/nonexistent-socket-dir")
    await b.drop_listen_connection()
    await wait_for(lambda: not b.listening, "b to notice the lost feed")
    assert b.cached_sessions == 0 and b.gaps == 1
    assert not b.fresh and health == [True, False]  # the replica says it is not ready
    # Changes made now never reach b as notifications; b must not serve its old state.
    await a.set_mode("s1", Mode.PLAN)
    await broker_a.resolve(approval, Resolution.DENY, resolver="alice", reason="no")
    assert (await b.get_session("s1")).mode is Mode.PLAN  # read through, not cached
    assert b.cached_sessions == 0  # and not cached while the feed is down
    # b's waiter gets the answer while the feed is still down (it polls meanwhile).
    final = await asyncio.wait_for(waiter, 60)
    assert final.state is ApprovalState.DENIED and final.resolver == "alice"
    assert not b.listening and not b.fresh
    raised_in_gap = await ask(broker_a, n=1)
    # The feed comes back: b resynchronises (pending re-read, waiters re-read).
    monkeypatch.setattr(b, "_dsn", good_dsn)
    await wait_for(lambda: b.resyncs >= 1, "b to resynchronise")
    assert b.fresh and health == [True, False, True]
    await wait_for(lambda: raised_in_gap in broker_b._pending, "b to pick up the gap's ask")
    assert approval not in broker_b._pending
    assert b.listening
    await b.get_session("s1")
    assert b.cached_sessions == 1  # caching again


async def test_the_allow_path_reads_no_database_on_a_cached_session(
    replicas: tuple[PostgresDecisionStore, ...], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = replicas
    policy = tmp_path / "p.toml"
    policy.write_text('[permissions]\nallow = ["read_file"]\n')
    core = DecisionCore(PolicyStore(policy, {}), a, GrantSigner(Ed25519PrivateKey.generate()))
    call = CallInput("s1", "c1", "read_file", {"file_path": "/w/a.txt"})
    facts = Facts(read_only=True)
    assert (await core.decide(call, facts)).decision.verdict is Effect.ALLOW  # warms the cache
    trips: list[str] = []
    real_run = a._run

    async def counting_run(work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
        trips.append(getattr(work, "__qualname__", "?"))
        return await real_run(work)

    monkeypatch.setattr(a, "_run", counting_run)
    for i in range(20):
        outcome = await core.decide(CallInput("s1", f"c{i}", "read_file", call.arguments), facts)
        assert outcome.decision.verdict is Effect.ALLOW and outcome.grant is not None
    assert trips == []
    # After a denial the next ALLOW resets the run of denials: one atomic write, whose
    # result this replica caches; the ALLOW after it reads nothing again.
    await a.record_outcome("s1", denied=True)
    trips.clear()
    await core.decide(call, facts)
    assert len(trips) == 1
    trips.clear()
    await core.decide(call, facts)
    assert trips == []


async def test_replicas_starting_together_migrate_once(pg_dsn: str) -> None:
    stores = await asyncio.gather(*(PostgresDecisionStore.open(pg_dsn) for _ in range(4)))
    try:
        conn = await asyncpg.connect(pg_dsn)
        try:
            versions = await conn.fetch("SELECT version FROM decision_schema_version")
        finally:
            await conn.close()
        assert sorted(r[0] for r in versions) == [v for v, _ in MIGRATIONS]
    finally:
        for s in stores:
            await s.close()


async def test_overlong_ids_are_refused_not_sent_to_notify(
    replicas: tuple[PostgresDecisionStore, ...],
) -> None:
    a, _ = replicas
    with pytest.raises(InvalidArgument, match="session_id is 1,001 characters"):
        await a.create_session("s" * 1001, Mode.DEFAULT)
    assert await a.find_session("s" * 5000) is None


async def test_an_unreachable_database_is_unavailable() -> None:
    with pytest.raises(DependencyUnavailable, match="cannot reach the decision database"):
        await PostgresDecisionStore.open("postgresql://x@/db?host=/nonexistent-socket-dir")


async def test_replicas_sweeping_at_once_abandon_each_orphan_once_and_keep_the_touched(
    replicas: tuple[PostgresDecisionStore, ...],
) -> None:
    a, b = replicas
    limits = ApprovalLimits(reattach_s=10)
    broker_a = ApprovalBroker(a, limits=limits)
    broker_b = ApprovalBroker(b, limits=limits)
    await broker_a.load()
    await broker_b.load()
    await a.create_session("s1", Mode.DEFAULT)
    made = [await ask(broker_a, n=i) for i in range(20)]
    # Callers of five of them re-attached (on some replica) just before the sweep, the
    # others have been gone for 100 s (heartbeats are on the database's clock).
    await age_approvals(a, 100)
    await b.touch_waiters(made[:5])
    swept = await asyncio.gather(broker_a.sweep(), broker_b.sweep())
    assert sum(abandoned for _, abandoned, _ in swept) == 15
    states = [(await a.get_approval(x)).state for x in made]
    assert states == [ApprovalState.PENDING] * 5 + [ApprovalState.EXPIRED] * 15
    # Each abandonment counted one denial, once (b's last ones reach a's cache by
    # notification).
    await wait_for(lambda: _counters(a, "s1", (15, 15)), "a to count 15 denials")
    await wait_for(lambda: _counters(b, "s1", (15, 15)), "b to count 15 denials")


async def test_a_hung_database_fails_the_call_instead_of_holding_it(pg_dsn: str) -> None:
    store = await PostgresDecisionStore.open(pg_dsn, pool_size=2, command_timeout_s=1.0)
    blocker = await asyncpg.connect(pg_dsn)
    try:
        await store.create_session("s1", Mode.DEFAULT)
        # Another transaction holds the session's row: every write to it waits.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("SELECT 1 FROM decision_sessions WHERE session_id = 's1' FOR UPDATE")
        with pytest.raises(DependencyUnavailable, match="unreachable"):
            await store.set_mode("s1", Mode.PLAN)
        with pytest.raises(DependencyUnavailable):
            await store.record_outcome("s1", denied=True)
        await tx.rollback()
        # Nothing half-done: the mode and counters are as before, and writes work again.
        assert (await store.get_session("s1")).mode is Mode.DEFAULT
        assert (await store.record_outcome("s1", denied=True)).total_denials == 1
    finally:
        await blocker.close()
        await store.close()


class _FreezingProxy:
    """A TCP proxy in front of the server's unix socket that can go silent on the
    listening connection alone: it then forwards nothing and closes nothing, as a server
    whose host vanished or a network path that dropped (a half-open connection)."""

    def __init__(self, unix_path: str) -> None:
        self.unix_path = unix_path
        self.frozen: set[asyncio.StreamWriter] = set()
        self.listeners: list[asyncio.StreamWriter] = []
        self.listen_links = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _link(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_unix_connection(self.unix_path)
        self._writers += [client_w, server_w]
        first = await client_r.read(65536)  # the startup message names the application
        if LISTEN_APPLICATION_NAME.encode() in first:
            self.listen_links += 1
            self.listeners += [client_w, server_w]
        server_w.write(first)
        for src, dst in ((client_r, server_w), (server_r, client_w)):
            task = asyncio.create_task(self._pump(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def freeze_listeners(self) -> None:
        """Go silent on the listening connections open now (later ones pass)."""
        self.frozen.update(self.listeners)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                if dst in self.frozen:
                    continue  # swallowed: no answer, no error, no close
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        if dst not in self.frozen:
            dst.close()  # one side closed: pass it on (a frozen link passes on nothing)

    async def close(self) -> None:
        self.server.close()
        for task in list(self._tasks):
            task.cancel()
        for writer in self._writers:
            writer.close()


async def test_a_half_open_listen_connection_is_noticed_and_replaced(pg_dsn: str) -> None:
    parts = urlsplit(pg_dsn)
    socket_dir = parse_qs(parts.query)["host"][0]
    proxy = _FreezingProxy(f"{socket_dir}/.s.PGSQL.{parts.port or 5432}")
    port = await proxy.start()
    tcp_dsn = urlunsplit(
        parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}", query="sslmode=disable")
    )
    store = await PostgresDecisionStore.open(tcp_dsn, pool_size=2)
    try:
        # Over TCP the listening connection gets keepalives and a user timeout, so the
        # kernel too gives up on a silent server.
        conn = store._listen_conn
        assert conn is not None
        sock = conn._transport.get_extra_info("socket")  # type: ignore[attr-defined]
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 2
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 3000
        await store.create_session("s1", Mode.DEFAULT)
        await store.get_session("s1")
        assert store.fresh and store.cached_sessions == 1 and proxy.listen_links == 1
        # The path to the server goes silent for the listening connection only: no error,
        # no close. The probe's round trip finds it; the cache is dropped at once.
        proxy.freeze_listeners()
        # Count the gap rather than look for ``fresh`` to be false: the reconnect and the
        # resync can take a few milliseconds, less than one poll of ``wait_for``.
        await wait_for(lambda: store.gaps >= 1, "the store to notice the silent feed")
        assert store.gaps == 1 and store.cached_sessions == 0
        # A new listening connection (the proxy lets new ones through) and a resync.
        await wait_for(lambda: store.fresh and store.resyncs >= 1, "the feed to come back")
        assert proxy.listen_links >= 2
        await store.get_session("s1")
        assert store.cached_sessions == 1
    finally:
        await store.close()
        await proxy.close()


class _SkewedClock:
    """The wall clock of a replica whose time is off by ``skew_s``."""

    def __init__(self, skew_s: float) -> None:
        self.skew_s = skew_s

    def __call__(self) -> float:
        return time.time() + self.skew_s


SKEW_S = 3_600.0
"""How far the skewed replicas' clocks are off: far more than any timeout in the tests."""


@pytest.fixture
async def skewed(pg_dsn: str) -> AsyncIterator[tuple[PostgresDecisionStore, ...]]:
    """Two replicas on one fresh database, ``fast`` an hour ahead and ``slow`` an hour
    behind (each store, and so its broker, runs on its replica's clock)."""
    fast, slow = await asyncio.gather(
        PostgresDecisionStore.open(pg_dsn, pool_size=4, clock=_SkewedClock(+SKEW_S)),
        PostgresDecisionStore.open(pg_dsn, pool_size=4, clock=_SkewedClock(-SKEW_S)),
    )
    try:
        yield fast, slow
    finally:
        await fast.close()
        await slow.close()


async def test_waiter_heartbeats_use_the_database_clock_whatever_the_replicas_clocks(
    skewed: tuple[PostgresDecisionStore, ...],
) -> None:
    a, b = skewed
    limits = ApprovalLimits(reattach_s=10)
    # a runs an hour fast, b an hour slow: hundreds of re-attach windows apart.
    broker_a = ApprovalBroker(a, limits=limits)
    broker_b = ApprovalBroker(b, limits=limits)
    await broker_a.load()
    await broker_b.load()
    await b.create_session("s1", Mode.DEFAULT)
    watched = await ask(broker_b, n=0)
    left = await ask(broker_b, n=1)
    waiter = asyncio.create_task(broker_b.wait(watched))
    await wait_for(lambda: broker_b.waiting(watched) == 1, "b's waiter")
    # a sweeps with its fast clock: b's waiter touched its approval a moment ago on the
    # database's clock, and so, as far as anyone can know, did the caller of ``left``.
    assert await broker_a.sweep() == (0, 0, 0)
    assert (await a.get_approval(watched)).state is ApprovalState.PENDING
    assert (await a.get_approval(left)).state is ApprovalState.PENDING
    # Eleven seconds later on the database's clock: b, slow as its clock is, touches its
    # live waiter's approval and abandons the one nobody waits for, on time; a, fast as
    # its clock is, then finds nothing more to abandon.
    await age_approvals(a, 11)
    assert await broker_b.sweep() == (0, 1, 0)
    assert await broker_a.sweep() == (0, 0, 0)
    assert (await a.get_approval(left)).state is ApprovalState.EXPIRED
    assert (await a.get_approval(watched)).state is ApprovalState.PENDING
    await broker_a.resolve(watched, Resolution.ALLOW_ONCE, resolver="alice")
    assert (await asyncio.wait_for(waiter, 60)).state is ApprovalState.ALLOWED


async def _db_now(store: PostgresDecisionStore) -> float:
    conn = await asyncpg.connect(store._dsn)
    try:
        return float(await conn.fetchval("SELECT extract(epoch from now())::float8"))
    finally:
        await conn.close()


async def test_approval_deadlines_are_on_the_database_clock_whatever_the_replicas_clocks(
    skewed: tuple[PostgresDecisionStore, ...],
) -> None:
    fast, slow = skewed
    broker_fast, broker_slow = ApprovalBroker(fast), ApprovalBroker(slow)
    await broker_fast.load()
    await broker_slow.load()
    await slow.create_session("s1", Mode.DEFAULT)
    # Raised by the slow replica with ten minutes to go: the fast one, an hour ahead,
    # must not find it overdue (its sweep, its waiters and its answers alike).
    raised = await broker_slow.create(
        "s1",
        PendingCall("c0", "run_bash", {"command": "make"}),
        reason="needs approval",
        risk="medium",
        summary="Runs make",
        timeout_s=600,
    )
    db_now = await _db_now(fast)
    assert abs(raised.create_time - db_now) < 60  # stamped by the database, not the replica
    assert abs(raised.expire_time - (db_now + 600)) < 60
    assert await broker_fast.sweep() == (0, 0, 0)
    # A waiter on the fast replica: record what its first read says is left.
    reads: list[float] = []
    read = asyncio.Event()
    real_time_left = fast.approval_time_left

    async def spy(approval_id: str) -> tuple[ApprovalRecord, float]:
        rec, left = await real_time_left(approval_id)
        reads.append(left)
        read.set()
        return rec, left

    fast.approval_time_left = spy  # type: ignore[method-assign]
    waiter = asyncio.create_task(broker_fast.wait(raised.approval_id))
    await asyncio.wait_for(read.wait(), 60)
    assert 500 < reads[0] <= 600  # the database's ten minutes, not the fast clock's -50
    assert (await fast.get_approval(raised.approval_id)).state is ApprovalState.PENDING
    # The fast replica's answer is in time (its own clock says the deadline is long past).
    await broker_fast.resolve(raised.approval_id, Resolution.ALLOW_ONCE, resolver="alice")
    assert (await asyncio.wait_for(waiter, 60)).state is ApprovalState.ALLOWED
    # The finish time is the database's too, and the fast replica's retention sweep (an
    # hour ahead, half an hour of retention) keeps the answer.
    conn = await asyncpg.connect(fast._dsn)
    try:
        finish = await conn.fetchval(
            "SELECT finish_time FROM decision_approvals WHERE approval_id = $1",
            raised.approval_id,
        )
    finally:
        await conn.close()
    assert abs(float(finish) - await _db_now(fast)) < 60
    keeping = ApprovalBroker(fast, limits=ApprovalLimits(retention_s=SKEW_S / 2))
    assert await keeping.sweep() == (0, 0, 0)
    assert await fast.count_approvals() == 1


async def test_an_approval_expires_on_time_for_a_replica_whose_clock_is_slow(
    skewed: tuple[PostgresDecisionStore, ...],
) -> None:
    fast, slow = skewed
    broker_fast, broker_slow = ApprovalBroker(fast), ApprovalBroker(slow)
    await fast.create_session("s1", Mode.DEFAULT)
    raised = await broker_fast.create(
        "s1",
        PendingCall("c0", "run_bash", {"command": "make"}),
        reason="needs approval",
        risk="medium",
        summary="Runs make",
        timeout_s=1,
    )
    # The slow replica's waiter is due back in one second of the database's clock, not in
    # two hours and one second of its own.
    final = await asyncio.wait_for(broker_slow.wait(raised.approval_id), 60)
    assert final.state is ApprovalState.EXPIRED and final.resolve_reason == "approval timed out"
    with pytest.raises(ApprovalAlreadyResolved, match="expired"):
        await broker_fast.resolve(raised.approval_id, Resolution.ALLOW_ONCE, resolver="late")
    assert (await slow.get_session("s1")).total_denials == 1  # counted once


async def test_a_scoped_grant_ends_at_its_time_on_every_replica_whatever_their_clocks(
    skewed: tuple[PostgresDecisionStore, ...],
) -> None:
    fast, slow = skewed
    await fast.create_session("s1", Mode.DEFAULT)
    db_now = await _db_now(fast)
    # Both replicas estimate the database's clock, not their own an hour off.
    for store in (fast, slow):
        assert abs(store.now() - db_now) < 60
    live = await fast.add_grant("s1", "run_bash(make)", expire_time=db_now + 600)
    ended = await slow.add_grant("s1", "run_bash(ls)", expire_time=db_now - 60)
    # The fast replica, an hour ahead, keeps the grant with ten minutes left; the slow
    # one, an hour behind, does not keep the one that ended a minute ago.
    for store in (fast, slow):
        assert [g.grant_id for g in await store.list_grants("s1")] == [live.grant_id]
        [allow] = (await store.session_rules("s1")).for_tool("run_bash")[2]
        assert allow.allows_command("make") and not allow.allows_command("ls")
    assert ended.grant_id not in [g.grant_id for g in await fast.list_grants("s1")]


async def _ask_or_refused(broker: ApprovalBroker, session: str, n: int) -> str:
    try:
        return await ask(broker, session, n)
    except ResourceExhausted as err:
        return f"refused:{err.metadata['limit']}"


async def test_pending_caps_are_exact_under_concurrent_asks_on_two_replicas(
    replicas: tuple[PostgresDecisionStore, ...],
) -> None:
    a, b = replicas
    limits = ApprovalLimits(max_pending=12, max_pending_per_session=5)
    brokers = [ApprovalBroker(a, limits=limits), ApprovalBroker(b, limits=limits)]
    for broker in brokers:
        await broker.load()
    for sid in ("s1", "s2", "s3", "s4"):
        await a.create_session(sid, Mode.DEFAULT)
    # 40 asks for one session at once, half on each replica: exactly 5 are stored.
    got = await asyncio.gather(*(_ask_or_refused(brokers[i % 2], "s1", i) for i in range(40)))
    made = [g for g in got if not g.startswith("refused:")]
    assert len(made) == 5
    assert set(got) - set(made) == {"refused:max_pending_approvals_per_session"}
    assert len(await a.pending_approvals("s1")) == 5
    # Then 60 asks over three more sessions at once: the whole store stops at exactly 12.
    got = await asyncio.gather(
        *(_ask_or_refused(brokers[i % 2], f"s{2 + i % 3}", 100 + i) for i in range(60))
    )
    assert len(await a.pending_approvals()) == 12
    assert sum(not g.startswith("refused:") for g in got) == 7
    per_session = [len(await a.pending_approvals(s)) for s in ("s2", "s3", "s4")]
    assert sum(per_session) == 7 and max(per_session) <= 5
    # An answer on one replica makes room for exactly one more ask on the other.
    await brokers[0].resolve(made[0], Resolution.DENY, resolver="alice")
    again = await asyncio.gather(*(_ask_or_refused(brokers[1], "s1", 200 + i) for i in range(4)))
    assert sum(not g.startswith("refused:") for g in again) == 1
    assert len(await b.pending_approvals()) == 12


async def test_an_approval_raised_and_answered_inside_a_feed_gap_reaches_the_watchers(
    replicas: tuple[PostgresDecisionStore, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = replicas
    broker_a, broker_b = ApprovalBroker(a), ApprovalBroker(b)
    await broker_a.load()
    await broker_b.load()
    await a.create_session("s1", Mode.DEFAULT)
    seen: list[tuple[str, ApprovalState]] = []
    watch = broker_b.watch()

    async def collect() -> None:
        async for rec in watch:
            seen.append((rec.approval_id, rec.state))

    collector = asyncio.create_task(collect())
    try:
        # Before the gap: raised and answered on a, seen on b as it happens.
        before = await ask(broker_a, n=0)
        await broker_a.resolve(before, Resolution.ALLOW_ONCE, resolver="alice")
        await wait_for(lambda: (before, ApprovalState.ALLOWED) in seen, "b to see the answer")
        # b's feed is cut and stays cut; a raises and answers one, and raises another.
        good_dsn = b._dsn
        monkeypatch.setattr(b, "_dsn", "postgresql://x@/nowhere?host=/nonexistent-socket-dir")
        await b.drop_listen_connection()
        await wait_for(lambda: not b.fresh, "b to notice the lost feed")
        inside = await ask(broker_a, n=1)
        await broker_a.resolve(inside, Resolution.DENY, resolver="alice", reason="no")
        still_pending = await ask(broker_a, n=2)
        assert all(x != inside for x, _ in seen)  # b cannot know yet
        # The feed comes back: b catches up from the database.
        monkeypatch.setattr(b, "_dsn", good_dsn)
        await wait_for(lambda: b.fresh, "b to resynchronise")
        await wait_for(lambda: (inside, ApprovalState.DENIED) in seen, "the gap's answer")
        await wait_for(lambda: (still_pending, ApprovalState.PENDING) in seen, "the gap's ask")
        # A change after the catch-up marks the end; nothing was sent twice.
        after = await ask(broker_a, n=3)
        await wait_for(lambda: (after, ApprovalState.PENDING) in seen, "the next ask")
        counts = Counter(seen)
        assert counts[(before, ApprovalState.ALLOWED)] == 1
        assert counts[(inside, ApprovalState.DENIED)] == 1
        assert (inside, ApprovalState.PENDING) not in counts  # never pending as seen from b
    finally:
        collector.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collector
        await watch.aclose()
