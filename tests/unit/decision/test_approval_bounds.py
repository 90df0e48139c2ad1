"""Bounded memory and restarts in the ask flow, on a real SQLite file (#12 items 2, 3, 5,
7, 11): one shared backlog, bounded watcher queues, watcher and pending limits, retention,
abandoned approvals, waits ending on shutdown, the schema upgrade, the session LRU and
the session rule limit."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stockade.decision.approvals import (
    ABANDONED_REASON,
    ApprovalBroker,
    ApprovalLimits,
    Resolution,
)
from stockade.decision.modes import Mode
from stockade.decision.rules import Effect
from stockade.decision.store import ApprovalState, DecisionStore, PendingCall, SQLiteDecisionStore
from stockade.errors import ApprovalAlreadyResolved, DependencyUnavailable, ResourceExhausted
from stockade.server.lifecycle import stopping
from tests.unit.decision.conftest import StoreOpener, age_approvals


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(open_decision_store: StoreOpener, clock: Clock) -> AsyncIterator[DecisionStore]:
    """The store of each backend (SQLite, PostgreSQL) with sessions s1 and s2."""
    s = await open_decision_store(clock=clock)
    for sid in ("s1", "s2"):
        await s.create_session(sid, Mode.DEFAULT)
    yield s


async def ask(broker: ApprovalBroker, session: str = "s1", n: int = 0, timeout: float = 60) -> str:
    rec = await broker.create(
        session,
        PendingCall(f"c{n}", "run_bash", {"command": f"make {n}"}),
        reason="needs approval",
        risk="medium",
        summary="Runs make",
        timeout_s=timeout,
    )
    return rec.approval_id


async def test_watchers_share_one_backlog(store: SQLiteDecisionStore, clock: Clock) -> None:
    broker = ApprovalBroker(store)
    for i in range(5):
        await ask(broker, n=i)
    a, b = broker.watch(), broker.watch()
    first_a = [await anext(a) for _ in range(5)]
    first_b = [await anext(b) for _ in range(5)]
    # The same record objects, not a copy per watcher.
    assert all(x is y for x, y in zip(first_a, first_b, strict=True))
    await a.aclose()
    await b.aclose()
    assert broker.watcher_count == 0


async def test_a_watcher_that_falls_behind_is_dropped(
    store: SQLiteDecisionStore, clock: Clock
) -> None:
    broker = ApprovalBroker(
        store, limits=ApprovalLimits(watch_queue=5, max_pending_per_session=1000)
    )
    slow = broker.watch()
    fast = broker.watch()
    await ask(broker, n=0)
    assert (await anext(slow)).call.call_id == "c0"
    assert (await anext(fast)).call.call_id == "c0"
    seen_fast = []
    for i in range(1, 21):
        await ask(broker, n=i)
        seen_fast.append((await anext(fast)).call.call_id)  # the fast one keeps up
    assert seen_fast == [f"c{i}" for i in range(1, 21)]
    # The slow one never read: its queue stopped at 5 entries, then it was dropped.
    with pytest.raises(ResourceExhausted) as info:
        await anext(slow)
    assert "approval_watch_queue" in info.value.message and "reconnect" in info.value.message
    assert broker.watcher_count == 1
    # A reconnect gets the current backlog: all 21 pending approvals, oldest first.
    again = broker.watch()
    assert [(await anext(again)).call.call_id for _ in range(21)] == [f"c{i}" for i in range(21)]
    await again.aclose()
    await fast.aclose()


async def test_concurrent_asks_stop_exactly_at_the_pending_caps(
    store: SQLiteDecisionStore, clock: Clock
) -> None:
    broker = ApprovalBroker(store, limits=ApprovalLimits(max_pending=7, max_pending_per_session=4))
    for sid in ("s2", "s3"):
        await store.create_session(sid, Mode.DEFAULT)
    got = await asyncio.gather(
        *(ask(broker, ("s1", "s2", "s3")[i % 3], n=i) for i in range(30)),
        return_exceptions=True,
    )
    refused = [g for g in got if isinstance(g, ResourceExhausted)]
    assert len(refused) == 23 and len(got) - len(refused) == 7
    assert {g.metadata["limit"] for g in refused} <= {
        "max_pending_approvals",
        "max_pending_approvals_per_session",
    }
    assert len(await store.pending_approvals()) == 7
    assert max([len(await store.pending_approvals(s)) for s in ("s1", "s2", "s3")]) <= 4


async def test_watcher_and_pending_limits(store: SQLiteDecisionStore, clock: Clock) -> None:
    broker = ApprovalBroker(
        store,
        limits=ApprovalLimits(max_watchers=2, max_pending=5, max_pending_per_session=3),
    )
    w1, w2, w3 = broker.watch(), broker.watch(), broker.watch()
    await ask(broker)
    await anext(w1)
    await anext(w2)
    with pytest.raises(ResourceExhausted, match="max_approval_watchers"):
        await anext(w3)
    await w1.aclose()
    w4 = broker.watch()
    await anext(w4)  # a slot came free
    for i in range(1, 3):
        await ask(broker, n=i)
    with pytest.raises(ResourceExhausted, match="max_pending_approvals_per_session"):
        await ask(broker, n=3)
    await ask(broker, "s2", n=4)
    await ask(broker, "s2", n=5)
    with pytest.raises(ResourceExhausted, match=r"limit is 5 \(max_pending_approvals\)"):
        await ask(broker, "s2", n=6)
    assert broker.pending_count == 5
    # Answering frees a place.
    first = next(iter(broker._pending))
    await broker.resolve(first, Resolution.DENY, resolver="r")
    await ask(broker, n=7)
    await w2.aclose()
    await w4.aclose()


async def test_sweep_expires_abandons_and_deletes(store: SQLiteDecisionStore, clock: Clock) -> None:
    limits = ApprovalLimits(retention_s=100, reattach_s=10)
    broker = ApprovalBroker(store, limits=limits)
    overdue = await ask(broker, n=0, timeout=5)
    answered = await ask(broker, n=1)
    left = await ask(broker, n=2)
    await broker.resolve(answered, Resolution.ALLOW_ONCE, resolver="r")
    # A waiter that gives up (its call was cancelled) leaves the approval orphaned.
    waiter = asyncio.create_task(broker.wait(left))
    while not broker.waiting(left):
        await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    clock.now += 6
    await age_approvals(store, 6)
    assert await broker.sweep() == (1, 0, 0)
    assert (await store.get_approval(overdue)).state is ApprovalState.EXPIRED
    # Answering while nobody waits says so.
    probe = await ask(broker, n=3)
    w = asyncio.create_task(broker.wait(probe))
    while not broker.waiting(probe):
        await asyncio.sleep(0)
    w.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w
    _, _, note = await broker.resolve(probe, Resolution.ALLOW_ONCE, resolver="r")
    assert "nobody is waiting" in note
    clock.now += 5
    await age_approvals(store, 5)
    assert await broker.sweep() == (0, 1, 0)
    rec = await store.get_approval(left)
    assert rec.state is ApprovalState.EXPIRED and rec.resolve_reason == ABANDONED_REASON
    with pytest.raises(ApprovalAlreadyResolved, match="expired"):
        await broker.resolve(left, Resolution.ALLOW_ONCE, resolver="late")
    assert await store.count_approvals() == 4
    clock.now += 200
    await age_approvals(store, 200)
    assert await broker.sweep() == (0, 0, 4)
    assert await store.count_approvals() == 0


async def test_deadlines_and_finish_times_are_on_the_store_clock(
    store: DecisionStore, clock: Clock
) -> None:
    """One clock source: the store stamps, waits, expires and finishes on its own clock
    (SQLite: the clock it was opened with, here a fake one; PostgreSQL: the database's,
    moved here by ageing the rows), never on a second clock of the broker's."""
    broker = ApprovalBroker(store, limits=ApprovalLimits(reattach_s=3_600))
    due = await ask(broker, n=0, timeout=60)
    answered_late = await ask(broker, n=1, timeout=60)
    rec, left = await store.approval_time_left(due)
    assert 55 < left <= 60 and rec.expire_time - rec.create_time == pytest.approx(60)
    clock.now += 59
    await age_approvals(store, 59)
    assert await broker.sweep() == (0, 0, 0)
    _, left = await store.approval_time_left(due)
    assert 0 < left <= 1.5
    clock.now += 2
    await age_approvals(store, 2)
    # Past the deadline: an answer does not count, and a waiter gets EXPIRED at once.
    with pytest.raises(ApprovalAlreadyResolved, match="deadline passed before the answer"):
        await broker.resolve(answered_late, Resolution.ALLOW_ONCE, resolver="late")
    assert (await asyncio.wait_for(broker.wait(due), 30)).state is ApprovalState.EXPIRED
    assert (await store.get_session("s1")).total_denials == 2
    if isinstance(store, SQLiteDecisionStore):
        async with store._db.execute(
            "SELECT finish_time FROM approvals WHERE approval_id IN (?, ?)", (due, answered_late)
        ) as cur:
            assert [r[0] for r in await cur.fetchall()] == [clock.now, clock.now]


async def test_a_waiter_that_comes_back_keeps_the_approval(
    store: SQLiteDecisionStore, clock: Clock
) -> None:
    broker = ApprovalBroker(store, limits=ApprovalLimits(reattach_s=10))
    approval = await ask(broker)
    first = asyncio.create_task(broker.wait(approval))
    while not broker.waiting(approval):
        await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    clock.now += 5
    second = asyncio.create_task(broker.wait(approval))  # re-attached in time
    while not broker.waiting(approval):
        await asyncio.sleep(0)
    clock.now += 50
    await age_approvals(store, 50)  # the sweep's heartbeat for the live waiter wins
    assert await broker.sweep() == (0, 0, 0)
    await broker.resolve(approval, Resolution.ALLOW_ONCE, resolver="r")
    assert (await second).state is ApprovalState.ALLOWED


async def test_after_a_restart_pending_approvals_wait_for_their_waiters(
    store: SQLiteDecisionStore, clock: Clock
) -> None:
    before = ApprovalBroker(store)
    kept = await ask(before, n=0)
    lost = await ask(before, n=1)
    after = ApprovalBroker(store, limits=ApprovalLimits(reattach_s=10))
    await after.load()
    waiter = asyncio.create_task(after.wait(kept))
    while not after.waiting(kept):
        await asyncio.sleep(0)
    clock.now += 11
    await age_approvals(store, 11)
    assert await after.sweep() == (0, 1, 0)
    assert (await store.get_approval(lost)).state is ApprovalState.EXPIRED
    await after.resolve(kept, Resolution.ALLOW_ONCE, resolver="r")
    assert (await waiter).state is ApprovalState.ALLOWED


async def test_shutdown_ends_waits_at_once_and_keeps_the_approval(
    store: SQLiteDecisionStore, clock: Clock
) -> None:
    broker = ApprovalBroker(store, limits=ApprovalLimits(reattach_s=10))
    approvals = [await ask(broker, n=i) for i in range(20)]
    waiters = [asyncio.create_task(broker.wait(a)) for a in approvals]
    while sum(broker.waiting(a) for a in approvals) < 20:
        await asyncio.sleep(0)
    stopping().set()
    results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 30)
    assert [type(r) for r in results] == [DependencyUnavailable] * 20
    # Still pending, and not marked as left: the waiters re-attach after the restart.
    states = [(await store.get_approval(a)).state for a in approvals]
    assert states == [ApprovalState.PENDING] * 20
    clock.now += 30  # past the re-attach window, not past the approvals' deadline
    if not store.shared:
        assert await broker.sweep() == (0, 0, 0)
    else:
        # Shared store: the callers re-attach to another replica at once (touching the
        # approval); one that did not within ``reattach_s`` is abandoned by any replica.
        await age_approvals(store, 30)
        await store.touch_waiters(approvals[:5])
        assert await broker.sweep() == (0, 15, 0)
        states = [(await store.get_approval(a)).state for a in approvals[:5]]
        assert states == [ApprovalState.PENDING] * 5


async def test_schema_upgrade_in_place(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE sessions (session_id TEXT PRIMARY KEY, mode TEXT NOT NULL,
          create_time REAL NOT NULL, consecutive_denials INTEGER NOT NULL DEFAULT 0,
          total_denials INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE approvals (approval_id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
          call_id TEXT NOT NULL DEFAULT '', call_json TEXT NOT NULL, reason TEXT NOT NULL,
          risk TEXT NOT NULL, summary TEXT NOT NULL, state TEXT NOT NULL,
          create_time REAL NOT NULL, expire_time REAL NOT NULL,
          resolver TEXT NOT NULL DEFAULT '', resolution TEXT NOT NULL DEFAULT '',
          resolve_reason TEXT NOT NULL DEFAULT '');
        INSERT INTO sessions VALUES ('s1', 'default', 1, 0, 0);
        """
    )
    call = '{"call_id": "c", "tool_name": "t", "arguments": {}}'
    db.executemany(
        "INSERT INTO approvals (approval_id, session_id, call_json, reason, risk, summary, "
        "state, create_time, expire_time) VALUES (?, 's1', ?, 'r', 'low', 's', ?, 1, ?)",
        [("old-done", call, "allowed", 50.0), ("old-open", call, "pending", 5_000.0)],
    )
    db.commit()
    db.close()
    store = await SQLiteDecisionStore.open(path, clock=clock)
    try:
        broker = ApprovalBroker(store, limits=ApprovalLimits(retention_s=100))
        assert [r.approval_id for r in await store.pending_approvals()] == ["old-open"]
        clock.now = 151.0 + 1_000  # old-done finished at its deadline (50): long ago
        _, _, deleted = await broker.sweep()
        assert deleted == 1
        assert (await store.get_approval("old-open")).always_allow_applies
    finally:
        await store.close()
    db = sqlite3.connect(path)
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    plan = " ".join(
        str(r)
        for r in db.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM approvals WHERE session_id='s1' AND call_id='c'"
        )
    )
    db.close()
    assert {"approvals_session_call", "approvals_state_expiry", "approvals_finished"} <= indexes
    assert "approvals_session_call" in plan


async def test_session_cache_is_bounded(tmp_path: Path, clock: Clock) -> None:
    store = await SQLiteDecisionStore.open(tmp_path / "c.db", clock=clock, cache_max_sessions=3)
    try:
        for i in range(10):
            await store.create_session(f"s{i}", Mode.DEFAULT)
            await store.add_rule(f"s{i}", Effect.DENY, f"run_bash(rm {i})")
            await store.session_rules(f"s{i}")
        assert store.cached_sessions == 3
        # An evicted session is read back whole: mode, counters and rules.
        await store.record_outcome("s0", denied=True)
        rec = await store.get_session("s0")
        assert rec.total_denials == 1 and store.cached_sessions == 3
        index = await store.session_rules("s0")
        assert [r.pattern for r in index.rules] == ["run_bash(rm 0)"]
    finally:
        await store.close()


async def test_session_rule_limit(tmp_path: Path, clock: Clock) -> None:
    store = await SQLiteDecisionStore.open(tmp_path / "r.db", clock=clock, max_session_rules=3)
    try:
        await store.create_session("s1", Mode.DEFAULT)
        for i in range(3):
            await store.add_rule("s1", Effect.ALLOW, f"read_file(/a/{i})")
        with pytest.raises(ResourceExhausted) as info:
            await store.add_rule("s1", Effect.ALLOW, "read_file(/a/3)")
        assert "the limit is 3 (max_session_rules)" in info.value.message
        # An ALWAYS_ALLOW past the limit is refused before the approval is answered.
        broker = ApprovalBroker(store)
        approval = await ask(broker)
        with pytest.raises(ResourceExhausted):
            await broker.resolve(approval, Resolution.ALWAYS_ALLOW, resolver="r")
        assert (await store.get_approval(approval)).state is ApprovalState.PENDING
        await broker.resolve(approval, Resolution.ALLOW_ONCE, resolver="r")
        # Another session has its own budget.
        await store.create_session("s2", Mode.DEFAULT)
        await store.add_rule("s2", Effect.ALLOW, "read_file(/b)")
    finally:
        await store.close()


async def test_waits_leave_nothing_behind(store: SQLiteDecisionStore, clock: Clock) -> None:
    from stockade.errors import ApprovalNotFound

    broker = ApprovalBroker(store)
    for i in range(50):
        with pytest.raises(ApprovalNotFound):
            await broker.wait(f"appr-bogus-{i}")
    approval = await ask(broker)
    waiter = asyncio.create_task(broker.wait(approval))
    while not broker.waiting(approval):
        await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert broker._answered == {} and broker.waiting(approval) == 0
