"""The audit store: ``agent_audit_log`` in SQLite through aiosqlite (AUD-1..AUD-5).

Appends are validated on the event loop, then queued for one writer thread
(``ChainWriter``). A committer task hands everything queued to the writer at once, which
chains and inserts it in a single transaction (group commit: concurrent ``Record`` calls
and streams share commits), so the chain has one order and the loop prepares the next
batches while these are written. At most ``max_pending_batches`` appends wait for the
writer; further appends wait for a slot, which pushes back on producers instead of
queueing without bound. A query-only
aiosqlite connection serves queries and the tail while writes go on (WAL). Appends are
idempotent by ``event_id``: duplicates, in the batch or already stored, are skipped
before hashing so the chain never has holes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiosqlite
from opentelemetry import metrics

from stockade.audit.metrics import store_instruments
from stockade.audit.model import (
    EVENT_FIELDS,
    SQLITE_CHAIN,
    AppendResult,
    AuditEventRow,
    VerifyResult,
)
from stockade.audit.notify import HeadWatch
from stockade.audit.store.checkpoint import Checkpointer
from stockade.audit.store.reads import StoreReads, record_ingest
from stockade.audit.store.schema import SELECT_ROW
from stockade.audit.store.writer import ChainWriter
from stockade.audit.validate import dedupe, normalise_batch
from stockade.audit.verify import verify_file
from stockade.errors import DependencyUnavailable, InvalidArgument, ResourceExhausted

log = logging.getLogger("stockade.audit.store")

_N_EVENT = len(EVENT_FIELDS)
# Rows per group commit: big enough to amortise a commit, small enough to keep the
# writer's transaction (and a tail's wait for it) short.
_MAX_GROUP_ROWS = 10_000
_NS_PER_DAY = 86_400 * 10**9


async def _connect(path: str | os.PathLike[str], *, synchronous: str) -> aiosqlite.Connection:
    """A query-only connection (autocommit, so every read sees the latest commit)."""
    db = await aiosqlite.connect(os.fspath(path), isolation_level=None)
    await db.execute("PRAGMA busy_timeout = 10000")
    await db.execute(f"PRAGMA synchronous = {synchronous}")
    await db.execute("PRAGMA query_only = 1")
    return db


class AuditStore(StoreReads):
    """The audit log. Open with ``await AuditStore.open(path)``; close with ``close``.

    Queries, the tail and metrics are ``StoreReads``'s (the SQL both backends share).
    """

    _select_row = SELECT_ROW

    def __init__(
        self,
        path: str,
        writer: ChainWriter,
        executor: ThreadPoolExecutor,
        reader: aiosqlite.Connection,
        *,
        clock: Callable[[], int] = time.time_ns,
        max_pending_batches: int = 32,
        meter: metrics.Meter | None = None,
    ) -> None:
        """Use ``open`` instead; this wires an opened writer (on ``executor``) and reader."""
        self._path = path
        self._writer = writer
        self._executor = executor
        self._reader = reader
        self._head_sequence = writer.head_sequence
        self._slots = asyncio.Semaphore(max_pending_batches)
        self._max_pending = max_pending_batches
        self._watch = HeadWatch(self._head_sequence)
        self._instruments = store_instruments(meter)
        self._clock = clock
        self._closed = False
        self._checkpointer: Checkpointer | None = None
        self._queue: list[tuple[list[AuditEventRow], asyncio.Future[tuple[int, int]]]] = []
        self._queued = asyncio.Event()
        self._committer = asyncio.get_running_loop().create_task(
            self._commit_loop(), name="audit-committer"
        )

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        clock: Callable[[], int] = time.time_ns,
        max_pending_batches: int = 32,
        meter: metrics.Meter | None = None,
    ) -> AuditStore:
        """Open (creating if needed) the log at ``path`` in WAL mode.

        ``synchronous=NORMAL`` survives a killed process (the failure AUD-4 is about);
        pass ``"FULL"`` to also survive power loss at some cost in throughput. ``clock``
        gives wall time in nanoseconds (arrival times and retention; tests pass a fake);
        ``meter`` receives the OpenTelemetry instruments (default: the global provider).
        """
        if synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise InvalidArgument(f"unknown synchronous mode {synchronous!r}")
        if max_pending_batches < 1:
            raise InvalidArgument("max_pending_batches must be at least 1")
        file = os.fspath(path)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-writer")
        loop = asyncio.get_running_loop()
        try:
            writer = await loop.run_in_executor(executor, ChainWriter, file, synchronous)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        try:
            reader = await _connect(file, synchronous=synchronous)
        except BaseException:
            await loop.run_in_executor(executor, writer.close)
            executor.shutdown(wait=False)
            raise
        store = cls(
            file,
            writer,
            executor,
            reader,
            clock=clock,
            max_pending_batches=max_pending_batches,
            meter=meter,
        )
        try:
            store._checkpointer = await Checkpointer.start(file, store._watch)
        except BaseException:
            await store.close()
            raise
        return store

    async def close(self) -> None:
        """End every tail, let queued writes finish, and close the connections."""
        if self._closed:
            return
        self._closed = True
        self._watch.close()
        # Wait for the batches already handed over; later ones see _closed and are refused.
        for _ in range(self._max_pending):
            await self._slots.acquire()
        for _ in range(self._max_pending):
            self._slots.release()  # waiters queued behind us now wake and are refused
        self._queued.set()  # the committer sees the empty queue and _closed, and ends
        await self._committer
        if self._checkpointer is not None:
            await self._checkpointer.close()
        # The writer thread runs jobs in order: closing after the queued appends.
        await asyncio.get_running_loop().run_in_executor(self._executor, self._writer.close)
        self._executor.shutdown(wait=True)
        await self._reader.close()

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

        Raises ``InvalidArgument`` (and stores nothing) if any event is malformed. Once
        a batch is handed to the writer it is written whole even if the caller is
        cancelled meanwhile.
        """
        arrived = time.monotonic()
        if self._closed:
            raise DependencyUnavailable("the audit store is closing")
        if not events:
            return AppendResult(0, 0, self._head_sequence)
        rows = normalise_batch(events, self._clock())
        unique, duplicates = dedupe(rows)
        accepted, skipped = await asyncio.shield(self._write(unique))
        duplicates += skipped
        record_ingest(self._instruments, accepted, duplicates, arrived)
        return AppendResult(accepted, duplicates, self._head_sequence)

    async def _write(self, rows: list[AuditEventRow]) -> tuple[int, int]:
        """Queue rows for the next group commit once a slot is free; wait for it."""
        self._instruments.queue_depth.add(1)
        try:
            async with self._slots:
                if self._closed:
                    raise DependencyUnavailable("the audit store is closing")
                done: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
                self._queue.append((rows, done))
                self._queued.set()
                return await done
        finally:
            self._instruments.queue_depth.add(-1)

    async def _commit_loop(self) -> None:
        """Write everything queued as one group, again and again, until closed."""
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                if self._closed:
                    return
                self._queued.clear()
                await self._queued.wait()
            group = self._take_group()
            try:
                results, head = await loop.run_in_executor(
                    self._executor,
                    self._writer.append_groups,
                    [rows for rows, _ in group],
                    self._clock(),
                )
            except Exception as err:  # nothing of the group was stored; each caller hears it
                failure = _write_error(err)
                for _, done in group:
                    if not done.done():
                        done.set_exception(failure)
                continue
            if head > self._head_sequence:
                self._head_sequence = head
                self._watch.publish(head)
            for (_, done), result in zip(group, results, strict=True):
                if not done.done():
                    done.set_result(result)

    def _take_group(self) -> list[tuple[list[AuditEventRow], asyncio.Future[tuple[int, int]]]]:
        """The oldest queued appends, up to ``_MAX_GROUP_ROWS`` rows (at least one)."""
        count, rows = 0, 0
        for queued, _ in self._queue:
            if count and rows + len(queued) > _MAX_GROUP_ROWS:
                break
            count, rows = count + 1, rows + len(queued)
        group, self._queue = self._queue[:count], self._queue[count:]
        return group

    async def apply_retention(self, days: float, *, now_ns: int | None = None) -> int:
        """Delete rows stored more than ``days`` ago; return how many were deleted.

        Rows are stored with non-decreasing ``stored_ns``, so old rows form a prefix of
        the chain; the hash of the last deleted row becomes the anchor, and the retained
        log still verifies from there.
        """
        if days < 0:
            raise InvalidArgument("retention days must not be negative", field="days")
        cutoff = (self._clock() if now_ns is None else now_ns) - int(days * _NS_PER_DAY)
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._executor, self._writer.delete_before, cutoff)
        return await asyncio.shield(job)

    # -- reading -----------------------------------------------------------------------

    def _mark(self, index: int) -> str:
        return "?"

    async def _fetch(self, sql: str, *params: Any) -> list[Any]:
        async with self._reader.execute(sql, params) as cursor:
            return list(await cursor.fetchall())

    async def chain_head(self) -> tuple[str, int, str]:
        """(chain id, head position, head hash): what ``heads`` signs. SQLite has one
        chain, named ``"sqlite"``."""
        async with self._reader.execute(
            "SELECT head_sequence, head_hash FROM audit_chain"
        ) as cursor:
            found = await cursor.fetchone()
        assert found is not None  # created with the schema
        return SQLITE_CHAIN, int(found[0]), str(found[1])

    async def row_hash_at(self, chain_id: str, position: int) -> str | None:
        """The stored hash at ``position`` of the chain; ``""`` when retention deleted
        it, None when the row is not stored."""
        if chain_id != SQLITE_CHAIN:
            return None
        async with self._reader.execute(
            "SELECT row_hash FROM agent_audit_log WHERE sequence = ?", (position,)
        ) as cursor:
            found = await cursor.fetchone()
        if found is not None:
            return str(found[0])
        async with self._reader.execute("SELECT anchor_sequence FROM audit_chain") as cursor:
            anchor = await cursor.fetchone()
        return "" if anchor is not None and position <= int(anchor[0]) else None

    async def verify(self) -> VerifyResult:
        """Check the whole retained chain and report the first broken link.

        Runs in a worker thread on its own connection inside one read transaction, so
        it sees a consistent snapshot while appends continue.
        """
        return await asyncio.to_thread(verify_file, self._path)


def _write_error(err: Exception) -> Exception:
    """What a failed group commit tells its callers: a full disk is RESOURCE_EXHAUSTED
    and any other SQLite failure UNAVAILABLE (both retried by producers; nothing of the
    group was stored), never a bare INTERNAL."""
    if not isinstance(err, sqlite3.Error):
        return err
    if getattr(err, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "full" in str(err):
        log.error("audit store: the disk is full; appends are refused until space returns")
        return ResourceExhausted(
            "the audit store's disk is full: nothing of the batch was stored; retry later",
            limit="disk",
        )
    log.error("audit store: write failed: %s", err)
    return DependencyUnavailable(f"the audit store could not write: {err}")
