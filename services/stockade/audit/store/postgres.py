"""The audit store on PostgreSQL, for several audit replicas on one database (STORE-1, -4).

The table is the SQLite one plus two columns: ``chain_id`` (the writing replica) and
``chain_seq`` (the row's place in that replica's hash chain). Each replica appends to its
own chain, so replicas never wait for each other's hashes; ``verify`` checks every chain
and names the chain and row that broke.

Why appends still take one short transaction-scoped lock shared by all replicas
(``pg_advisory_xact_lock``): it makes the global ``sequence`` (what paging and the live
tail walk) grow in commit order, so a tail reading ``sequence > seen`` never skips a row
that committed late, and it makes "skip the ids already stored" exact across replicas
(the check and the insert are one critical section, so a chain never gets a hole from a
row that lost an ``ON CONFLICT`` race). A batch holds the lock for one ``COPY``, so the
replicas' throughput is that of batched inserts, not of one row per transaction.

Appends share transactions (group commit): ``append`` validates its batch on the event
loop and queues it (at most ``max_pending_batches`` wait; further callers wait for a
slot, which pushes back on producers); one committer task writes everything queued, up
to ``_MAX_GROUP_ROWS`` rows, in one transaction, and answers each caller only after that
transaction committed. Concurrent ``Record`` calls and streams therefore cost one lock,
one ``COPY`` and one commit per group instead of one each, and an acknowledged event is
in the database. A failed group fails its own callers only; when the failure may be one
batch's (an error of the data, not of the connection), every batch of the group is
retried alone, so only the batch at fault hears it.

A replica owns its chain through a session-level advisory lock taken at ``open``: a
second process started with the same replica id is refused instead of forking the
chain. Schema migrations are versioned and applied under another advisory lock, so
replicas starting together apply each migration once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
from opentelemetry import metrics

from stockade.audit.chain import GENESIS, ChainChecker, link_hash
from stockade.audit.metrics import store_instruments
from stockade.audit.model import (
    EVENT_FIELDS,
    V1_EVENT_FIELDS,
    AppendResult,
    AuditEventRow,
    ChainBreak,
    ChainVerification,
    VerifyResult,
)
from stockade.audit.notify import HeadWatch
from stockade.audit.store.reads import StoreReads, marker_kind, record_ingest
from stockade.audit.validate import dedupe, normalise_batch
from stockade.db.postgres import CONNECTION_ERRORS, connect, open_pool
from stockade.db.postgres import migrate as db_migrate
from stockade.errors import DependencyUnavailable, InvalidArgument

# The logger keeps its name from before the store package (log filters go on working).
log = logging.getLogger("stockade.audit.pg_store")

_INTEGER_FIELDS = frozenset({"step", "elapsed_ms", "time_ns"})
_N_EVENT = len(EVENT_FIELDS)
_NS_PER_DAY = 86_400 * 10**9
#: Advisory lock keys (one namespace, arbitrary but fixed): schema migrations, appends,
#: and (with the chain id's hash) chain ownership.
_MIGRATION_LOCK = 0x53544B_0001
_APPEND_LOCK = 0x53544B_0002
_CHAIN_LOCK_CLASS = 0x53544B03
#: LISTEN/NOTIFY channel on which every commit announces the new head sequence.
CHANNEL = "stockade_audit_head"
#: A replica id is a label in logs and verify output: short and printable.
MAX_CHAIN_ID = 128
# Rows per group commit: big enough to amortise a transaction, small enough to keep the
# append lock (which every replica takes) and a tail's wait for the commit short.
_MAX_GROUP_ROWS = 10_000

_Pending = tuple[list[AuditEventRow], "asyncio.Future[int]"]
_RECONNECTING = (
    "the audit store lost its database connection and is reconnecting;"
    " nothing of the batch was stored"
)

# Migration 1's columns: the event fields of the first release (never edited, see below).
_EVENT_COLUMNS = ",\n  ".join(
    f"{name} {'BIGINT' if name in _INTEGER_FIELDS else 'TEXT'} NOT NULL"
    + (" UNIQUE" if name == "event_id" else "")
    for name in V1_EVENT_FIELDS
)

#: Versioned migrations, applied in order, each in its own transaction. Append only: a
#: released migration is never edited (replicas already ran it).
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        f"""
CREATE TABLE agent_audit_log (
  sequence BIGINT PRIMARY KEY,
  stored_ns BIGINT NOT NULL,
  {_EVENT_COLUMNS},
  chain_id TEXT NOT NULL,
  chain_seq BIGINT NOT NULL,
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL,
  UNIQUE (chain_id, chain_seq)
);
CREATE INDEX idx_audit_session ON agent_audit_log(session_id, sequence);
CREATE INDEX idx_audit_tool ON agent_audit_log(tool_name, sequence);
CREATE INDEX idx_audit_status ON agent_audit_log(status, sequence);
CREATE INDEX idx_audit_agent ON agent_audit_log(agent_name, sequence);
CREATE INDEX idx_audit_time ON agent_audit_log(time_ns);
CREATE INDEX idx_audit_stored ON agent_audit_log(chain_id, stored_ns);
CREATE TABLE audit_chain (
  chain_id TEXT PRIMARY KEY,
  anchor_sequence BIGINT NOT NULL,
  anchor_hash TEXT NOT NULL,
  head_sequence BIGINT NOT NULL,
  head_hash TEXT NOT NULL,
  head_stored_ns BIGINT NOT NULL
);
CREATE TABLE audit_log_head (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  sequence BIGINT NOT NULL
);
INSERT INTO audit_log_head VALUES (1, 0);
""",
    ),
    (
        # The typed decision (issue #13): the full winning rule and the decision's reason.
        # Existing rows get "", which the hash chain leaves out, so they still verify.
        2,
        """
ALTER TABLE agent_audit_log
  ADD COLUMN winning_rule TEXT NOT NULL DEFAULT '',
  ADD COLUMN decision_reason TEXT NOT NULL DEFAULT '';
""",
    ),
)

#: Columns in the order rows are copied in and read out (the SQLite order, then the chain).
COPY_COLUMNS: tuple[str, ...] = (
    "sequence",
    "stored_ns",
    *EVENT_FIELDS,
    "chain_id",
    "chain_seq",
    "prev_hash",
    "row_hash",
)
_SELECT_ROW = f"SELECT {', '.join(COPY_COLUMNS)} FROM agent_audit_log"
_ARGUMENTS = 2 + EVENT_FIELDS.index("arguments_json")
_CONFLICTS = 2 + EVENT_FIELDS.index("conflict_log")

_CONNECTION_ERRORS = CONNECTION_ERRORS
# What a reconnection attempt may meet before it holds the chain again: retried.
_RECONNECT_ERRORS: tuple[type[Exception], ...] = (
    DependencyUnavailable,
    *CONNECTION_ERRORS,
    asyncpg.PostgresError,
)


def _fail(group: list[_Pending], err: Exception) -> None:
    """Give ``err`` to every caller of ``group`` still waiting."""
    for _, done in group:
        if not done.done():
            done.set_exception(err)


def _nul_refusal(rows: list[AuditEventRow]) -> InvalidArgument | None:
    """INVALID_ARGUMENT naming the first text field that holds U+0000, which PostgreSQL
    text cannot hold (SQLite stores it); None when no field does."""
    for index, row in enumerate(rows):
        for name, value in zip(EVENT_FIELDS, row, strict=True):
            if isinstance(value, str) and "\x00" in value:
                return InvalidArgument(
                    f"event {index} ({row.event_id!r}): {name} holds a NUL character,"
                    " which the PostgreSQL audit store cannot hold",
                    field=name,
                    index=str(index),
                    event_id=row.event_id.replace("\x00", "\\x00"),
                )
    return None


def check_chain_id(chain_id: str) -> str:
    """Refuse an empty, overlong or non-printable replica id (it names a chain)."""
    if not chain_id or len(chain_id) > MAX_CHAIN_ID or not chain_id.isprintable():
        raise InvalidArgument(
            f"the replica id must be 1..{MAX_CHAIN_ID} printable characters", field="replica_id"
        )
    return chain_id


async def migrate(conn: asyncpg.Connection) -> int:
    """Apply the missing audit migrations under the migration lock; return the schema
    version. Two replicas starting together serialise here: the second finds the work done.
    """
    return await db_migrate(
        conn, MIGRATIONS, version_table="audit_schema_version", lock_key=_MIGRATION_LOCK
    )


async def _take_chain(conn: asyncpg.Connection, chain_id: str, wait_s: float) -> bool:
    """Take the session lock that makes this connection the chain's only writer."""
    deadline = time.monotonic() + wait_s
    while True:
        if await conn.fetchval(
            "SELECT pg_try_advisory_lock($1, hashtext($2))", _CHAIN_LOCK_CLASS, chain_id
        ):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.2)


class PostgresAuditStore(StoreReads):
    """The audit log on PostgreSQL; one instance per replica, writing chain ``chain_id``.

    Open with ``await PostgresAuditStore.open(dsn, chain_id=...)``; close with ``close``.
    Queries, the tail and metrics are ``StoreReads``'s (the SQL both backends share).
    """

    _select_row = _SELECT_ROW

    def __init__(
        self,
        writer: asyncpg.Connection,
        pool: asyncpg.Pool,
        chain_id: str,
        chain_head: tuple[int, str, int],
        log_head: int,
        *,
        clock: Callable[[], int],
        max_pending_batches: int,
        meter: metrics.Meter | None,
        dsn: str = "",
        chain_lock_wait_s: float = 30.0,
        on_connection_change: Callable[[bool], None] | None = None,
    ) -> None:
        """Use ``open``: this wires an opened writer connection and reader pool."""
        self._dsn = dsn
        self._chain_lock_wait_s = chain_lock_wait_s
        self._on_connection_change = on_connection_change
        self._connected = True
        self._reconnecting: asyncio.Task[None] | None = None
        self._writer = writer
        self._pool = pool
        self._chain_id = chain_id
        self._chain_seq, self._chain_hash, self._chain_stored_ns = chain_head
        self._head_sequence = log_head
        self._watch = HeadWatch(log_head)
        self._write_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(max_pending_batches)
        self._max_pending = max_pending_batches
        self._instruments = store_instruments(meter)
        self._clock = clock
        self._closed = False
        self.commits = 0
        """Transactions committed by this store (group commits show as fewer)."""
        self._queue: list[_Pending] = []
        self._queued = asyncio.Event()
        self._committer = asyncio.get_running_loop().create_task(
            self._commit_loop(), name="audit-pg-committer"
        )
        writer.add_termination_listener(self._writer_lost)

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        chain_id: str,
        clock: Callable[[], int] = time.time_ns,
        max_pending_batches: int = 32,
        pool_size: int = 4,
        chain_lock_wait_s: float = 30.0,
        meter: metrics.Meter | None = None,
        on_connection_change: Callable[[bool], None] | None = None,
    ) -> PostgresAuditStore:
        """Connect, migrate, take ownership of chain ``chain_id`` and listen for commits.

        A replica restarted right after it was killed may find its old session still
        holding the chain until the server notices the dead connection: ``open`` waits up
        to ``chain_lock_wait_s`` for the chain to be free before refusing.

        If the writer connection is lost later, the store reconnects by itself (taking
        the chain again and reloading its head from the database); meanwhile appends fail
        UNAVAILABLE and ``on_connection_change(False)`` is called, then ``(True)`` once
        it writes again (the app turns that into the gRPC health status).

        Raises ``DependencyUnavailable`` when the server cannot be reached and
        ``InvalidArgument`` when another live process already writes this chain.
        """
        check_chain_id(chain_id)
        if max_pending_batches < 1:
            raise InvalidArgument("max_pending_batches must be at least 1")
        writer = await connect(dsn, what="audit")
        try:
            await migrate(writer)
            owned = await _take_chain(writer, chain_id, chain_lock_wait_s)
            if not owned:
                raise InvalidArgument(
                    f"another live audit replica already writes chain {chain_id!r}:"
                    " give each replica its own STOCKADE_AUDIT_REPLICA_ID",
                    field="replica_id",
                )
            await writer.execute(
                "INSERT INTO audit_chain VALUES ($1, 0, $2, 0, $2, 0)"
                " ON CONFLICT (chain_id) DO NOTHING",
                chain_id,
                GENESIS,
            )
            head = await writer.fetchrow(
                "SELECT head_sequence, head_hash, head_stored_ns FROM audit_chain"
                " WHERE chain_id = $1",
                chain_id,
            )
            log_head = int(await writer.fetchval("SELECT sequence FROM audit_log_head"))
            pool = await open_pool(dsn, what="audit", min_size=1, max_size=pool_size)
        except BaseException:
            await writer.close()
            raise
        assert head is not None  # inserted just above
        store = cls(
            writer,
            pool,
            chain_id,
            (int(head[0]), str(head[1]), int(head[2])),
            log_head,
            clock=clock,
            max_pending_batches=max_pending_batches,
            meter=meter,
            dsn=dsn,
            chain_lock_wait_s=chain_lock_wait_s,
            on_connection_change=on_connection_change,
        )
        try:
            await writer.add_listener(CHANNEL, store._on_notify)
        except BaseException:
            await store.close()
            raise
        return store

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        """Another replica (or this one) committed: wake the tails."""
        try:
            self._watch.publish(int(str(payload)))
        except ValueError:
            log.warning("audit store: ignored a malformed head notification")

    def _writer_lost(self, conn: object) -> None:
        """The writer connection died: refuse appends (UNAVAILABLE: producers keep their
        events and send them again) and reconnect in the background."""
        if self._closed or conn is not self._writer:
            return
        log.error("audit store: lost the database connection; reconnecting")
        self._set_connected(False)
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = asyncio.get_running_loop().create_task(
                self._reconnect(), name="audit-pg-reconnect"
            )

    def _set_connected(self, connected: bool) -> None:
        if connected == self._connected:
            return
        self._connected = connected
        if self._on_connection_change is not None:
            try:
                self._on_connection_change(connected)
            except Exception:  # a failing observer must not stop the reconnection
                log.exception("audit store: the connection-change callback failed")

    @property
    def connected(self) -> bool:
        """True while the writer connection is up (appends can be stored)."""
        return self._connected

    async def _reconnect(self, first_delay_s: float = 0.1, max_delay_s: float = 5.0) -> None:
        """Connect again until it works or the store closes: take the chain's lock (the old
        session's went with it), reload the chain head *from the database* (a batch whose
        commit answer was lost may have been stored; its retry is then a duplicate), and
        listen for commits again."""
        delay = first_delay_s
        while not self._closed:
            try:
                writer = await connect(self._dsn, what="audit")
            except DependencyUnavailable as err:
                log.warning("audit store: reconnect failed (%s); retrying in %.1f s", err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, max_delay_s)
                continue
            try:
                if not await _take_chain(writer, self._chain_id, self._chain_lock_wait_s):
                    raise DependencyUnavailable(
                        f"chain {self._chain_id!r} is held by another live session"
                    )
                head = await writer.fetchrow(
                    "SELECT head_sequence, head_hash, head_stored_ns FROM audit_chain"
                    " WHERE chain_id = $1",
                    self._chain_id,
                )
                log_head = int(await writer.fetchval("SELECT sequence FROM audit_log_head"))
                await writer.add_listener(CHANNEL, self._on_notify)
            except _RECONNECT_ERRORS as err:
                await writer.close()
                log.warning("audit store: reconnect failed (%s); retrying in %.1f s", err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, max_delay_s)
                continue
            except BaseException:
                await writer.close()
                raise
            assert head is not None  # the chain's row exists since open
            async with self._write_lock:
                if self._closed:
                    await writer.close()
                    return
                self._writer = writer
                self._chain_seq, self._chain_hash = int(head[0]), str(head[1])
                self._chain_stored_ns = int(head[2])
                self._head_sequence = max(self._head_sequence, log_head)
                writer.add_termination_listener(self._writer_lost)
            self._watch.publish(log_head)
            self._set_connected(True)
            log.info("audit store: reconnected; chain %r continues at %d", self._chain_id,
                     self._chain_seq)  # fmt: skip
            return

    async def close(self) -> None:
        """End the tails, let the queued writes finish, close the connections."""
        if self._closed:
            return
        self._closed = True
        self._watch.close()
        if self._reconnecting is not None and not self._reconnecting.done():
            self._reconnecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnecting
        # Batches already queued are written (or fail: the store is not reconnecting any
        # more); later appends see _closed and are refused.
        self._queued.set()
        await self._committer
        async with self._write_lock:
            pass
        if not self._writer.is_closed():
            await self._writer.close()
        await self._pool.close()

    @property
    def chain_id(self) -> str:
        """The chain this replica appends to."""
        return self._chain_id

    @property
    def head_sequence(self) -> int:
        """The last global sequence this replica saw committed (its own or another's)."""
        return max(self._head_sequence, self._watch.head)

    # -- writing -----------------------------------------------------------------------

    async def append(self, events: Sequence[AuditEventRow]) -> AppendResult:
        """Store a batch; skip ids stored by any replica; chain the rest. Returns once the
        transaction holding the batch (shared with other callers' batches) committed.

        Raises ``InvalidArgument`` (nothing stored) for a malformed event and
        ``DependencyUnavailable`` when the database cannot be written. A batch handed to
        the committer is written whole even if the caller is cancelled meanwhile.
        """
        arrived = time.monotonic()
        if self._closed:
            raise DependencyUnavailable("the audit store is closing")
        if not events:
            return AppendResult(0, 0, self.head_sequence)
        rows = normalise_batch(events, self._clock())
        unique, _ = dedupe(rows)
        accepted = await asyncio.shield(self._write(unique))
        duplicates = len(rows) - accepted
        record_ingest(self._instruments, accepted, duplicates, arrived)
        return AppendResult(accepted, duplicates, self.head_sequence)

    async def _write(self, rows: list[AuditEventRow]) -> int:
        """Queue rows for the next group commit once a slot is free; wait for it."""
        self._instruments.queue_depth.add(1)
        try:
            async with self._slots:
                self._refuse_if_unwritable()
                done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
                self._queue.append((rows, done))
                self._queued.set()
                return await done
        finally:
            self._instruments.queue_depth.add(-1)

    def _refuse_if_unwritable(self) -> None:
        if self._closed:
            raise DependencyUnavailable("the audit store is closing")
        if not self._connected:
            raise DependencyUnavailable(_RECONNECTING)

    async def _commit_loop(self) -> None:
        """Write everything queued as one group, again and again, until closed and empty."""
        while True:
            while not self._queue:
                if self._closed:
                    return
                self._queued.clear()
                await self._queued.wait()
            await self._commit(self._take_group())

    def _take_group(self) -> list[_Pending]:
        """The oldest queued batches, up to ``_MAX_GROUP_ROWS`` rows (at least one)."""
        count, rows = 0, 0
        for queued, _ in self._queue:
            if count and rows + len(queued) > _MAX_GROUP_ROWS:
                break
            count, rows = count + 1, rows + len(queued)
        group, self._queue = self._queue[:count], self._queue[count:]
        return group

    async def _commit(self, group: list[_Pending]) -> None:
        """Write one group in one transaction and answer its callers: each its count of
        rows stored, or every one the error (nothing of the group was stored)."""
        try:
            accepted = await self._write_group([rows for rows, _ in group])
        except asyncpg.PostgresError as err:
            if len(group) > 1:
                # Possibly one batch's data (the connection and the disk are mapped to
                # DependencyUnavailable below): each batch alone, so only its own fails.
                log.warning("audit store: a group commit failed (%s); retrying each batch", err)
                for member in group:
                    await self._commit([member])
                return
            refusal = (
                _nul_refusal(group[0][0])
                if isinstance(err, asyncpg.CharacterNotInRepertoireError)
                else None
            )
            _fail(group, refusal or err)
            return
        except Exception as err:
            _fail(group, err)
            return
        for (_, done), count in zip(group, accepted, strict=True):
            if not done.done():
                done.set_result(count)

    async def _write_group(self, batches: list[list[AuditEventRow]]) -> list[int]:
        async with self._write_lock:
            # Not _refuse_if_unwritable: batches queued before close are still written.
            if not self._connected:
                raise DependencyUnavailable(_RECONNECTING)
            try:
                return await self._insert(batches)
            except _CONNECTION_ERRORS as err:
                log.error("audit store: write failed: %s", err)
                if self._writer.is_closed():
                    self._writer_lost(self._writer)
                raise DependencyUnavailable(f"the audit store could not write: {err}") from err
            except asyncpg.DiskFullError as err:
                raise DependencyUnavailable(
                    "the audit database is out of disk: nothing of the batch was stored"
                ) from err

    async def _insert(self, batches: list[list[AuditEventRow]]) -> list[int]:
        """Chain and store ``batches`` in one transaction; return each one's rows stored.

        An id stored by any replica, or earlier in the group, is skipped. The rows are
        hashed before the transaction (the chain is this replica's alone), so the append
        lock that every replica waits for is held for the database work only; the rare
        group with ids already stored is hashed again without them.
        """
        seen: set[str] = set()
        fresh: list[list[AuditEventRow]] = []
        for rows in batches:
            kept = [row for row in rows if row.event_id not in seen]
            seen.update(row.event_id for row in kept)
            fresh.append(kept)
        # Arrival times never go backwards within a chain, so retention deletes a prefix.
        stored_ns = max(self._clock(), self._chain_stored_ns)
        links = self._links([row for kept in fresh for row in kept], stored_ns)
        conn = self._writer
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _APPEND_LOCK)
            stored = {
                record[0]
                for record in await conn.fetch(
                    "SELECT event_id FROM agent_audit_log WHERE event_id = ANY($1::text[])",
                    list(seen),
                )
            }
            if stored:
                fresh = [[row for row in kept if row.event_id not in stored] for kept in fresh]
                links = self._links([row for kept in fresh for row in kept], stored_ns)
            if not links:
                return [0] * len(batches)
            sequence = int(await conn.fetchval("SELECT sequence FROM audit_log_head FOR UPDATE"))
            chain_id = self._chain_id
            records = [
                (sequence + i, stored_ns, *row, chain_id, chain_seq, prev, digest)
                for i, (row, chain_seq, prev, digest) in enumerate(links, start=1)
            ]
            sequence += len(records)
            _, chain_seq, _, head = links[-1]
            await conn.copy_records_to_table(
                "agent_audit_log", records=records, columns=list(COPY_COLUMNS)
            )
            # Both heads and the notification in one round trip.
            await conn.execute(
                "WITH log_head AS (UPDATE audit_log_head SET sequence = $1),"
                " chain AS (UPDATE audit_chain SET head_sequence = $3, head_hash = $4,"
                " head_stored_ns = $5 WHERE chain_id = $2)"
                " SELECT pg_notify($6, $7)",
                sequence,
                chain_id,
                chain_seq,
                head,
                stored_ns,
                CHANNEL,
                str(sequence),
            )
        self.commits += 1
        self._chain_seq, self._chain_hash, self._chain_stored_ns = chain_seq, head, stored_ns
        self._head_sequence = max(self._head_sequence, sequence)
        self._watch.publish(sequence)
        return [len(kept) for kept in fresh]

    def _links(
        self, rows: list[AuditEventRow], stored_ns: int
    ) -> list[tuple[AuditEventRow, int, str, str]]:
        """Each row with its chain position, the hash before it and its own hash."""
        chain_seq, prev = self._chain_seq, self._chain_hash
        links: list[tuple[AuditEventRow, int, str, str]] = []
        for row in rows:
            chain_seq += 1
            digest = link_hash(prev, chain_seq, stored_ns, row)
            links.append((row, chain_seq, prev, digest))
            prev = digest
        return links

    async def apply_retention(self, days: float, *, now_ns: int | None = None) -> int:
        """Delete rows stored more than ``days`` ago, in every chain; re-anchor each chain
        at its last deleted row so the retained rows still verify."""
        if days < 0:
            raise InvalidArgument("retention days must not be negative", field="days")
        cutoff = (self._clock() if now_ns is None else now_ns) - int(days * _NS_PER_DAY)
        async with self._pool.acquire() as conn, conn.transaction():
            # The append lock: no chain moves while its prefix is cut.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _APPEND_LOCK)
            deleted = 0
            for (chain_id,) in await conn.fetch("SELECT chain_id FROM audit_chain"):
                last = await conn.fetchrow(
                    "SELECT chain_seq, row_hash FROM agent_audit_log"
                    " WHERE chain_id = $1 AND stored_ns < $2 ORDER BY chain_seq DESC LIMIT 1",
                    chain_id,
                    cutoff,
                )
                if last is None:
                    continue
                status = await conn.execute(
                    "DELETE FROM agent_audit_log WHERE chain_id = $1 AND chain_seq <= $2",
                    chain_id,
                    last[0],
                )
                deleted += int(status.split()[-1])
                await conn.execute(
                    "UPDATE audit_chain SET anchor_sequence = $2, anchor_hash = $3"
                    " WHERE chain_id = $1",
                    chain_id,
                    last[0],
                    last[1],
                )
            return deleted

    # -- reading -----------------------------------------------------------------------

    def _mark(self, index: int) -> str:
        return f"${index}"

    async def _fetch(self, sql: str, *params: Any) -> list[Any]:
        try:
            async with self._pool.acquire() as conn:
                return list(await conn.fetch(sql, *params))
        except _CONNECTION_ERRORS as err:
            raise DependencyUnavailable(f"the audit database cannot be read: {err}") from err

    async def chain_head(self) -> tuple[str, int, str]:
        """(chain id, head position, head hash) of this replica's chain, as committed."""
        found = await self._fetch(
            "SELECT head_sequence, head_hash FROM audit_chain WHERE chain_id = $1",
            self._chain_id,
        )
        return self._chain_id, int(found[0][0]), str(found[0][1])

    async def row_hash_at(self, chain_id: str, position: int) -> str | None:
        """The stored hash at ``position`` of ``chain_id``; ``""`` when retention deleted
        it, None when the row is not stored."""
        found = await self._fetch(
            "SELECT row_hash FROM agent_audit_log WHERE chain_id = $1 AND chain_seq = $2",
            chain_id,
            position,
        )
        if found:
            return str(found[0][0])
        anchor = await self._fetch(
            "SELECT anchor_sequence FROM audit_chain WHERE chain_id = $1", chain_id
        )
        return "" if anchor and position <= int(anchor[0][0]) else None

    async def verify(self) -> VerifyResult:
        """Check every replica's chain in one snapshot; name the chain and row that broke.

        ``head_sequence``/``head_hash``/``anchor_sequence`` describe this replica's own
        chain (positions within it); ``detail`` lists every chain checked.
        """
        try:
            async with self._pool.acquire() as conn:
                return await verify_chains(conn, self._chain_id)
        except _CONNECTION_ERRORS as err:
            raise DependencyUnavailable(f"the audit database cannot be read: {err}") from err


async def verify_chains(
    conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy,
    own_chain: str = "",
    chunk: int = 2000,
) -> VerifyResult:
    """Check every chain on ``conn`` inside one repeatable-read snapshot."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        chains = await conn.fetch(
            "SELECT chain_id, anchor_sequence, anchor_hash, head_sequence, head_hash"
            " FROM audit_chain ORDER BY chain_id"
        )
        known = [str(c[0]) for c in chains]
        strays = await conn.fetch(
            "SELECT chain_id, min(sequence), count(*) FROM agent_audit_log"
            " WHERE chain_id <> ALL($1::text[]) GROUP BY chain_id ORDER BY min(sequence)",
            known,
        )
        refused = cut = 0
        results: list[ChainVerification] = []
        own = VerifyResult(True, 0)
        for chain_id, anchor_seq, anchor_hash, head_seq, head_hash in chains:
            checker = ChainChecker(int(anchor_seq), str(anchor_hash))
            last_global = appended_global = 0
            cursor = conn.cursor(
                f"{_SELECT_ROW} WHERE chain_id = $1 ORDER BY chain_seq", chain_id, prefetch=chunk
            )
            async for values in cursor:
                last_global = int(values[0])
                if int(values[-3]) == int(head_seq) + 1:
                    appended_global = last_global
                hashed = (values[-3], values[1], *values[2 : 2 + _N_EVENT])
                if not checker.feed(hashed, values[-2], values[-1]):
                    break
                kind = marker_kind(values[_ARGUMENTS], values[_CONFLICTS])
                refused += kind == "refused"
                cut += kind == "cut"
            result = checker.finish(int(head_seq), str(head_hash))
            at_fault = {
                None: 0,
                ChainBreak.TAIL_REMOVED: 0,
                ChainBreak.ROWS_APPENDED: appended_global,
            }.get(checker.reason, last_global)
            results.append(
                checker.chain_result(
                    str(chain_id),
                    result,
                    head=(int(head_seq), str(head_hash)),
                    anchor_position=int(anchor_seq),
                    broken_sequence=at_fault,
                )
            )
            if chain_id == own_chain:
                own = VerifyResult(
                    True,
                    0,
                    head_sequence=int(head_seq),
                    head_hash=str(head_hash),
                    anchor_sequence=int(anchor_seq),
                )
        for chain_id, first, count in strays:
            results.append(
                ChainVerification(
                    chain_id=str(chain_id),
                    ok=False,
                    rows_checked=int(count),
                    first_broken_sequence=int(first),
                    reason=ChainBreak.UNKNOWN_CHAIN,
                    detail=f"row {first} belongs to chain {chain_id!r}, which has no recorded"
                    " head (rows were added outside the store)",
                )
            )
    return _overall(own, results, refused, cut)


def _summary(chain: ChainVerification) -> str:
    if chain.ok:
        return f"chain {chain.chain_id!r}: {chain.rows_checked} rows ok"
    if chain.reason is ChainBreak.UNKNOWN_CHAIN:
        return chain.detail
    where = (
        f"row {chain.first_broken_sequence} (chain position {chain.first_broken_position})"
        if chain.first_broken_sequence
        else f"chain position {chain.first_broken_position}"
    )
    return f"chain {chain.chain_id!r} broken at {where}: {chain.detail}"


def _overall(
    own: VerifyResult, chains: list[ChainVerification], refused: int, cut: int
) -> VerifyResult:
    """The whole store's result: ok only when every chain is; the first broken chain
    (in log order) named in ``first_broken_sequence`` and ``detail``, every chain in
    ``chains``."""
    summaries = [_summary(c) for c in chains]
    broken = sorted((c for c in chains if not c.ok), key=lambda c: c.first_broken_sequence or 2**63)
    detail = "; ".join(summaries)
    if broken:
        first = _summary(broken[0])
        detail = f"{first} (all chains: {detail})" if len(chains) > 1 else first
    return dataclasses.replace(
        own,
        ok=not broken,
        rows_checked=sum(
            c.rows_checked for c in chains if c.reason is not ChainBreak.UNKNOWN_CHAIN
        ),
        first_broken_sequence=broken[0].first_broken_sequence if broken else 0,
        detail=detail,
        refused_rows=refused,
        cut_rows=cut,
        chains=tuple(chains),
    )
