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

A replica owns its chain through a session-level advisory lock taken at ``open``: a
second process started with the same replica id is refused instead of forking the
chain. Schema migrations are versioned and applied under another advisory lock, so
replicas starting together apply each migration once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import asyncpg
from opentelemetry import metrics

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
from stockade.audit.validate import dedupe, normalise_batch
from stockade.contract.audit_bounds import CUT_KEY, REFUSED_KEY
from stockade.db.postgres import CONNECTION_ERRORS, connect, open_pool
from stockade.db.postgres import migrate as db_migrate
from stockade.errors import DependencyUnavailable, InvalidArgument

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

_EVENT_COLUMNS = ",\n  ".join(
    f"{name} {'BIGINT' if name in _INTEGER_FIELDS else 'TEXT'} NOT NULL"
    + (" UNIQUE" if name == "event_id" else "")
    for name in EVENT_FIELDS
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
_REFUSED = '{"' + REFUSED_KEY + '":'
_CUT = '{"' + CUT_KEY + '":'

_CONNECTION_ERRORS = CONNECTION_ERRORS


def _row(values: Sequence[Any] | asyncpg.Record) -> StoredRow:
    """A ``StoredRow`` from a row in ``COPY_COLUMNS`` order."""
    return StoredRow(
        event=AuditEventRow(*values[2 : 2 + _N_EVENT]),
        sequence=int(values[0]),
        stored_ns=int(values[1]),
        prev_hash=str(values[-2]),
        row_hash=str(values[-1]),
    )


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


class PostgresAuditStore:
    """The audit log on PostgreSQL; one instance per replica, writing chain ``chain_id``.

    Open with ``await PostgresAuditStore.open(dsn, chain_id=...)``; close with ``close``.
    """

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
    ) -> None:
        """Use ``open``: this wires an opened writer connection and reader pool."""
        self._writer = writer
        self._pool = pool
        self._chain_id = chain_id
        self._chain_seq, self._chain_hash, self._chain_stored_ns = chain_head
        self._head_sequence = log_head
        self._watch = HeadWatch(log_head)
        self._write_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(max_pending_batches)
        self._instruments = store_instruments(meter)
        self._clock = clock
        self._closed = False
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
    ) -> PostgresAuditStore:
        """Connect, migrate, take ownership of chain ``chain_id`` and listen for commits.

        A replica restarted right after it was killed may find its old session still
        holding the chain until the server notices the dead connection: ``open`` waits up
        to ``chain_lock_wait_s`` for the chain to be free before refusing.

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
        """The writer connection died: appends now fail UNAVAILABLE (the chain's lock
        went with it, so this replica must restart to write again)."""
        if not self._closed:
            log.error("audit store: lost the database connection; appends are refused")

    async def close(self) -> None:
        """End the tails, let the write in progress finish, close the connections."""
        if self._closed:
            return
        self._closed = True
        self._watch.close()
        async with self._write_lock:
            pass
        if not self._writer.is_closed():
            await self._writer.close()
        await self._pool.close()

    async def __aenter__(self) -> PostgresAuditStore:
        """Use the store as an async context manager."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the store."""
        await self.close()

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
        """Store a batch in one transaction; skip ids stored by any replica; chain the rest.

        Raises ``InvalidArgument`` (nothing stored) for a malformed event and
        ``DependencyUnavailable`` when the database cannot be written. A batch handed to
        the database is committed whole even if the caller is cancelled meanwhile.
        """
        arrived = time.monotonic()
        if self._closed:
            raise DependencyUnavailable("the audit store is closing")
        if not events:
            return AppendResult(0, 0, self.head_sequence)
        rows = normalise_batch(events, self._clock())
        unique, _ = dedupe(rows)
        async with self._slots:
            accepted = await asyncio.shield(self._write(unique))
        duplicates = len(rows) - accepted
        counter = self._instruments.events_ingested
        counter.add(accepted, {"outcome": "accepted"})
        if duplicates:
            counter.add(duplicates, {"outcome": "duplicate"})
        self._instruments.ingest_latency.record((time.monotonic() - arrived) * 1000.0)
        return AppendResult(accepted, duplicates, self.head_sequence)

    async def _write(self, rows: list[AuditEventRow]) -> int:
        async with self._write_lock:
            if self._closed:
                raise DependencyUnavailable("the audit store is closing")
            try:
                return await self._insert(rows)
            except _CONNECTION_ERRORS as err:
                log.error("audit store: write failed: %s", err)
                raise DependencyUnavailable(f"the audit store could not write: {err}") from err
            except asyncpg.DiskFullError as err:
                raise DependencyUnavailable(
                    "the audit database is out of disk: nothing of the batch was stored"
                ) from err

    async def _insert(self, rows: list[AuditEventRow]) -> int:
        conn = self._writer
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _APPEND_LOCK)
            stored = {
                record[0]
                for record in await conn.fetch(
                    "SELECT event_id FROM agent_audit_log WHERE event_id = ANY($1::text[])",
                    [r.event_id for r in rows],
                )
            }
            fresh = [r for r in rows if r.event_id not in stored]
            if not fresh:
                return 0
            sequence = int(await conn.fetchval("SELECT sequence FROM audit_log_head FOR UPDATE"))
            # Arrival times never go backwards within a chain, so retention deletes a prefix.
            stored_ns = max(self._clock(), self._chain_stored_ns)
            chain_seq, prev = self._chain_seq, self._chain_hash
            records: list[tuple[Any, ...]] = []
            for row in fresh:
                sequence += 1
                chain_seq += 1
                digest = hash_values(prev, (chain_seq, stored_ns, *row))
                records.append((sequence, stored_ns, *row, self._chain_id, chain_seq, prev, digest))
                prev = digest
            await conn.copy_records_to_table(
                "agent_audit_log", records=records, columns=list(COPY_COLUMNS)
            )
            await conn.execute("UPDATE audit_log_head SET sequence = $1", sequence)
            await conn.execute(
                "UPDATE audit_chain SET head_sequence = $2, head_hash = $3, head_stored_ns = $4"
                " WHERE chain_id = $1",
                self._chain_id,
                chain_seq,
                prev,
                stored_ns,
            )
            await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, str(sequence))
        self._chain_seq, self._chain_hash, self._chain_stored_ns = chain_seq, prev, stored_ns
        self._head_sequence = max(self._head_sequence, sequence)
        self._watch.publish(sequence)
        return len(fresh)

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

    async def query(
        self, filters: QueryFilters, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[StoredRow], str]:
        """Rows matching ``filters``, newest (highest sequence) first, and the next token."""
        size = clamp_page_size(page_size)
        before = decode_token(page_token, filters)
        clauses: list[str] = []
        params: list[Any] = []

        def bind(clause: str, value: Any) -> None:
            params.append(value)
            clauses.append(clause.format(f"${len(params)}"))

        for column in ("session_id", "tool_name", "status", "agent_name", "verdict"):
            value = getattr(filters, column)
            if value:
                bind(f"{column} = {{}}", value)
        if filters.start_ns is not None:
            bind("time_ns >= {}", filters.start_ns)
        if filters.end_ns is not None:
            bind("time_ns < {}", filters.end_ns)
        if before is not None:
            bind("sequence < {}", before)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        params.append(size + 1)
        sql = f"{_SELECT_ROW}{where} ORDER BY sequence DESC LIMIT ${len(params)}"
        found = await self._fetch(sql, *params)
        rows = [_row(values) for values in found[:size]]
        token = encode_token(rows[-1].sequence, filters) if len(found) > size else ""
        return rows, token

    async def _fetch(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        try:
            async with self._pool.acquire() as conn:
                return list(await conn.fetch(sql, *params))
        except _CONNECTION_ERRORS as err:
            raise DependencyUnavailable(f"the audit database cannot be read: {err}") from err

    async def rows_after(
        self, sequence: int, session_id: str = "", limit: int = 500
    ) -> list[StoredRow]:
        """Up to ``limit`` rows after ``sequence`` in log order, optionally of one session."""
        if session_id:
            found = await self._fetch(
                f"{_SELECT_ROW} WHERE sequence > $1 AND session_id = $2 ORDER BY sequence LIMIT $3",
                sequence,
                session_id,
                limit,
            )
        else:
            found = await self._fetch(
                f"{_SELECT_ROW} WHERE sequence > $1 ORDER BY sequence LIMIT $2", sequence, limit
            )
        return [_row(values) for values in found]

    async def tail(
        self, session_id: str = "", *, after: int | None = None, batch: int = 500
    ) -> AsyncIterator[StoredRow]:
        """Yield rows as any replica commits them (from the current head, or after
        ``after``); ends when the store closes. Memory is bounded by ``batch``."""
        seen = self.head_sequence if after is None else after
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
        """Calls, errors, denials, per-tool counts and latency, and termination reason."""
        if not session_id:
            raise InvalidArgument("session_id is required", field="session_id")
        found = await self._fetch(
            "SELECT tool_name, count(*), count(*) FILTER (WHERE status = 'FAIL'),"
            " count(*) FILTER (WHERE status = 'DENIED'),"
            " avg(elapsed_ms) FILTER (WHERE status != 'DENIED'), max(elapsed_ms)"
            " FROM agent_audit_log WHERE session_id = $1 AND status <> ALL($2::text[])"
            " GROUP BY tool_name ORDER BY tool_name",
            session_id,
            # Summary rows and the decision service's decision records are not calls.
            [AuditStatus.SESSION_STOP.value, AuditStatus.DECIDED.value],
        )
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
        stop = await self._fetch(
            "SELECT termination_reason FROM agent_audit_log WHERE session_id = $1"
            " AND status = $2 ORDER BY sequence DESC LIMIT 1",
            session_id,
            AuditStatus.SESSION_STOP.value,
        )
        return SessionMetrics(
            session_id=session_id,
            calls=sum(t.calls for t in tools),
            errors=sum(t.errors for t in tools),
            denials=sum(t.denials for t in tools),
            tools=tools,
            termination_reason=str(stop[0][0]) if stop else "",
        )

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
        stray = await conn.fetchrow(
            "SELECT sequence, chain_id FROM agent_audit_log"
            " WHERE chain_id <> ALL($1::text[]) ORDER BY sequence LIMIT 1",
            known,
        )
        checked = refused = cut = 0
        summaries: list[str] = []
        broken: VerifyResult | None = None
        own = VerifyResult(True, 0)
        for chain_id, anchor_seq, anchor_hash, head_seq, head_hash in chains:
            checker = ChainChecker(int(anchor_seq), str(anchor_hash))
            last_global = 0
            cursor = conn.cursor(
                f"{_SELECT_ROW} WHERE chain_id = $1 ORDER BY chain_seq", chain_id, prefetch=chunk
            )
            async for values in cursor:
                last_global = int(values[0])
                hashed = (values[-3], values[1], *values[2 : 2 + _N_EVENT])
                if not checker.feed(hashed, values[-2], values[-1]):
                    break
                arguments = values[_ARGUMENTS]
                if arguments.startswith(_REFUSED):
                    refused += 1
                elif arguments.startswith(_CUT) or values[_CONFLICTS].startswith(_CUT):
                    cut += 1
            result = checker.finish(int(head_seq), str(head_hash))
            checked += checker.rows_checked
            if result.ok:
                summaries.append(f"chain {chain_id!r}: {checker.rows_checked} rows ok")
            else:
                where = (
                    f"row {last_global} (chain position {result.first_broken_sequence})"
                    if checker.broken is not None
                    else f"chain position {result.first_broken_sequence}"
                )
                summaries.append(f"chain {chain_id!r} broken at {where}: {result.detail}")
                if broken is None:
                    broken = VerifyResult(
                        False,
                        0,
                        last_global if checker.broken is not None else 0,
                        summaries[-1],
                    )
            if chain_id == own_chain:
                own = VerifyResult(
                    True,
                    0,
                    head_sequence=int(head_seq),
                    head_hash=str(head_hash),
                    anchor_sequence=int(anchor_seq),
                )
        if stray is not None:
            summaries.append(
                f"row {stray[0]} belongs to chain {stray[1]!r}, which has no recorded head"
                " (rows were added outside the store)"
            )
            if broken is None:
                broken = VerifyResult(False, 0, int(stray[0]), summaries[-1])
    detail = "; ".join(summaries) if broken is None else broken.detail
    if broken is not None and len(summaries) > 1:
        detail = f"{broken.detail} (all chains: {'; '.join(summaries)})"
    return dataclasses.replace(
        own,
        ok=broken is None,
        rows_checked=checked,
        first_broken_sequence=broken.first_broken_sequence if broken else 0,
        detail=detail,
        refused_rows=refused,
        cut_rows=cut,
    )
