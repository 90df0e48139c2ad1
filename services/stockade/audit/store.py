"""The audit store: ``agent_audit_log`` in SQLite through aiosqlite (AUD-1..AUD-5).

One writer connection appends batches in single transactions under a lock, so the hash
chain has one order; a second, query-only connection serves queries and the tail while
writes go on (WAL). Appends are idempotent by ``event_id``: duplicates, in the batch or
already stored, are skipped before hashing so the chain never has holes.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from operator import attrgetter
from typing import Any

import aiosqlite

from stockade.audit.chain import GENESIS, ChainChecker, hash_values
from stockade.audit.metrics import store_instruments
from stockade.audit.model import (
    EVENT_FIELDS,
    AppendResult,
    AuditEventRow,
    AuditStatus,
    QueryFilters,
    SessionMetrics,
    StoredRow,
    ToolMetrics,
    VerifyResult,
)
from stockade.audit.notify import HeadWatch
from stockade.audit.paging import clamp_page_size, decode_token, encode_token
from stockade.audit.schema import INSERT_ROW, SCHEMA, SELECT_ROW
from stockade.audit.validate import normalise_batch
from stockade.errors import InvalidArgument

_event_values = attrgetter(*EVENT_FIELDS)
_N_EVENT = len(EVENT_FIELDS)
# SQLite's default limit on bound parameters is far above this; it keeps statements small.
_ID_CHUNK = 500
_NS_PER_DAY = 86_400 * 10**9


def row_from_values(values: Sequence[Any]) -> StoredRow:
    """Build a ``StoredRow`` from a table row in ``ROW_COLUMNS`` order."""
    return StoredRow(
        event=AuditEventRow(*values[2 : 2 + _N_EVENT]),
        sequence=values[0],
        stored_ns=values[1],
        prev_hash=values[2 + _N_EVENT],
        row_hash=values[3 + _N_EVENT],
    )


async def _connect(
    path: str | os.PathLike[str], *, query_only: bool, synchronous: str
) -> aiosqlite.Connection:
    db = await aiosqlite.connect(
        os.fspath(path), isolation_level=None if query_only else "DEFERRED"
    )
    await db.execute("PRAGMA busy_timeout = 10000")
    await db.execute(f"PRAGMA synchronous = {synchronous}")
    if query_only:
        await db.execute("PRAGMA query_only = 1")
    return db


class AuditStore:
    """The audit log. Open with ``await AuditStore.open(path)``; close with ``close``."""

    def __init__(
        self,
        path: str,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        head: tuple[int, str, int],
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        """Use ``open`` instead; this wires already opened connections."""
        self._path = path
        self._writer = writer
        self._reader = reader
        self._head_sequence, self._head_hash, self._head_stored_ns = head
        self._lock = asyncio.Lock()
        self._watch = HeadWatch(self._head_sequence)
        self._instruments = store_instruments()
        self._synchronous = "NORMAL"
        self._clock = clock

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        clock: Callable[[], int] = time.time_ns,
    ) -> AuditStore:
        """Open (creating if needed) the log at ``path`` in WAL mode.

        ``synchronous=NORMAL`` survives a killed process (the failure AUD-4 is about);
        pass ``"FULL"`` to also survive power loss at some cost in throughput. ``clock``
        gives wall time in nanoseconds (arrival times and retention; tests pass a fake).
        """
        if synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise InvalidArgument(f"unknown synchronous mode {synchronous!r}")
        writer = await _connect(path, query_only=False, synchronous=synchronous)
        try:
            await writer.execute("PRAGMA journal_mode = WAL")
            await writer.executescript(SCHEMA)
            await writer.execute(
                "INSERT OR IGNORE INTO audit_chain VALUES (1, 0, ?, 0, ?, 0)", (GENESIS, GENESIS)
            )
            await writer.commit()
            async with writer.execute(
                "SELECT head_sequence, head_hash, head_stored_ns FROM audit_chain"
            ) as cursor:
                head = await cursor.fetchone()
            assert head is not None
            reader = await _connect(path, query_only=True, synchronous=synchronous)
        except BaseException:
            await writer.close()
            raise
        head_values = (int(head[0]), str(head[1]), int(head[2]))
        store = cls(os.fspath(path), writer, reader, head_values, clock)
        store._synchronous = synchronous
        return store

    async def close(self) -> None:
        """End every tail and close the connections (waits for an append in progress)."""
        self._watch.close()
        async with self._lock:
            await self._reader.close()
            await self._writer.close()

    async def __aenter__(self) -> AuditStore:
        """Use the store as an async context manager."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the store."""
        await self.close()

    @property
    def path(self) -> str:
        """The SQLite file."""
        return self._path

    @property
    def head_sequence(self) -> int:
        """Sequence of the last stored row (0 for an empty log)."""
        return self._head_sequence

    # -- writing -----------------------------------------------------------------------

    async def append(self, events: Sequence[AuditEventRow]) -> AppendResult:
        """Store a batch in one transaction; skip ids already stored; chain every row.

        Raises ``InvalidArgument`` (and stores nothing) if any event is malformed.
        """
        arrived = time.monotonic()
        if not events:
            return AppendResult(0, 0, self._head_sequence)
        rows = normalise_batch(events, self._clock())
        unique, duplicates = _dedupe(rows)
        # Shielded: once a batch reaches SQLite it must finish (or fail) as a whole and
        # leave the in-memory head right, even if the caller is cancelled meanwhile.
        accepted, skipped = await asyncio.shield(self._append_unique(unique))
        duplicates += skipped
        self._watch.publish(self._head_sequence)
        counter = self._instruments.events_ingested
        counter.add(accepted, {"outcome": "accepted"})
        if duplicates:
            counter.add(duplicates, {"outcome": "duplicate"})
        self._instruments.ingest_latency.record((time.monotonic() - arrived) * 1000.0)
        return AppendResult(accepted, duplicates, self._head_sequence)

    async def _append_unique(self, rows: list[AuditEventRow]) -> tuple[int, int]:
        """Insert rows whose ids are unique within the batch; return (accepted, skipped)."""
        self._instruments.queue_depth.add(1)
        waiting = True
        try:
            async with self._lock:
                self._instruments.queue_depth.add(-1)
                waiting = False
                try:
                    return await self._insert(rows), 0
                except sqlite3.IntegrityError:
                    # Some ids are already stored (a replay): filter them and retry once.
                    stored = await self._stored_ids([row.event_id for row in rows])
                    fresh = [row for row in rows if row.event_id not in stored]
                    return await self._insert(fresh), len(rows) - len(fresh)
        finally:
            if waiting:
                self._instruments.queue_depth.add(-1)

    async def _insert(self, rows: list[AuditEventRow]) -> int:
        """Chain and insert ``rows`` in one transaction; the caller holds the lock."""
        if not rows:
            return 0
        stored_ns = max(self._clock(), self._head_stored_ns)
        sequence, prev = self._head_sequence, self._head_hash
        params: list[tuple[Any, ...]] = []
        for row in rows:
            sequence += 1
            values = (sequence, stored_ns, *_event_values(row))
            digest = hash_values(prev, values)
            params.append((*values, prev, digest))
            prev = digest
        try:
            await self._writer.executemany(INSERT_ROW, params)
            await self._writer.execute(
                "UPDATE audit_chain SET head_sequence = ?, head_hash = ?, head_stored_ns = ?",
                (sequence, prev, stored_ns),
            )
            await self._writer.commit()
        except BaseException:
            await self._writer.rollback()
            raise
        self._head_sequence, self._head_hash, self._head_stored_ns = sequence, prev, stored_ns
        return len(rows)

    async def _stored_ids(self, ids: list[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start : start + _ID_CHUNK]
            marks = ", ".join("?" for _ in chunk)
            async with self._writer.execute(
                f"SELECT event_id FROM agent_audit_log WHERE event_id IN ({marks})", chunk
            ) as cursor:
                found.update(row[0] for row in await cursor.fetchall())
        return found

    async def apply_retention(self, days: float, *, now_ns: int | None = None) -> int:
        """Delete rows stored more than ``days`` ago; return how many were deleted.

        Rows are stored with non-decreasing ``stored_ns``, so old rows form a prefix of
        the chain; the hash of the last deleted row becomes the anchor, and the retained
        log still verifies from there.
        """
        if days < 0:
            raise InvalidArgument("retention days must not be negative", field="days")
        cutoff = (self._clock() if now_ns is None else now_ns) - int(days * _NS_PER_DAY)
        return await asyncio.shield(self._delete_before(cutoff))

    async def _delete_before(self, cutoff: int) -> int:
        async with self._lock:
            async with self._writer.execute(
                "SELECT MAX(sequence) FROM agent_audit_log WHERE stored_ns < ?", (cutoff,)
            ) as cursor:
                found = await cursor.fetchone()
            last = found[0] if found else None
            if last is None:
                return 0
            async with self._writer.execute(
                "SELECT row_hash FROM agent_audit_log WHERE sequence = ?", (last,)
            ) as cursor:
                anchor = await cursor.fetchone()
            assert anchor is not None
            try:
                deleted = await self._writer.execute(
                    "DELETE FROM agent_audit_log WHERE sequence <= ?", (last,)
                )
                await self._writer.execute(
                    "UPDATE audit_chain SET anchor_sequence = ?, anchor_hash = ?",
                    (last, anchor[0]),
                )
                await self._writer.commit()
            except BaseException:
                await self._writer.rollback()
                raise
            return int(deleted.rowcount)

    # -- reading -----------------------------------------------------------------------

    async def query(
        self, filters: QueryFilters, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[StoredRow], str]:
        """Rows matching ``filters``, newest (highest sequence) first, and the next token.

        Raises ``InvalidPageToken`` for a token that is malformed or from another query.
        """
        size = clamp_page_size(page_size)
        before = decode_token(page_token, filters)
        clauses: list[str] = []
        params: list[Any] = []
        for column in ("session_id", "tool_name", "status", "agent_name"):
            value = getattr(filters, column)
            if value:
                clauses.append(f"{column} = ?")
                params.append(value)
        if filters.start_ns is not None:
            clauses.append("time_ns >= ?")
            params.append(filters.start_ns)
        if filters.end_ns is not None:
            clauses.append("time_ns < ?")
            params.append(filters.end_ns)
        if before is not None:
            clauses.append("sequence < ?")
            params.append(before)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"{SELECT_ROW}{where} ORDER BY sequence DESC LIMIT ?"
        params.append(size + 1)
        async with self._reader.execute(sql, params) as cursor:
            found = list(await cursor.fetchall())
        rows = [row_from_values(values) for values in found[:size]]
        token = encode_token(rows[-1].sequence, filters) if len(found) > size else ""
        return rows, token

    async def rows_after(
        self, sequence: int, session_id: str = "", limit: int = 500
    ) -> list[StoredRow]:
        """Up to ``limit`` rows after ``sequence`` in log order, optionally of one session."""
        if session_id:
            sql = f"{SELECT_ROW} WHERE sequence > ? AND session_id = ? ORDER BY sequence LIMIT ?"
            params: tuple[Any, ...] = (sequence, session_id, limit)
        else:
            sql = f"{SELECT_ROW} WHERE sequence > ? ORDER BY sequence LIMIT ?"
            params = (sequence, limit)
        async with self._reader.execute(sql, params) as cursor:
            return [row_from_values(values) for values in await cursor.fetchall()]

    async def tail(
        self, session_id: str = "", *, after: int | None = None, batch: int = 500
    ) -> AsyncIterator[StoredRow]:
        """Yield rows as they are committed (from the current head, or after ``after``).

        Ends when the store closes. Memory is bounded by ``batch`` however fast rows come.
        """
        seen = self._watch.head if after is None else after
        while True:
            head = await self._watch.wait_past(seen)
            if head <= seen:
                return  # closed
            rows = await self.rows_after(seen, session_id, batch)
            for row in rows:
                yield row
            if len(rows) == batch:
                seen = rows[-1].sequence
            else:
                seen = max(head, rows[-1].sequence) if rows else head

    async def session_metrics(self, session_id: str) -> SessionMetrics:
        """Calls, errors, denials, per-tool counts and latency, and termination reason.

        A session with no rows yet gives zeros (the store cannot tell it from a new one).
        """
        if not session_id:
            raise InvalidArgument("session_id is required", field="session_id")
        sql = (
            "SELECT tool_name, COUNT(*), SUM(status = 'FAIL'), SUM(status = 'DENIED'),"
            " AVG(CASE WHEN status != 'DENIED' THEN elapsed_ms END), MAX(elapsed_ms)"
            " FROM agent_audit_log WHERE session_id = ? AND status != ?"
            " GROUP BY tool_name ORDER BY tool_name"
        )
        async with self._reader.execute(sql, (session_id, AuditStatus.SESSION_STOP.value)) as cur:
            found = await cur.fetchall()
        tools = tuple(
            ToolMetrics(
                tool_name=name,
                calls=int(calls),
                errors=int(errors or 0),
                denials=int(denials or 0),
                mean_elapsed_ms=float(mean or 0.0),
                max_elapsed_ms=int(largest or 0),
            )
            for name, calls, errors, denials, mean, largest in found
        )
        async with self._reader.execute(
            "SELECT termination_reason FROM agent_audit_log WHERE session_id = ? AND status = ?"
            " ORDER BY sequence DESC LIMIT 1",
            (session_id, AuditStatus.SESSION_STOP.value),
        ) as cursor:
            stop = await cursor.fetchone()
        return SessionMetrics(
            session_id=session_id,
            calls=sum(t.calls for t in tools),
            errors=sum(t.errors for t in tools),
            denials=sum(t.denials for t in tools),
            tools=tools,
            termination_reason=str(stop[0]) if stop else "",
        )

    async def verify(self, chunk: int = 2000) -> VerifyResult:
        """Check the whole retained chain and report the first broken link.

        Runs on its own connection inside one read transaction, so it sees a consistent
        snapshot while appends continue.
        """
        db = await _connect(self._path, query_only=True, synchronous=self._synchronous)
        try:
            await db.execute("BEGIN")
            async with db.execute(
                "SELECT anchor_sequence, anchor_hash, head_sequence, head_hash FROM audit_chain"
            ) as cursor:
                meta = await cursor.fetchone()
            if meta is None:
                return VerifyResult(False, 0, 1, "the chain's anchor record is missing")
            checker = ChainChecker(int(meta[0]), str(meta[1]))
            async with db.execute(f"{SELECT_ROW} ORDER BY sequence") as cursor:
                while batch := await cursor.fetchmany(chunk):
                    for values in batch:
                        event_part = values[: 2 + _N_EVENT]
                        if not checker.feed(event_part, values[-2], values[-1]):
                            return checker.finish(int(meta[2]), str(meta[3]))
            return checker.finish(int(meta[2]), str(meta[3]))
        finally:
            await db.close()


def _dedupe(rows: list[AuditEventRow]) -> tuple[list[AuditEventRow], int]:
    """Drop repeats of an event id within one batch (the first occurrence wins)."""
    seen: set[str] = set()
    unique: list[AuditEventRow] = []
    for row in rows:
        if row.event_id not in seen:
            seen.add(row.event_id)
            unique.append(row)
    return unique, len(rows) - len(unique)
