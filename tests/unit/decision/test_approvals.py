"""Sessions store and approval broker on a real SQLite file (DEC-6, DEC-8, DEC-9)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from stockade.decision.approvals import ApprovalBroker, GrantScope, Resolution, grant_pattern
from stockade.decision.core import CallInput, DecisionCore
from stockade.decision.engine import Facts
from stockade.decision.grants import GrantSigner
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyStore
from stockade.decision.rules import Effect, Rule, Source
from stockade.decision.store import ApprovalState, DecisionStore, PendingCall, SQLiteDecisionStore
from stockade.errors import ApprovalAlreadyResolved, ApprovalNotFound, InvalidPattern
from tests.unit.decision.conftest import StoreOpener


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(open_decision_store: StoreOpener) -> AsyncIterator[DecisionStore]:
    """The store of each backend (SQLite, PostgreSQL) with session s1."""
    s = await open_decision_store()
    await s.create_session("s1", Mode.DEFAULT)
    yield s


async def ask(broker: ApprovalBroker, command: str = "make", timeout: float = 60) -> str:
    rec = await broker.create(
        "s1",
        PendingCall("c1", "run_bash", {"command": command}),
        reason="needs approval",
        risk="medium",
        summary="Runs make",
        timeout_s=timeout,
    )
    return rec.approval_id


async def test_many_resolvers_at_once_exactly_one_wins(store: SQLiteDecisionStore) -> None:
    broker = ApprovalBroker(store)
    approval = await ask(broker)
    answers = [Resolution.ALLOW_ONCE, Resolution.DENY] * 5

    async def resolve(i: int, r: Resolution) -> str | None:
        try:
            rec, _, _ = await broker.resolve(approval, r, resolver=f"r{i}")
        except ApprovalAlreadyResolved:
            return None
        return rec.resolver

    results = await asyncio.gather(*(resolve(i, r) for i, r in enumerate(answers)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    final = await store.get_approval(approval)
    assert final.resolver == winners[0] and final.state is not ApprovalState.PENDING


async def test_watchers_see_backlog_and_changes(store: SQLiteDecisionStore) -> None:
    broker = ApprovalBroker(store)
    first = await ask(broker)
    w1, w2 = broker.watch("s1"), broker.watch("")
    assert (await anext(w1)).approval_id == first
    assert (await anext(w2)).approval_id == first
    second = await ask(broker, "make test")
    assert (await anext(w1)).approval_id == second
    await broker.resolve(first, Resolution.DENY, resolver="ui")
    assert (await anext(w2)).approval_id == second
    update = await anext(w2)
    assert (update.approval_id, update.state) == (first, ApprovalState.DENIED)
    assert broker.watcher_count == 2
    await w1.aclose()
    await w2.aclose()
    assert broker.watcher_count == 0


async def test_wait_times_out_to_expired_and_counts_a_denial(store: SQLiteDecisionStore) -> None:
    broker = ApprovalBroker(store)
    approval = await ask(broker, timeout=0.05)
    rec = await broker.wait(approval)
    assert rec.state is ApprovalState.EXPIRED
    assert (await store.get_session("s1")).total_denials == 1
    with pytest.raises(ApprovalAlreadyResolved):
        await broker.resolve(approval, Resolution.ALLOW_ONCE, resolver="late")


async def test_wait_wakes_on_answer(store: SQLiteDecisionStore) -> None:
    broker = ApprovalBroker(store)
    approval = await ask(broker)
    waiter = asyncio.create_task(broker.wait(approval))
    await asyncio.sleep(0.01)
    await broker.resolve(approval, Resolution.ALLOW_ONCE, resolver="ui")
    rec = await asyncio.wait_for(waiter, 10)
    assert rec.state is ApprovalState.ALLOWED and rec.resolver == "ui"


async def test_always_allow_grant_scopes(open_decision_store: StoreOpener) -> None:
    clock = Clock()
    # The store's clock (PostgreSQL: measured against the database's when it connects,
    # so moving the fake clock moves the store's estimate of the database's).
    store = await open_decision_store(clock=clock)
    await store.create_session("s1", Mode.DEFAULT)
    broker = ApprovalBroker(store)
    approval = await ask(broker, "ls *.py")
    _, grant, _ = await broker.resolve(
        approval,
        Resolution.ALWAYS_ALLOW,
        resolver="alice",
        scope=GrantScope(remaining_uses=2, expire_time=store.now() + 30),
    )
    assert grant is not None
    assert grant.rule.pattern == r"run_bash(ls \*.py)"  # exact content, star escaped
    index = await store.session_rules("s1")
    [allow] = index.for_tool("run_bash")[2]
    assert allow.allows_command("ls *.py") and not allow.allows_command("ls secret.txt")
    await store.use_grants("s1", (grant.rule,))
    assert [g.remaining_uses for g in await store.list_grants("s1")] == [1]
    clock.now += 31
    assert await store.list_grants("s1") == []
    assert len(await store.session_rules("s1")) == 0  # the index drops the expired grant


async def test_grant_pattern_for_tools_without_content() -> None:
    assert grant_pattern(PendingCall("c", "todo_write", {"todos": []})) == "todo_write"
    # The declared primary field (contract table) names the content: an exact grant.
    assert grant_pattern(PendingCall("c", "search_papers", {"query": "x"})) == ("search_papers(x)")
    assert grant_pattern(PendingCall("c", "read_file", {"file_path": "a*b"})) == (
        r"read_file(a\*b)"
    )


async def test_session_rules_and_counters(store: SQLiteDecisionStore) -> None:
    rule = await store.add_rule("s1", Effect.DENY, "read_file(*.pem)", request_id="r1")
    assert (await store.add_rule("s1", Effect.DENY, "read_file(*.pem)", request_id="r1")) == rule
    with pytest.raises(InvalidPattern):
        await store.add_rule("s1", Effect.ALLOW, "read_file(")
    assert [r.pattern for r in await store.list_rules("s1")] == ["read_file(*.pem)"]
    for _ in range(2):
        await store.record_outcome("s1", denied=True)
    rec = await store.record_outcome("s1", denied=False)
    assert (rec.consecutive_denials, rec.total_denials) == (0, 2)
    assert await store.delete_session("s1")
    with pytest.raises(ApprovalNotFound):
        await store.get_approval("missing")


async def test_a_retried_decide_reuses_its_pending_approval(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('[permissions]\nask = ["file_write"]\n')
    store = await SQLiteDecisionStore.open(tmp_path / "core.db")
    try:
        core = DecisionCore(
            PolicyStore(tmp_path / "p.toml", {}), store, GrantSigner(Ed25519PrivateKey.generate())
        )
        call = CallInput("s1", "c1", "file_write", {"file_path": "a"})
        first = await core.decide(call, Facts())
        again = await core.decide(call, Facts())
        assert first.approval_id and again.approval_id == first.approval_id
        other = await core.decide(CallInput("s1", "c1", "file_write", {"file_path": "b"}), Facts())
        assert other.approval_id != first.approval_id
        assert len(await store.pending_approvals("s1")) == 2
    finally:
        await store.close()


async def test_a_database_from_before_always_allow_applies_is_upgraded(tmp_path: Path) -> None:
    """A state folder written by the first release opens: the missing column is added and
    its pending approvals keep the behaviour they were made under (always-allow applies)."""
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
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
            INSERT INTO sessions VALUES ('s1', 'default', 1.0, 0, 0);
            INSERT INTO approvals (approval_id, session_id, call_id, call_json, reason, risk,
              summary, state, create_time, expire_time) VALUES ('appr-old', 's1', 'c1',
              '{"call_id": "c1", "tool_name": "run_bash", "arguments": {"command": "make"}}',
              'needs approval', 'medium', 'Runs make', 'pending', 1.0, 9e12);
            """
        )
    store = await SQLiteDecisionStore.open(path)
    try:
        old = await store.get_approval("appr-old")
        assert old.state is ApprovalState.PENDING and old.always_allow_applies
        assert old.rule is None  # made before the asking rule was kept: unknown, not invented
        broker = ApprovalBroker(store)
        asking = Rule(Effect.ASK, "file_write", Source.PROJECT, "edits need review", "", False)
        made = await broker.create(
            "s1",
            PendingCall("c2", "file_write", {"file_path": "a"}),
            reason="rule file_write requires approval",
            risk="medium",
            summary="Writes a",
            timeout_s=60,
            always_allow_applies=False,
            rule=asking,
        )
        stored = await store.get_approval(made.approval_id)
        assert not stored.always_allow_applies and stored.rule == asking
    finally:
        await store.close()
    reopened = await SQLiteDecisionStore.open(path)  # the upgrade runs once; reopening is a no-op
    try:
        pending = {a.approval_id: a.rule for a in await reopened.pending_approvals("s1")}
        assert pending == {"appr-old": None, made.approval_id: asking}
    finally:
        await reopened.close()


async def test_an_unreadable_stored_rule_is_left_out_not_invented(tmp_path: Path) -> None:
    """The asking rule is shown to people and never decides anything: a row whose stored rule
    cannot be read (hand-edited, or written by a newer release with another effect) still
    loads, without a rule."""
    import sqlite3

    store = await SQLiteDecisionStore.open(tmp_path / "d.db")
    try:
        await store.create_session("s1", Mode.DEFAULT)
        broker = ApprovalBroker(store)
        made = await broker.create(
            "s1",
            PendingCall("c1", "file_write", {"file_path": "a"}),
            reason="r",
            risk="medium",
            summary="s",
            timeout_s=60,
            rule=Rule(Effect.ASK, "file_write", Source.SESSION, "", "rule-1"),
        )
        assert (await store.get_approval(made.approval_id)).rule is not None
    finally:
        await store.close()
    bad = [
        "{",
        '{"effect": "maybe", "pattern": "x", "source": "managed"}',
        '{"pattern": "x"}',
        "[]",
    ]
    for text in bad:
        with sqlite3.connect(tmp_path / "d.db") as db:
            db.execute("UPDATE approvals SET rule_json = ?", (text,))
        store = await SQLiteDecisionStore.open(tmp_path / "d.db")
        try:
            assert (await store.get_approval(made.approval_id)).rule is None, text
        finally:
            await store.close()


async def test_the_asking_rule_is_kept_on_both_backends(store: DecisionStore) -> None:
    broker = ApprovalBroker(store)
    asking = Rule(Effect.ASK, "run_bash(make *)", Source.MANAGED, "ask for builds", "r-7", True)
    made = await broker.create(
        "s1",
        PendingCall("c9", "run_bash", {"command": "make all"}),
        reason="needs approval",
        risk="medium",
        summary="Runs make",
        timeout_s=60,
        rule=asking,
    )
    assert (await store.get_approval(made.approval_id)).rule == asking
    [pending] = await store.pending_approvals("s1")
    assert pending.rule == asking
    unknown = await ask(broker, "make test")
    assert (await store.get_approval(unknown)).rule is None
