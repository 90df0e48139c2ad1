"""The audit store, on SQLite and on PostgreSQL (the ``store``/``open_store`` fixtures run
each test on both): batched idempotent appends, paging, metrics, tail, reopen."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from stockade.audit.model import PREVIEW_CHARS, AuditEventRow, QueryFilters
from stockade.audit.store.sqlite import AuditStore
from stockade.errors import DependencyUnavailable, InvalidArgument, InvalidPageToken

from .conftest import BASE_NS, EventFactory, StoreOpener


async def test_append_stores_every_field_and_chains_rows(
    store: AuditStore, make_event: EventFactory
) -> None:
    events = [
        make_event(i, conflict_log='[{"pattern": "x"}]', policy_version="p1") for i in range(3)
    ]
    result = await store.append(events)
    assert (result.accepted, result.duplicates, result.head_sequence) == (3, 0, 3)
    rows, token = await store.query(QueryFilters())
    assert token == ""
    assert [row.sequence for row in rows] == [3, 2, 1]
    assert [row.event for row in reversed(rows)] == events
    assert rows[-1].prev_hash == "0" * 64
    assert rows[0].prev_hash == rows[1].row_hash
    assert len({row.row_hash for row in rows}) == 3


async def test_wal_mode_and_indexes(sqlite_store: AuditStore, db_path: Path) -> None:
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        indexes = {r[1] for r in db.execute("PRAGMA index_list(agent_audit_log)")}
    assert {"idx_audit_session", "idx_audit_tool", "idx_audit_time"} <= indexes


async def test_duplicates_are_skipped_in_batch_and_across_batches(
    store: AuditStore, make_event: EventFactory
) -> None:
    first = await store.append([make_event(1), make_event(2), make_event(1)])
    assert (first.accepted, first.duplicates) == (2, 1)
    again = await store.append([make_event(2), make_event(3), make_event(1)])
    assert (again.accepted, again.duplicates) == (1, 2)
    rows, _ = await store.query(QueryFilters())
    assert [row.event.event_id for row in rows] == ["s1-e3", "s1-e2", "s1-e1"]
    assert [row.sequence for row in rows] == [3, 2, 1]
    assert (await store.verify()).ok


async def test_a_repeated_id_with_other_content_keeps_the_first(
    store: AuditStore, make_event: EventFactory
) -> None:
    await store.append([make_event(1, output_preview="original")])
    result = await store.append([make_event(1, output_preview="forged")])
    assert result.duplicates == 1
    rows, _ = await store.query(QueryFilters())
    assert [row.event.output_preview for row in rows] == ["original"]


async def test_preview_is_cut_to_200_characters(
    store: AuditStore, make_event: EventFactory
) -> None:
    await store.append([make_event(1, output_preview="é" * 5000)])
    rows, _ = await store.query(QueryFilters())
    assert rows[0].event.output_preview == "é" * PREVIEW_CHARS
    assert (await store.verify()).ok


async def test_unset_time_becomes_arrival_time(store: AuditStore, make_event: EventFactory) -> None:
    await store.append([make_event(1, time_ns=0)])
    rows, _ = await store.query(QueryFilters())
    assert BASE_NS < rows[0].event.time_ns <= rows[0].stored_ns


async def test_bad_event_refuses_the_whole_batch(
    store: AuditStore, make_event: EventFactory
) -> None:
    batch = [make_event(1), make_event(2, trace_id="not-hex"), make_event(3)]
    with pytest.raises(InvalidArgument) as caught:
        await store.append(batch)
    assert "event 1" in caught.value.message and "trace_id" in caught.value.message
    rows, _ = await store.query(QueryFilters())
    assert rows == []
    assert store.head_sequence == 0


async def test_paging_walks_every_row_once_newest_first(
    store: AuditStore, make_event: EventFactory
) -> None:
    await store.append([make_event(i, session="a" if i % 3 else "b") for i in range(1, 251)])
    seen: list[int] = []
    token = ""
    pages = 0
    while True:
        rows, token = await store.query(QueryFilters(session_id="a"), 40, token)
        seen.extend(row.sequence for row in rows)
        pages += 1
        if not token:
            break
    expected = [i for i in range(250, 0, -1) if i % 3]
    assert seen == expected
    assert pages == (len(expected) + 39) // 40


async def test_page_size_is_clamped_and_negative_refused(
    store: AuditStore, make_event: EventFactory
) -> None:
    await store.append([make_event(i) for i in range(1, 1100)])
    rows, token = await store.query(QueryFilters(), 5000)
    assert len(rows) == 1000 and token
    rows, _ = await store.query(QueryFilters())
    assert len(rows) == 100
    with pytest.raises(InvalidArgument):
        await store.query(QueryFilters(), -1)


@pytest.mark.parametrize(
    "token",
    ["garbage!!", "eyJ2IjoxfQ", "bnVsbA", "eyJ2IjoxLCJiZWZvcmUiOi01LCJxIjoiIn0", "%%%", "e30"],
)
async def test_malformed_page_tokens_are_refused(store: AuditStore, token: str) -> None:
    with pytest.raises(InvalidPageToken):
        await store.query(QueryFilters(), 10, token)


async def test_token_from_another_query_is_refused(
    store: AuditStore, make_event: EventFactory
) -> None:
    await store.append([make_event(i) for i in range(1, 20)])
    _, token = await store.query(QueryFilters(session_id="s1"), 5)
    assert token
    with pytest.raises(InvalidPageToken, match="other filters"):
        await store.query(QueryFilters(session_id="s2"), 5, token)


async def test_filters_by_tool_status_agent_and_time(
    store: AuditStore, make_event: EventFactory
) -> None:
    await store.append(
        [
            make_event(1, tool_name="run_bash", status="DENIED", verdict="DENY"),
            make_event(2, tool_name="run_bash", agent_name="explorer"),
            make_event(3, status="FAIL"),
            make_event(4),
        ]
    )

    async def ids(filters: QueryFilters) -> list[str]:
        rows, _ = await store.query(filters)
        return [row.event.event_id for row in rows]

    assert await ids(QueryFilters(tool_name="run_bash")) == ["s1-e2", "s1-e1"]
    assert await ids(QueryFilters(status="DENIED")) == ["s1-e1"]
    assert await ids(QueryFilters(agent_name="explorer")) == ["s1-e2"]
    window = QueryFilters(start_ns=BASE_NS + 2_000_000, end_ns=BASE_NS + 4_000_000)
    assert await ids(window) == ["s1-e3", "s1-e2"]
    assert await ids(QueryFilters(session_id="nobody")) == []


async def test_session_metrics_and_summary_row(store: AuditStore, make_event: EventFactory) -> None:
    await store.append(
        [
            make_event(1, elapsed_ms=10),
            make_event(2, elapsed_ms=30),
            make_event(3, tool_name="run_bash", status="FAIL", elapsed_ms=100),
            make_event(4, tool_name="run_bash", status="DENIED", verdict="DENY", elapsed_ms=0),
            make_event(5, session="other", status="FAIL"),
            make_event(
                6, tool_name="session", status="SESSION_STOP", termination_reason="max steps"
            ),
            make_event(7, status="DECIDED", verdict="ALLOW"),  # a decision record: not a call
        ]
    )
    metrics = await store.session_metrics("s1")
    assert (metrics.calls, metrics.errors, metrics.denials) == (4, 1, 1)
    assert metrics.termination_reason == "max steps"
    by_tool = {tool.tool_name: tool for tool in metrics.tools}
    assert set(by_tool) == {"read_file", "run_bash"}
    assert by_tool["read_file"].mean_elapsed_ms == 20.0
    assert by_tool["read_file"].max_elapsed_ms == 30
    # The denied call never ran, so it does not pull the mean down.
    assert by_tool["run_bash"].mean_elapsed_ms == 100.0
    assert (by_tool["run_bash"].errors, by_tool["run_bash"].denials) == (1, 1)
    running = await store.session_metrics("unknown")
    assert (running.calls, running.termination_reason, running.tools) == (0, "", ())
    with pytest.raises(InvalidArgument):
        await store.session_metrics("")


async def test_reopen_continues_the_chain(
    open_store: StoreOpener, make_event: EventFactory
) -> None:
    first = await open_store()
    await first.append([make_event(i) for i in range(1, 6)])
    await first.close()
    second = await open_store()
    try:
        assert second.head_sequence == 5
        result = await second.append([make_event(i) for i in range(4, 9)])
        assert (result.accepted, result.duplicates) == (3, 2)
        verdict = await second.verify()
        assert (verdict.ok, verdict.rows_checked) == (True, 8)
    finally:
        await second.close()


async def test_tail_yields_new_rows_in_order_for_one_session(
    store: AuditStore, make_event: EventFactory
) -> None:
    await store.append([make_event(0)])  # before the tail starts: not yielded
    got: list[str] = []

    async def consume() -> None:
        async for row in store.tail("s1", batch=3):
            got.append(row.event.event_id)
            if len(got) == 10:
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    for start in range(1, 11, 2):
        await store.append(
            [make_event(start), make_event(start, session="s2"), make_event(start + 1)]
        )
    await asyncio.wait_for(task, 10)
    assert got == [f"s1-e{i}" for i in range(1, 11)]


async def test_tail_ends_when_the_store_closes(open_store: StoreOpener) -> None:
    opened = await open_store()
    rows: list[AuditEventRow] = []

    async def consume() -> None:
        async for row in opened.tail():
            rows.append(row.event)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    await opened.close()
    await asyncio.wait_for(task, 10)
    assert rows == []


async def test_concurrent_appends_keep_per_producer_order(
    store: AuditStore, make_event: EventFactory
) -> None:
    async def producer(session: str) -> None:
        for start in range(0, 200, 20):
            await store.append([make_event(i, session=session) for i in range(start, start + 20)])

    await asyncio.gather(*(producer(f"p{k}") for k in range(5)))
    for k in range(5):
        rows, _ = await store.query(QueryFilters(session_id=f"p{k}"), 1000)
        assert [row.event.event_id for row in reversed(rows)] == [f"p{k}-e{i}" for i in range(200)]
    verdict = await store.verify()
    assert (verdict.ok, verdict.rows_checked) == (True, 1000)


async def test_cancelled_append_still_commits_whole_and_keeps_chain(
    store: AuditStore, make_event: EventFactory
) -> None:
    task = asyncio.create_task(store.append([make_event(i) for i in range(500)]))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The shielded write finishes; the next append chains onto it.
    result = await store.append([make_event(i) for i in range(495, 505)])
    rows, _ = await store.query(QueryFilters(), 1000)
    assert len(rows) == 505
    assert result.accepted + result.duplicates == 10
    assert (await store.verify()).ok


async def test_open_refuses_unknown_synchronous_mode(db_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        await AuditStore.open(db_path, synchronous="SOMETIMES")


async def test_wal_is_checkpointed_in_the_background(
    db_path: Path, make_event: EventFactory
) -> None:
    opened = await AuditStore.open(db_path)
    try:
        await opened.append([make_event(i) for i in range(200)])
        checkpointer = opened._checkpointer
        assert checkpointer is not None
        for _ in range(500):
            if checkpointer.checkpoints:
                break
            await asyncio.sleep(0.01)
        assert checkpointer.checkpoints >= 1
        with sqlite3.connect(db_path) as db:
            busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert (busy, frames) == (0, copied)
        assert (await opened.verify()).ok
    finally:
        await opened.close()


async def test_close_waits_for_batches_in_flight_and_refuses_later_ones(
    open_store: StoreOpener, make_event: EventFactory
) -> None:
    opened = await open_store(max_pending_batches=2)
    writes = [
        asyncio.create_task(opened.append([make_event(i) for i in range(k * 100, k * 100 + 100)]))
        for k in range(5)
    ]
    assert (await writes[0]).accepted == 100  # the others are queued or being written
    await opened.close()
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    stored = sum(o.accepted for o in outcomes if not isinstance(o, BaseException))
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(o, DependencyUnavailable) for o in refused)
    # Every batch was either written whole or refused whole.
    assert stored >= 100 and stored + 100 * len(refused) == 500
    with pytest.raises(DependencyUnavailable):
        await opened.append([make_event(999)])
    reopened = await open_store()
    try:
        rows, _ = await reopened.query(QueryFilters(), 1000)
        assert len(rows) == stored
        assert (await reopened.verify()).ok
    finally:
        await reopened.close()


async def test_concurrent_single_event_appends_share_commits(
    sqlite_store: AuditStore, make_event: EventFactory
) -> None:
    store = sqlite_store
    results = await asyncio.gather(
        *(store.append([make_event(i, session=f"s{i % 4}")]) for i in range(200)),
        store.append([make_event(0, session="s0")]),  # a duplicate inside the same rush
    )
    assert sum(r.accepted for r in results) == 200
    assert sum(r.duplicates for r in results) == 1
    assert store._writer.commits < 100  # grouped, not one transaction per call
    verdict = await store.verify()
    assert (verdict.ok, verdict.rows_checked) == (True, 200)


async def test_batches_of_any_size_are_stored_whole_and_in_order(
    store: AuditStore, make_event: EventFactory
) -> None:
    """Batches that are not a multiple of the rows one INSERT statement carries (the SQLite
    writer sends up to 100 per statement) lose and reorder nothing."""
    sizes, n = [1, 99, 100, 101, 250, 7], 0
    for size in sizes:
        result = await store.append([make_event(i) for i in range(n, n + size)])
        n += size
        assert (result.accepted, result.head_sequence) == (size, n)
    rows, _ = await store.query(QueryFilters(), 1000)
    assert [row.event.event_id for row in reversed(rows)] == [f"s1-e{i}" for i in range(n)]
    assert [row.sequence for row in reversed(rows)] == list(range(1, n + 1))
    verdict = await store.verify()
    assert (verdict.ok, verdict.rows_checked) == (True, n), verdict.detail
