"""The PostgreSQL audit store's own guarantees (STORE-1, STORE-4), on a real server:
several replicas on one database, one hash chain each, idempotency across replicas,
migrations under a lock, tampering named by chain and row, the tail across replicas."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from stockade.audit.model import QueryFilters
from stockade.audit.settings import AuditSettings
from stockade.audit.store.base import parse_store_dsn, redact_dsn
from stockade.audit.store.postgres import MIGRATIONS, PostgresAuditStore, check_chain_id
from stockade.errors import DependencyUnavailable, InvalidArgument

from .conftest import BASE_NS, EventFactory


async def _open(dsn: str, chain: str, **options: object) -> PostgresAuditStore:
    return await PostgresAuditStore.open(dsn, chain_id=chain, **options)  # type: ignore[arg-type]


async def test_two_replicas_append_their_own_chains_and_both_verify(
    pg_dsn: str, make_event: EventFactory
) -> None:
    a, b = await _open(pg_dsn, "replica-a"), await _open(pg_dsn, "replica-b")
    try:
        for k in range(5):
            await asyncio.gather(
                a.append([make_event(i, session="sa") for i in range(k * 20, k * 20 + 20)]),
                b.append([make_event(i, session="sb") for i in range(k * 20, k * 20 + 20)]),
            )
        rows, _ = await a.query(QueryFilters(), 1000)
        # One global order without gaps across both writers (paging and the tail walk it).
        assert [row.sequence for row in rows] == list(range(200, 0, -1))
        for store in (a, b):
            verdict = await store.verify()
            assert (verdict.ok, verdict.rows_checked) == (True, 200), verdict.detail
            assert "'replica-a': 100 rows ok" in verdict.detail
            assert "'replica-b': 100 rows ok" in verdict.detail
        assert (await a.verify()).head_sequence == 100  # a's own chain position
    finally:
        await a.close()
        await b.close()


async def test_an_event_sent_to_both_replicas_is_stored_once(
    pg_dsn: str, make_event: EventFactory
) -> None:
    a, b = await _open(pg_dsn, "replica-a"), await _open(pg_dsn, "replica-b")
    try:
        batch = [make_event(i) for i in range(50)]
        first, second = await asyncio.gather(a.append(batch), b.append(batch))
        assert first.accepted + second.accepted == 50
        assert first.duplicates + second.duplicates == 50
        again = await b.append([make_event(i) for i in range(45, 55)])
        assert (again.accepted, again.duplicates) == (5, 5)
        rows, _ = await a.query(QueryFilters(), 1000)
        assert sorted(r.event.event_id for r in rows) == sorted(f"s1-e{i}" for i in range(55))
        assert (await a.verify()).ok
    finally:
        await a.close()
        await b.close()


async def test_a_second_live_process_on_the_same_chain_is_refused(
    pg_dsn: str, make_event: EventFactory
) -> None:
    first = await _open(pg_dsn, "replica-a")
    await first.append([make_event(1), make_event(2)])
    with pytest.raises(InvalidArgument, match="already writes chain 'replica-a'"):
        await _open(pg_dsn, "replica-a", chain_lock_wait_s=0.5)
    await first.close()
    # Once the owner is gone the chain is free again, and continues where it was.
    again = await _open(pg_dsn, "replica-a")
    try:
        await again.append([make_event(3)])
        verdict = await again.verify()
        assert (verdict.ok, verdict.rows_checked, verdict.head_sequence) == (True, 3, 3)
    finally:
        await again.close()


async def test_replicas_starting_together_apply_each_migration_once(pg_dsn: str) -> None:
    stores = await asyncio.gather(*(_open(pg_dsn, f"replica-{k}") for k in range(4)))
    try:
        conn = await asyncpg.connect(pg_dsn)
        try:
            versions = [r[0] for r in await conn.fetch("SELECT version FROM audit_schema_version")]
            chains = [r[0] for r in await conn.fetch("SELECT chain_id FROM audit_chain")]
        finally:
            await conn.close()
        assert versions == [version for version, _ in MIGRATIONS]
        assert sorted(chains) == [f"replica-{k}" for k in range(4)]
    finally:
        for store in stores:
            await store.close()


async def _tamper(dsn: str, sql: str, *args: object) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def _two_chains(dsn: str, make_event: EventFactory) -> PostgresAuditStore:
    """Replica b's store after a and b each wrote 10 rows, interleaved (a is closed)."""
    a, b = await _open(dsn, "replica-a"), await _open(dsn, "replica-b")
    for k in range(10):
        await a.append([make_event(k, session="sa")])
        await b.append([make_event(k, session="sb")])
    await a.close()
    return b


@pytest.mark.parametrize(
    ("sql", "chain", "problem"),
    [
        (  # an edited row: its own hash no longer matches
            "UPDATE agent_audit_log SET output_preview = 'nothing to see'"
            " WHERE chain_id = 'replica-b' AND chain_seq = 4",
            "replica-b",
            "row_hash does not match",
        ),
        (  # a row removed from the middle of a chain
            "DELETE FROM agent_audit_log WHERE chain_id = 'replica-a' AND chain_seq = 6",
            "replica-a",
            "row 6 is missing",
        ),
        (  # rows removed from the end of a chain (its recorded head remains)
            "DELETE FROM agent_audit_log WHERE chain_id = 'replica-b' AND chain_seq >= 9",
            "replica-b",
            "rows were removed from the end",
        ),
        (  # a row moved from one chain into the other
            "UPDATE agent_audit_log SET chain_id = 'replica-a', chain_seq = 11"
            " WHERE chain_id = 'replica-b' AND chain_seq = 10",
            "replica-a",
            "prev_hash does not match",
        ),
    ],
)
async def test_tampering_names_the_chain_and_the_row(
    pg_dsn: str, make_event: EventFactory, sql: str, chain: str, problem: str
) -> None:
    store = await _two_chains(pg_dsn, make_event)
    try:
        assert (await store.verify()).ok
        await _tamper(pg_dsn, sql)
        verdict = await store.verify()
        assert not verdict.ok
        assert verdict.detail.startswith(f"chain '{chain}' broken at")
        assert problem in verdict.detail
    finally:
        await store.close()


async def test_an_edited_row_is_named_by_its_global_sequence(
    pg_dsn: str, make_event: EventFactory
) -> None:
    store = await _two_chains(pg_dsn, make_event)
    try:
        rows, _ = await store.query(QueryFilters(session_id="sb"), 100)
        victim = next(r for r in rows if r.event.event_id == "sb-e4")
        await _tamper(
            pg_dsn,
            "UPDATE agent_audit_log SET elapsed_ms = elapsed_ms + 1 WHERE sequence = $1",
            victim.sequence,
        )
        verdict = await store.verify()
        assert (verdict.ok, verdict.first_broken_sequence) == (False, victim.sequence)
        assert f"row {victim.sequence} (chain position 5)" in verdict.detail
    finally:
        await store.close()


async def test_rows_of_a_chain_with_no_recorded_head_are_caught(
    pg_dsn: str, make_event: EventFactory
) -> None:
    store = await _two_chains(pg_dsn, make_event)
    try:
        await _tamper(
            pg_dsn,
            "INSERT INTO agent_audit_log SELECT 999, stored_ns, event_id || '-forged', session_id,"
            " step, tool_name, status, elapsed_ms, output_preview, agent_name, time_ns, call_id,"
            " verdict, matched_rule, rule_source, conflict_log, trace_id, termination_reason,"
            " policy_version, arguments_json, 'ghost', 1, prev_hash, row_hash"
            " FROM agent_audit_log WHERE sequence = 1",
        )
        verdict = await store.verify()
        assert (verdict.ok, verdict.first_broken_sequence) == (False, 999)
        assert "chain 'ghost'" in verdict.detail
    finally:
        await store.close()


async def test_the_tail_on_one_replica_sees_rows_written_by_another(
    pg_dsn: str, make_event: EventFactory
) -> None:
    a, b = await _open(pg_dsn, "replica-a"), await _open(pg_dsn, "replica-b")
    try:
        got: list[str] = []

        async def consume() -> None:
            async for row in a.tail("s1"):
                got.append(row.event.event_id)
                if len(got) == 6:
                    return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0)
        for k in range(3):  # b writes; a learns of it only through NOTIFY
            await b.append([make_event(2 * k), make_event(2 * k + 1)])
        await asyncio.wait_for(task, 30)
        assert got == [f"s1-e{i}" for i in range(6)]
    finally:
        await a.close()
        await b.close()


async def test_retention_cuts_every_chain_and_the_rest_still_verifies(
    pg_dsn: str, make_event: EventFactory
) -> None:
    now = [BASE_NS]
    a = await _open(pg_dsn, "replica-a", clock=lambda: now[0])
    b = await _open(pg_dsn, "replica-b", clock=lambda: now[0])
    try:
        await a.append([make_event(i, session="sa") for i in range(5)])
        await b.append([make_event(i, session="sb") for i in range(3)])
        now[0] += 10 * 86_400 * 10**9
        await a.append([make_event(i, session="sa") for i in range(5, 8)])
        await b.append([make_event(i, session="sb") for i in range(3, 7)])
        deleted = await b.apply_retention(5)
        assert deleted == 8
        rows, _ = await a.query(QueryFilters(), 100)
        assert sorted(r.event.event_id for r in rows) == sorted(
            [f"sa-e{i}" for i in range(5, 8)] + [f"sb-e{i}" for i in range(3, 7)]
        )
        verdict = await a.verify()
        assert (verdict.ok, verdict.rows_checked, verdict.anchor_sequence) == (True, 7, 5)
        await a.append([make_event(9, session="sa")])  # the chain goes on after the cut
        assert (await b.verify()).ok
        with pytest.raises(InvalidArgument):
            await a.apply_retention(-1)
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("bad", ["", "x" * 129, "tab\there", "new\nline"])
def test_replica_ids_that_cannot_name_a_chain_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        check_chain_id(bad)


async def test_an_unreachable_server_is_unavailable_not_a_traceback() -> None:
    with pytest.raises(DependencyUnavailable, match="cannot reach the audit database"):
        await PostgresAuditStore.open(
            "postgresql://nobody@/nowhere?host=/nonexistent-socket-dir", chain_id="r"
        )


def test_one_dsn_setting_picks_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_store_dsn("", "/state/audit.db") == ("sqlite", "/state/audit.db")
    assert parse_store_dsn("sqlite:///var/a.db", "/d") == ("sqlite", "/var/a.db")
    assert parse_store_dsn("postgresql://u:p@db/audit", "/d") == (
        "postgresql",
        "postgresql://u:p@db/audit",
    )
    assert parse_store_dsn("postgres://db/audit", "/d")[0] == "postgresql"
    for bad in ("mysql://db/a", "audit.db", "http://x"):
        with pytest.raises(InvalidArgument):
            parse_store_dsn(bad, "/d")
    assert redact_dsn("postgresql://u:secret@db:5432/audit") == "postgresql://u:***@db:5432/audit"
    assert "secret" not in redact_dsn("postgresql://u@db/audit?password=secret")
    monkeypatch.setenv("STOCKADE_AUDIT_STORE_DSN", "postgresql://u:secret@db/audit")
    monkeypatch.setenv("STOCKADE_AUDIT_REPLICA_ID", "audit-7f9c")
    settings = AuditSettings()
    assert (settings.store_dsn, settings.replica_id) == (
        "postgresql://u:secret@db/audit",
        "audit-7f9c",
    )
    assert "secret" not in repr(settings)
