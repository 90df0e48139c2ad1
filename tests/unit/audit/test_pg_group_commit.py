"""Group commit on the PostgreSQL audit store (#14), on a real server: concurrent appends
share one transaction, each caller is answered only after its group committed, a failing
batch fails its own callers only, and batches queued at close are still written.

The tests hold the append lock (``pg_advisory_lock`` on another connection) to keep a
transaction waiting, and poll ``pg_locks`` until the store is seen waiting for it: a
condition, never a sleep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg
import pytest

from stockade.audit.model import AppendResult, QueryFilters
from stockade.audit.store.postgres import _APPEND_LOCK, PostgresAuditStore
from stockade.errors import DependencyUnavailable, InvalidArgument

from .conftest import EventFactory

#: Generous: the machine is shared; a condition that holds returns at once.
_DEADLINE_S = 60.0


async def _until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + _DEADLINE_S
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def _append_lock_held(dsn: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Hold the append lock on another connection; yields a function that waits until a
    store's transaction is queued behind it. Released on leaving the block."""
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", _APPEND_LOCK)

        async def store_is_waiting() -> bool:
            waiting = await holder.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            return bool(waiting)

        async def wait_for_store() -> None:
            await _until(store_is_waiting, "the store waits for the append lock")

        yield wait_for_store
    finally:
        await holder.close()  # releases the lock


async def _row_count(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM agent_audit_log"))
    finally:
        await conn.close()


async def test_concurrent_appends_share_one_transaction(
    pg_dsn: str, make_event: EventFactory
) -> None:
    store = await PostgresAuditStore.open(pg_dsn, chain_id="replica-a")
    try:
        batches = [[make_event(i * 50 + j) for j in range(50)] for i in range(20)]
        results = await asyncio.gather(*(store.append(batch) for batch in batches))
        assert [(r.accepted, r.duplicates) for r in results] == [(50, 0)] * 20
        # Every append was queued before the committer ran: one transaction for all 20.
        assert store.commits == 1
        rows, _ = await store.query(QueryFilters(), 1000)
        assert [row.sequence for row in rows] == list(range(1000, 0, -1))
        verdict = await store.verify()
        assert (verdict.ok, verdict.rows_checked) == (True, 1000), verdict.detail
    finally:
        await store.close()


async def test_each_caller_is_answered_only_after_its_group_commits(
    pg_dsn: str, make_event: EventFactory
) -> None:
    store = await PostgresAuditStore.open(pg_dsn, chain_id="replica-a")
    try:
        async with _append_lock_held(pg_dsn) as wait_for_store:
            first = asyncio.ensure_future(store.append([make_event(0), make_event(1)]))
            await wait_for_store()
            # The committer is inside the first transaction: these two queue behind it,
            # one of them repeating an id of the first batch.
            later = [
                asyncio.ensure_future(store.append([make_event(2), make_event(1)])),
                asyncio.ensure_future(store.append([make_event(3)])),
            ]
            await asyncio.sleep(0)
            assert not first.done() and not any(task.done() for task in later)
            assert await _row_count(pg_dsn) == 0  # nothing acknowledged, nothing visible
        results: list[AppendResult] = [await first, *(await asyncio.gather(*later))]
        assert [(r.accepted, r.duplicates) for r in results] == [(2, 0), (1, 1), (1, 0)]
        assert store.commits == 2  # the first batch alone, then the two queued together
        verdict = await store.verify()
        assert (verdict.ok, verdict.rows_checked) == (True, 4), verdict.detail
    finally:
        await store.close()


async def test_a_failing_batch_fails_only_its_own_callers(
    pg_dsn: str, make_event: EventFactory
) -> None:
    # A real database error for one batch's data: a trigger refuses one session's rows.
    conn = await asyncpg.connect(pg_dsn)
    store = await PostgresAuditStore.open(pg_dsn, chain_id="replica-a")
    try:
        await conn.execute(
            "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN IF NEW.session_id = 'poison' THEN RAISE EXCEPTION 'poisoned row'; END IF;"
            " RETURN NEW; END $$;"
            " CREATE TRIGGER refuse_poison BEFORE INSERT ON agent_audit_log"
            " FOR EACH ROW EXECUTE FUNCTION refuse_poison()"
        )
        async with _append_lock_held(pg_dsn) as wait_for_store:
            head = asyncio.ensure_future(store.append([make_event(0)]))
            await wait_for_store()
            good = asyncio.ensure_future(store.append([make_event(1), make_event(2)]))
            bad = asyncio.ensure_future(store.append([make_event(3, session="poison")]))
            also_good = asyncio.ensure_future(store.append([make_event(4)]))
            await asyncio.sleep(0)
        assert (await head).accepted == 1
        assert (await good).accepted == 2
        assert (await also_good).accepted == 1
        with pytest.raises(asyncpg.RaiseError, match="poisoned row"):
            await bad
        # The failed group left no hole in the chain: it was hashed again without it.
        rows, _ = await store.query(QueryFilters(), 100)
        assert sorted(r.event.event_id for r in rows) == ["s1-e0", "s1-e1", "s1-e2", "s1-e4"]
        verdict = await store.verify()
        assert (verdict.ok, verdict.rows_checked) == (True, 4), verdict.detail
    finally:
        await store.close()
        await conn.close()


async def test_batches_queued_at_close_are_written_and_later_ones_refused(
    pg_dsn: str, make_event: EventFactory
) -> None:
    store = await PostgresAuditStore.open(pg_dsn, chain_id="replica-a")
    async with _append_lock_held(pg_dsn) as wait_for_store:
        first = asyncio.ensure_future(store.append([make_event(0)]))
        await wait_for_store()
        queued = asyncio.ensure_future(store.append([make_event(1)]))
        await asyncio.sleep(0)
        closing = asyncio.ensure_future(store.close())
        await asyncio.sleep(0)
        with pytest.raises(DependencyUnavailable, match="closing"):
            await store.append([make_event(2)])
    await closing
    assert ((await first).accepted, (await queued).accepted) == (1, 1)
    again = await PostgresAuditStore.open(pg_dsn, chain_id="replica-a")
    try:
        verdict = await again.verify()
        assert (verdict.ok, verdict.rows_checked) == (True, 2), verdict.detail
    finally:
        await again.close()


@pytest.mark.parametrize("field", ["output_preview", "session_id", "decision_reason"])
async def test_a_nul_character_is_refused_by_name_and_fails_only_its_batch(
    pg_dsn: str, make_event: EventFactory, field: str
) -> None:
    """PostgreSQL text cannot hold U+0000: the batch that carries one is refused with
    INVALID_ARGUMENT naming the field (the producer then records a stand-in row), never an
    INTERNAL error, and the batches committed in the same group are stored."""
    store = await PostgresAuditStore.open(pg_dsn, chain_id="replica-a")
    try:
        async with _append_lock_held(pg_dsn) as wait_for_store:
            head = asyncio.ensure_future(store.append([make_event(0)]))
            await wait_for_store()
            good = asyncio.ensure_future(store.append([make_event(1)]))
            bad = asyncio.ensure_future(
                store.append([make_event(2), make_event(3, **{field: "a\x00b"})])
            )
            await asyncio.sleep(0)
        assert ((await head).accepted, (await good).accepted) == (1, 1)
        with pytest.raises(InvalidArgument, match="NUL character") as caught:
            await bad
        assert caught.value.metadata["field"] == field
        assert caught.value.metadata["index"] == "1"
        verdict = await store.verify()
        assert (verdict.ok, verdict.rows_checked) == (True, 2), verdict.detail
    finally:
        await store.close()
