"""The audit log's single writer: one thread, one plain sqlite3 connection, the chain head.

Every append runs here as one unit: chain the rows (sequence, prev_hash, row_hash), insert
them and move the head in one transaction, or roll back and leave the head untouched.
Running the hashing in the same thread as the SQL keeps the chain strictly ordered with
no lock juggling, and lets the event loop parse and validate the next batch while this
one is written (aiosqlite cannot run a function in its thread, only statements, so a
batch would need several round trips and a lock held across them).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any

from stockade.audit.chain import GENESIS, link_hash
from stockade.audit.model import AuditEventRow
from stockade.audit.store.schema import ROW_COLUMNS, SCHEMA, add_missing_columns

# SQLite's default limit on bound parameters is far above this; it keeps statements small.
_ID_CHUNK = 500
#: Rows per INSERT statement (``VALUES (...), (...), ...``). executemany steps the
#: statement once per row and takes the GIL back after every step, so the writer thread
#: would queue for the GIL a thousand times per batch behind the event loop converting
#: the next one; one statement per 100 rows writes the batch in ten steps (and SQLite
#: runs less of its VM). 100 rows bind 2,500 parameters, under every SQLite's limit
#: since 3.32 (32,766); an older library's lower limit is read at open.
_ROWS_PER_INSERT = 100
_N_COLUMNS = len(ROW_COLUMNS)


@functools.lru_cache(maxsize=_ROWS_PER_INSERT)
def _insert_rows_sql(count: int) -> str:
    """``INSERT_ROW`` for ``count`` rows in one statement."""
    one = "(" + ", ".join("?" for _ in ROW_COLUMNS) + ")"
    return f"INSERT INTO agent_audit_log ({', '.join(ROW_COLUMNS)}) VALUES " + ", ".join(
        one for _ in range(count)
    )


class ChainWriter:
    """Appends chained rows and applies retention. Call every method from one thread."""

    def __init__(self, path: str, synchronous: str) -> None:
        """Open the file in WAL mode, create the schema, and load the chain head."""
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA busy_timeout = 10000")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {synchronous}")
            # Checkpoints normally run in the background (``Checkpointer``); this is the
            # backstop that bounds the WAL (about 40 MB) should they fall behind.
            db.execute("PRAGMA wal_autocheckpoint = 10000")
            db.executescript(SCHEMA)
            add_missing_columns(db)
            db.execute(
                "INSERT OR IGNORE INTO audit_chain VALUES (1, 0, ?, 0, ?, 0)", (GENESIS, GENESIS)
            )
            head = db.execute(
                "SELECT head_sequence, head_hash, head_stored_ns FROM audit_chain"
            ).fetchone()
        except BaseException:
            db.close()
            raise
        self._db = db
        self._rows_per_insert = max(
            1,
            min(_ROWS_PER_INSERT, db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // _N_COLUMNS),
        )
        self.commits = 0
        """Transactions committed by this writer (group commits show as fewer)."""
        self.head_sequence, self.head_hash, self.head_stored_ns = (
            int(head[0]),
            str(head[1]),
            int(head[2]),
        )

    def append(self, rows: Sequence[AuditEventRow], now_ns: int) -> tuple[int, int, int]:
        """Store one batch (ids unique within it); return (accepted, skipped, head)."""
        (result,), head = self.append_groups([rows], now_ns)
        return result[0], result[1], head

    def append_groups(
        self, groups: Sequence[Sequence[AuditEventRow]], now_ns: int
    ) -> tuple[list[tuple[int, int]], int]:
        """Store several batches, in order, in ONE transaction (group commit).

        An id seen earlier in the group or already stored is skipped. Returns
        (accepted, skipped) per batch and the new head sequence.
        """
        seen: set[str] = set()
        fresh_groups: list[list[AuditEventRow]] = []
        for rows in groups:
            fresh = [row for row in rows if row.event_id not in seen]
            seen.update(row.event_id for row in fresh)
            fresh_groups.append(fresh)
        try:
            self._insert([row for fresh in fresh_groups for row in fresh], now_ns)
        except sqlite3.IntegrityError:
            # Some ids are already stored (a replay): filter them out and insert the rest.
            stored = self._stored_ids(list(seen))
            fresh_groups = [
                [r for r in fresh if r.event_id not in stored] for fresh in fresh_groups
            ]
            self._insert([row for fresh in fresh_groups for row in fresh], now_ns)
        results = [
            (len(fresh), len(rows) - len(fresh))
            for fresh, rows in zip(fresh_groups, groups, strict=True)
        ]
        return results, self.head_sequence

    def _insert(self, rows: Sequence[AuditEventRow], now_ns: int) -> int:
        if not rows:
            return 0
        # Arrival times never go backwards, so old rows are always a prefix (retention).
        stored_ns = max(now_ns, self.head_stored_ns)
        sequence, prev = self.head_sequence, self.head_hash
        # Every row's values, flat, in ROW_COLUMNS order.
        params: list[Any] = []
        for row in rows:
            sequence += 1
            digest = link_hash(prev, sequence, stored_ns, row)
            params += (sequence, stored_ns, *row, prev, digest)
            prev = digest
        db = self._db
        per = self._rows_per_insert * _N_COLUMNS
        db.execute("BEGIN IMMEDIATE")
        try:
            for start in range(0, len(params), per):
                chunk = params[start : start + per]
                db.execute(_insert_rows_sql(len(chunk) // _N_COLUMNS), chunk)
            db.execute(
                "UPDATE audit_chain SET head_sequence = ?, head_hash = ?, head_stored_ns = ?",
                (sequence, prev, stored_ns),
            )
            db.execute("COMMIT")
        except BaseException:
            # SQLite rolls back by itself on some errors (SQLITE_FULL); a second ROLLBACK
            # would raise and hide the real error.
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self.head_sequence, self.head_hash, self.head_stored_ns = sequence, prev, stored_ns
        self.commits += 1
        return len(rows)

    def _stored_ids(self, ids: list[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start : start + _ID_CHUNK]
            marks = ", ".join("?" for _ in chunk)
            query = f"SELECT event_id FROM agent_audit_log WHERE event_id IN ({marks})"
            found.update(row[0] for row in self._db.execute(query, chunk))
        return found

    def delete_before(self, cutoff_ns: int) -> int:
        """Delete the prefix of rows stored before ``cutoff_ns``; re-anchor the chain."""
        last = self._db.execute(
            "SELECT MAX(sequence) FROM agent_audit_log WHERE stored_ns < ?", (cutoff_ns,)
        ).fetchone()[0]
        if last is None:
            return 0
        anchor = self._db.execute(
            "SELECT row_hash FROM agent_audit_log WHERE sequence = ?", (last,)
        ).fetchone()[0]
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            deleted = db.execute("DELETE FROM agent_audit_log WHERE sequence <= ?", (last,))
            db.execute(
                "UPDATE audit_chain SET anchor_sequence = ?, anchor_hash = ?", (last, anchor)
            )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return int(deleted.rowcount)

    def close(self) -> None:
        """Close the connection."""
        self._db.close()
