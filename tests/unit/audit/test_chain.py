"""Tamper evidence (AUD-5): edits, deletions, insertions and reordering done with sqlite3
directly are caught by verify, which names the first broken link; retention keeps the
retained log verifiable."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.audit.chain import GENESIS, _encode_json, canonical, hash_values, link_hash
from stockade.audit.model import (
    ADDED_FIELDS,
    EVENT_FIELDS,
    V1_EVENT_FIELDS,
    AuditEventRow,
    QueryFilters,
)
from stockade.audit.store.sqlite import AuditStore

from .conftest import BASE_NS, EventFactory


async def _filled(db_path: Path, make_event: EventFactory, n: int = 10) -> AuditStore:
    store = await AuditStore.open(db_path)
    await store.append([make_event(i) for i in range(1, n + 1)])
    return store


def _sql(db_path: Path, *statements: str) -> None:
    with sqlite3.connect(db_path) as db:
        for statement in statements:
            db.execute(statement)


async def test_untouched_log_verifies(db_path: Path, make_event: EventFactory) -> None:
    store = await _filled(db_path, make_event)
    try:
        result = await store.verify()
        assert (result.ok, result.rows_checked, result.first_broken_sequence) == (True, 10, 0)
        rows, _ = await store.query(QueryFilters(), 1)
        assert (result.head_sequence, result.head_hash) == (10, rows[0].row_hash)
        assert result.anchor_sequence == 0
    finally:
        await store.close()


async def test_empty_log_verifies(store: AuditStore) -> None:
    result = await store.verify()
    assert (result.ok, result.rows_checked) == (True, 0)


async def test_edited_row_is_named(db_path: Path, make_event: EventFactory) -> None:
    store = await _filled(db_path, make_event)
    try:
        _sql(
            db_path,
            "UPDATE agent_audit_log SET status = 'OK', output_preview = 'clean' WHERE sequence = 4",
        )
        result = await store.verify()
        assert (result.ok, result.first_broken_sequence) == (False, 4)
        assert "edited" in result.detail
    finally:
        await store.close()


async def test_edited_row_with_recomputed_hash_breaks_the_next_link(
    db_path: Path, make_event: EventFactory
) -> None:
    store = await _filled(db_path, make_event)
    try:
        with sqlite3.connect(db_path) as db:
            row = db.execute(
                f"SELECT sequence, stored_ns, {', '.join(EVENT_FIELDS)}, prev_hash"
                " FROM agent_audit_log WHERE sequence = 6"
            ).fetchone()
            values = list(row[:-1])
            values[2 + EVENT_FIELDS.index("status")] = "OK"
            values[2 + EVENT_FIELDS.index("tool_name")] = "harmless"
            forged = hash_values(row[-1], values)
            db.execute(
                "UPDATE agent_audit_log SET status = 'OK', tool_name = 'harmless', row_hash = ?"
                " WHERE sequence = 6",
                (forged,),
            )
        result = await store.verify()
        assert (result.ok, result.first_broken_sequence) == (False, 7)
        assert "prev_hash" in result.detail
    finally:
        await store.close()


async def test_deleted_row_is_named(db_path: Path, make_event: EventFactory) -> None:
    store = await _filled(db_path, make_event)
    try:
        _sql(db_path, "DELETE FROM agent_audit_log WHERE sequence = 5")
        result = await store.verify()
        assert (result.ok, result.first_broken_sequence) == (False, 6)
        assert "row 5 is missing" in result.detail
        assert result.rows_checked == 5
    finally:
        await store.close()


async def test_deleted_rows_with_renumbering_are_named(
    db_path: Path, make_event: EventFactory
) -> None:
    store = await _filled(db_path, make_event)
    try:
        _sql(
            db_path,
            "DELETE FROM agent_audit_log WHERE sequence = 3",
            "UPDATE agent_audit_log SET sequence = sequence - 1 WHERE sequence > 3",
        )
        result = await store.verify()
        assert (result.ok, result.first_broken_sequence) == (False, 3)
    finally:
        await store.close()


async def test_deleted_tail_is_named(db_path: Path, make_event: EventFactory) -> None:
    store = await _filled(db_path, make_event)
    try:
        _sql(db_path, "DELETE FROM agent_audit_log WHERE sequence >= 9")
        result = await store.verify()
        assert (result.ok, result.first_broken_sequence) == (False, 9)
        assert "removed from the end" in result.detail
    finally:
        await store.close()


async def test_swapped_rows_are_named(db_path: Path, make_event: EventFactory) -> None:
    store = await _filled(db_path, make_event)
    try:
        _sql(
            db_path,
            "UPDATE agent_audit_log SET sequence = -1 WHERE sequence = 7",
            "UPDATE agent_audit_log SET sequence = 7 WHERE sequence = 8",
            "UPDATE agent_audit_log SET sequence = 8 WHERE sequence = -1",
        )
        result = await store.verify()
        assert (result.ok, result.first_broken_sequence) == (False, 7)
    finally:
        await store.close()


async def test_swapped_contents_are_named(db_path: Path, make_event: EventFactory) -> None:
    store = await _filled(db_path, make_event)
    try:
        columns = ", ".join(
            f"{name} = (SELECT {name} FROM agent_audit_log WHERE sequence = 3)"
            for name in EVENT_FIELDS
            if name != "event_id"
        )
        _sql(db_path, f"UPDATE agent_audit_log SET {columns} WHERE sequence = 2")
        result = await store.verify()
        assert (result.ok, result.first_broken_sequence) == (False, 2)
    finally:
        await store.close()


async def test_row_added_outside_the_store_is_named(
    db_path: Path, make_event: EventFactory
) -> None:
    store = await _filled(db_path, make_event, 3)
    try:
        with sqlite3.connect(db_path) as db:
            columns = [c[1] for c in db.execute("PRAGMA table_info(agent_audit_log)")]
            row = list(db.execute("SELECT * FROM agent_audit_log WHERE sequence = 3").fetchone())
            row[columns.index("sequence")] = 4
            row[columns.index("event_id")] = "forged"
            row[columns.index("prev_hash")] = row[columns.index("row_hash")]
            marks = ", ".join("?" for _ in row)
            db.execute(f"INSERT INTO agent_audit_log VALUES ({marks})", row)
        result = await store.verify()
        assert (result.ok, result.first_broken_sequence) == (False, 4)
    finally:
        await store.close()


async def test_retention_deletes_a_prefix_and_keeps_the_chain_verifiable(
    db_path: Path, make_event: EventFactory
) -> None:
    store = await _filled(db_path, make_event, 6)
    try:
        _sql(db_path, "UPDATE audit_chain SET head_stored_ns = 0")  # harmless to retention
        with sqlite3.connect(db_path) as db:
            stored_ns = db.execute("SELECT stored_ns FROM agent_audit_log LIMIT 1").fetchone()[0]
        # Nothing is older than a day yet.
        assert await store.apply_retention(1) == 0
        deleted = await store.apply_retention(1, now_ns=stored_ns + 2 * 86_400 * 10**9)
        assert deleted == 6
        await store.append([make_event(i) for i in range(7, 10)])
        result = await store.verify()
        assert (result.ok, result.rows_checked) == (True, 3)
        assert (result.anchor_sequence, result.head_sequence) == (6, 9)
        # Tampering with the anchor is still caught.
        _sql(db_path, f"UPDATE audit_chain SET anchor_hash = '{GENESIS}'")
        broken = await store.verify()
        assert (broken.ok, broken.first_broken_sequence) == (False, 7)
    finally:
        await store.close()


async def test_retention_only_deletes_rows_older_than_the_limit(
    db_path: Path, make_event: EventFactory
) -> None:
    day = 86_400 * 10**9
    now = [BASE_NS]
    store = await AuditStore.open(db_path, clock=lambda: now[0])
    try:
        await store.append([make_event(i) for i in range(1, 4)])
        now[0] = BASE_NS + 2 * day
        await store.append([make_event(i) for i in range(4, 8)])
        now[0] = BASE_NS + 2 * day + day // 2
        assert await store.apply_retention(1) == 3
        assert await store.apply_retention(1) == 0
        result = await store.verify()
        assert (result.ok, result.rows_checked) == (True, 4)
        now[0] = BASE_NS + 10 * day
        assert await store.apply_retention(1) == 4
        await store.append([make_event(8)])
        rows, _ = await store.query(QueryFilters())
        assert [row.sequence for row in rows] == [8]
        assert (await store.verify()).ok
    finally:
        await store.close()


def test_canonical_form_is_json_of_position_and_every_field(make_event: EventFactory) -> None:
    event = make_event(
        1, output_preview='quote " and \u00e9 and \n newline', decision_reason="a reason"
    )
    raw = canonical(5, BASE_NS, event)
    assert json.loads(raw) == [5, BASE_NS, *(getattr(event, f) for f in EVENT_FIELDS)]
    assert raw.decode() == _encode_json([5, BASE_NS, *(getattr(event, f) for f in EVENT_FIELDS)])
    values = [5, BASE_NS, *(getattr(event, f) for f in EVENT_FIELDS)]
    assert link_hash(GENESIS, 5, BASE_NS, event) == hash_values(GENESIS, values)
    assert hash_values(GENESIS, values) != hash_values("1" * 64, values)


def test_a_row_without_the_added_fields_hashes_as_in_the_first_release(
    make_event: EventFactory,
) -> None:
    """Rows stored before ``winning_rule``/``decision_reason`` existed still verify: with
    both empty the canonical form is the first release's (no trailing fields), and setting
    or clearing either changes the hash (so stripping them from a row is caught)."""
    event = make_event(1)
    assert ADDED_FIELDS == ("winning_rule", "decision_reason")
    first_release = [5, BASE_NS, *(getattr(event, f) for f in V1_EVENT_FIELDS)]
    assert canonical(5, BASE_NS, event).decode() == _encode_json(first_release)
    assert link_hash(GENESIS, 5, BASE_NS, event) == hash_values(GENESIS, first_release)
    typed = event._replace(winning_rule='{"pattern":"x"}')
    reasoned = event._replace(decision_reason="because")
    hashes = {link_hash(GENESIS, 5, BASE_NS, e) for e in (event, typed, reasoned)}
    assert len(hashes) == 3


# A row with every kind of field set (the typed decision included) and the same row as a
# producer from before ``winning_rule``/``decision_reason`` sent it. Their hashes were
# computed by the first code that stored the typed decision (8ea8ca0): the canonical form
# is frozen, since stored rows are verified against it forever.
_PINNED_ROW = AuditEventRow(
    "e1",
    "s1",
    3,
    "run_bash",
    "DENIED",
    12,
    'quote " \u00e9 \n \u2028',
    "lead",
    BASE_NS,
    "c1",
    "DENY",
    "run_bash(rm *)",
    "MANAGED",
    '[{"note":"x"}]',
    "0" * 32,
    "",
    "v9",
    '{"command":"rm -rf /"}',
    '{"effect":"RULE_EFFECT_DENY","pattern":"run_bash(rm *)","source":"RULE_SOURCE_MANAGED"}',
    "rm is denied",
)
_PINNED_HASH = "7dcd0b4e11963d8c907e7572b2e1dfe3c88bd96ce62ff431b22159a8ac276e60"
_PINNED_OLD_HASH = "370c308407cef5d3d95dddf99248d92869b164e4bdcf9a3789652e7264863d46"


def test_the_hashed_form_is_the_one_rows_were_stored_with() -> None:
    old = _PINNED_ROW._replace(winning_rule="", decision_reason="")
    for row, pinned in ((_PINNED_ROW, _PINNED_HASH), (old, _PINNED_OLD_HASH)):
        assert link_hash(GENESIS, 7, BASE_NS + 5, row) == pinned
        assert hash_values(GENESIS, (7, BASE_NS + 5, *row)) == pinned
    assert canonical(7, BASE_NS + 5, _PINNED_ROW) == (
        _encode_json([7, BASE_NS + 5, *_PINNED_ROW]).encode()
    )
    assert canonical(7, BASE_NS + 5, old) == (
        _encode_json([7, BASE_NS + 5, *old[: len(V1_EVENT_FIELDS)]]).encode()
    )


_text = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(max_examples=150)
@given(
    texts=st.lists(_text, min_size=17, max_size=17),
    numbers=st.lists(st.integers(0, 2**63 - 1), min_size=3, max_size=3),
    position=st.integers(1, 2**62),
    stored_ns=st.integers(0, 2**63 - 1),
    added=st.sampled_from(["none", "rule", "reason", "both"]),
)
def test_the_writers_hash_equals_the_verifiers(
    texts: list[str], numbers: list[int], position: int, stored_ns: int, added: str
) -> None:
    """``link_hash`` (what the writers compute from an event) and ``hash_values`` (what
    verification computes from a table row) agree on any content, with and without the
    added fields."""
    fields: list[object] = list(texts)
    for name, number in zip(("step", "elapsed_ms", "time_ns"), numbers, strict=True):
        fields.insert(EVENT_FIELDS.index(name), number)
    row = AuditEventRow(*fields)  # type: ignore[arg-type]
    row = row._replace(
        winning_rule=row.winning_rule if added in {"rule", "both"} else "",
        decision_reason=row.decision_reason if added in {"reason", "both"} else "",
    )
    values = (position, stored_ns, *row)
    assert link_hash("a" * 64, position, stored_ns, row) == hash_values("a" * 64, values)
    assert json.loads(canonical(position, stored_ns, row))[:2] == [position, stored_ns]
