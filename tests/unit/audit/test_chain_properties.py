"""Property: whatever single edit, deletion or reordering is made to a stored log with
sqlite3 directly, verification fails and names exactly the first broken row."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.audit.model import EVENT_FIELDS
from stockade.audit.store.writer import ChainWriter
from stockade.audit.verify import verify_file

from .conftest import build_event

_COLUMNS = ("stored_ns", *EVENT_FIELDS, "prev_hash", "row_hash")
_INTEGER = {"stored_ns", "step", "elapsed_ms", "time_ns"}


def _log(directory: Path, rows: int) -> Path:
    path = directory / "audit.db"
    writer = ChainWriter(str(path), "NORMAL")
    # Several batches, so links cross transaction boundaries too.
    for start in range(0, rows, 7):
        writer.append([build_event(i) for i in range(start, min(start + 7, rows))], 10**18)
    writer.close()
    return path


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(min_value=2, max_value=25),
    data=st.data(),
)
def test_any_single_tampering_is_named(rows: int, data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(["edit", "delete", "swap_rows", "swap_content"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = _log(Path(tmp), rows)
        assert verify_file(path).ok
        with sqlite3.connect(path) as db:
            if kind == "edit":
                target = data.draw(st.integers(1, rows))
                column = data.draw(st.sampled_from(_COLUMNS))
                value = 123456789 if column in _INTEGER else "tampered"
                db.execute(
                    f"UPDATE agent_audit_log SET {column} = ? WHERE sequence = ?", (value, target)
                )
                expected = target
            elif kind == "delete":
                target = data.draw(st.integers(1, rows))
                db.execute("DELETE FROM agent_audit_log WHERE sequence = ?", (target,))
                # A missing middle row breaks the next link; a missing last row, the head.
                expected = target + 1 if target < rows else rows
            elif kind == "swap_rows":
                target = data.draw(st.integers(1, rows - 1))
                db.execute("UPDATE agent_audit_log SET sequence = -1 WHERE sequence = ?", (target,))
                db.execute(
                    "UPDATE agent_audit_log SET sequence = ? WHERE sequence = ?",
                    (target, target + 1),
                )
                db.execute(
                    "UPDATE agent_audit_log SET sequence = ? WHERE sequence = -1", (target + 1,)
                )
                expected = target
            else:
                target = data.draw(st.integers(1, rows - 1))
                columns = [c for c in _COLUMNS if c != "event_id"]
                copy = ", ".join(
                    f"{c} = (SELECT {c} FROM agent_audit_log WHERE sequence = {target + 1})"
                    for c in columns
                )
                db.execute(f"UPDATE agent_audit_log SET {copy} WHERE sequence = {target}")
                expected = target
        result = verify_file(path)
        assert not result.ok
        assert result.first_broken_sequence == expected, (kind, result)
