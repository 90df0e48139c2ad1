"""The executor's shared state: spent grants and per-session reads (STORE-3, EXE-11).

Two facts must outlive one executor process and be shared by every replica: which grants
were already spent (a grant is single-use across replicas and restarts, DEC-12) and what
each session last read (stale-write protection, EXE-11, when the read and the edit land
on different replicas). Both live behind :class:`ExecutorState`, chosen by one setting,
``STOCKADE_EXECUTOR_STATE_DSN``:

- unset or ``sqlite:///path``: an SQLite file (default ``{state_dir}/executor-state.sqlite3``),
  for one node; it survives a restart and is shared by executors on that node;
- ``postgresql://…``: PostgreSQL (:mod:`stockade.executor.pg_state`), for many replicas.
  The executor's database role needs no table rights at all: it may only call three
  ``SECURITY DEFINER`` functions (spend a grant, record a read, look up a read).

Every failure to reach the store refuses: a grant that cannot be recorded as spent is not
accepted (UNAVAILABLE), an edit whose read cannot be looked up is not made.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

from stockade.db.dsn import parse_store_dsn
from stockade.errors import DependencyUnavailable, InvalidArgument
from stockade.executor.readstate import (
    MAX_READS_PER_SESSION,
    FileStamp,
    ReadLedger,
    ReadState,
    check_fresh,
    reads_exhausted,
)

__all__ = [
    "MAX_GRANT_ID",
    "MAX_PATH",
    "MAX_SESSION_ID",
    "PRUNE_MARGIN_S",
    "READ_TTL_S",
    "ExecutorState",
    "MemoryExecutorState",
    "SqliteExecutorState",
    "SqliteReadLedger",
    "StoreReadState",
    "open_state",
    "parse_state_dsn",
]

_T = TypeVar("_T")

#: Bounds on what one record holds (the same in both backends; PostgreSQL enforces them
#: in the functions too, so a caller holding the executor's role cannot store more).
MAX_GRANT_ID = 128
MAX_SESSION_ID = 256
MAX_PATH = 4096
#: A spent grant is kept this long past its expiry before pruning, so clocks that differ
#: by less than this between executors (and the database) cannot revive it: an expired
#: grant is refused for its expiry anyway, and a record pruned early would be the only
#: way to replay one.
PRUNE_MARGIN_S = 600.0
#: A read is remembered this long (a session that reads a file and edits it a day later
#: must read it again); older records are pruned.
READ_TTL_S = 24 * 3600.0
#: Longest a spent grant may claim to live (grants live 60 s by default): a bound on how
#: long a record can be kept, so the table cannot be filled with records never pruned.
MAX_GRANT_LIFETIME_S = 3600.0
#: Rows pruned per pruning write (bounded work on the hot path).
PRUNE_BATCH = 64
#: Every this many writes of a table, one also prunes it (up to ``PRUNE_BATCH`` rows, so
#: pruning removes records four times as fast as writes add them; a statement that finds
#: nothing to prune still costs a lock, hence not on every write).
PRUNE_EVERY = 16
#: How long a call waits for the store before giving up (fail closed), unless the
#: ``STORE_WAIT_S`` setting says otherwise.
STORE_WAIT_S = 10.0


class ExecutorState(Protocol):
    """Where spent grants and session reads are recorded (shared by the replicas)."""

    description: str
    """What backs it, for logs and GetCapabilities (no secrets)."""
    shared: bool
    """True when other processes see the same records (SQLite file, PostgreSQL)."""

    async def spend_grant(self, grant_id: str, expires_at: float) -> bool:
        """Record grant ``grant_id`` (its nonce) as spent; True when it was not spent before.

        Raises ``DependencyUnavailable`` when the store cannot say (never True then).
        """
        ...

    async def record_read(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """Remember that ``session_id`` read ``path`` (canonical) as ``stamp``."""
        ...

    async def last_read(self, session_id: str, path: str) -> FileStamp | None:
        """The stamp of the session's last read of ``path``, if any."""
        ...

    def read_ledger(self, loop: asyncio.AbstractEventLoop) -> ReadLedger:
        """The tools' view of the session reads kept here (``loop`` is the executor's
        event loop, for a store whose calls must run on it)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


def _check_bounds(grant_id: str | None = None, session_id: str = "s", path: str = "/") -> None:
    if grant_id is not None and not 0 < len(grant_id) <= MAX_GRANT_ID:
        raise InvalidArgument(f"grant id must be 1-{MAX_GRANT_ID} characters")
    if not 0 < len(session_id) <= MAX_SESSION_ID:
        raise InvalidArgument(f"session id must be 1-{MAX_SESSION_ID} characters")
    if not 0 < len(path) <= MAX_PATH:
        raise InvalidArgument(f"path must be 1-{MAX_PATH} characters")


class MemoryExecutorState:
    """Records in this process only (tests and in-process tools; not for a deployment:
    a restart forgets every spent grant)."""

    description = "memory (this process only)"
    shared = False

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        """An empty store reading time from ``clock``."""
        self._clock = clock
        self._spent: dict[str, float] = {}
        self._reads = ReadState()

    async def spend_grant(self, grant_id: str, expires_at: float) -> bool:
        """See :meth:`ExecutorState.spend_grant`."""
        _check_bounds(grant_id)
        now = self._clock()
        if len(self._spent) > 10_000:
            for key in [k for k, exp in self._spent.items() if exp < now - PRUNE_MARGIN_S]:
                del self._spent[key]
        if grant_id in self._spent:
            return False
        self._spent[grant_id] = expires_at
        return True

    async def record_read(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """See :meth:`ExecutorState.record_read`."""
        self._reads.record(session_id, path, stamp)

    async def last_read(self, session_id: str, path: str) -> FileStamp | None:
        """See :meth:`ExecutorState.last_read`."""
        return self._reads.get(session_id, path)

    def read_ledger(self, loop: asyncio.AbstractEventLoop) -> ReadLedger:
        """See :meth:`ExecutorState.read_ledger` (the same records, in memory)."""
        return self._reads

    async def close(self) -> None:
        """Nothing to release."""


_SQLITE_MIGRATIONS: tuple[str, ...] = (
    """
CREATE TABLE spent_grant (
  grant_id TEXT PRIMARY KEY,
  expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX spent_grant_expiry ON spent_grant (expires_at);
CREATE TABLE read_state (
  session_id TEXT NOT NULL,
  path TEXT NOT NULL,
  mtime_ns INTEGER NOT NULL,
  size INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  read_at REAL NOT NULL,
  PRIMARY KEY (session_id, path)
) WITHOUT ROWID;
CREATE INDEX read_state_age ON read_state (read_at);
""",
)
"""Versioned by ``PRAGMA user_version`` (migration i brings the file to version i+1).
Append only: a released migration is never edited."""


class SqliteExecutorState:
    """Spent grants and reads in one SQLite file: survives restarts, shared by the
    executors of one node (SQLite's file locking makes the insert the single arbiter)."""

    shared = True

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        wait_s: float = STORE_WAIT_S,
    ) -> None:
        """Open (creating, migrating) the file at ``path``; a statement waits at most
        ``wait_s`` for another process's write lock."""
        self.path = path
        self.description = f"sqlite:{path}"
        self._clock = clock
        self.max_reads_per_session = MAX_READS_PER_SESSION
        """Distinct files one session may have on record (tests lower it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit; every statement is its own transaction unless BEGIN is said.
        self._db = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=wait_s
        )
        self._lock = threading.Lock()
        self._writes: dict[str, int] = {}
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed row survives the process being killed (the
            # threat here: SIGKILL then replay), one fsync per checkpoint, not per grant.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        os.chmod(path, 0o600)

    def _migrate(self) -> None:
        # BEGIN IMMEDIATE takes the write lock: two executors starting together on one
        # file apply each migration once.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version > len(_SQLITE_MIGRATIONS):
                raise InvalidArgument(
                    f"{self.path}: executor state schema version {version} is newer than "
                    f"this executor ({len(_SQLITE_MIGRATIONS)}); refusing to use it"
                )
            for number in range(version, len(_SQLITE_MIGRATIONS)):
                for statement in _SQLITE_MIGRATIONS[number].split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {number + 1}")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        try:
            with self._lock:
                return fn(self._db)
        except sqlite3.Error as exc:
            raise DependencyUnavailable(f"executor state file {self.path}: {exc}") from exc

    def spend_grant_now(self, grant_id: str, expires_at: float) -> bool:
        """Synchronous :meth:`spend_grant`."""
        _check_bounds(grant_id)
        if expires_at > self._clock() + MAX_GRANT_LIFETIME_S:
            raise InvalidArgument("grant expiry is too far in the future")
        now = self._clock()

        def spend(db: sqlite3.Connection) -> bool:
            # One statement, its own transaction: the insert is the single arbiter (only
            # the first of any number of executors sharing the file inserts the row).
            cur = db.execute(
                "INSERT INTO spent_grant VALUES (?, ?) ON CONFLICT DO NOTHING",
                (grant_id, expires_at),
            )
            fresh = cur.rowcount == 1
            if self._due_for_pruning("spent_grant"):
                db.execute(
                    "DELETE FROM spent_grant WHERE grant_id IN (SELECT grant_id FROM "
                    "spent_grant WHERE expires_at < ? LIMIT ?)",
                    (now - PRUNE_MARGIN_S, PRUNE_BATCH),
                )
            return fresh

        return self._run(spend)

    def record_read_now(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """Synchronous :meth:`record_read`."""
        _check_bounds(None, session_id, path)
        now = self._clock()

        def record(db: sqlite3.Connection) -> bool:
            # One statement: a path already on record is updated; a new one is inserted
            # only while the session has fewer than the limit (live records) on record.
            cur = db.execute(
                "INSERT INTO read_state SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE EXISTS (SELECT 1 "
                "FROM read_state WHERE session_id = ?1 AND path = ?2) OR (SELECT count(*) "
                "FROM read_state WHERE session_id = ?1 AND read_at >= ?7) < ?8 ON CONFLICT "
                "(session_id, path) DO UPDATE SET mtime_ns = excluded.mtime_ns, "
                "size = excluded.size, sha256 = excluded.sha256, read_at = excluded.read_at",
                (
                    session_id,
                    path,
                    stamp.mtime_ns,
                    stamp.size,
                    stamp.sha256,
                    now,
                    now - READ_TTL_S,
                    self.max_reads_per_session,
                ),
            )
            recorded = cur.rowcount == 1
            if self._due_for_pruning("read_state"):
                db.execute(
                    "DELETE FROM read_state WHERE (session_id, path) IN (SELECT "
                    "session_id, path FROM read_state WHERE read_at < ? LIMIT ?)",
                    (now - READ_TTL_S, PRUNE_BATCH),
                )
            return recorded

        if not self._run(record):
            raise reads_exhausted(session_id, self.max_reads_per_session)

    def _due_for_pruning(self, table: str) -> bool:
        """True on every ``PRUNE_EVERY``-th write of ``table`` by this process (called
        under the lock)."""
        count = self._writes[table] = self._writes.get(table, 0) + 1
        return count % PRUNE_EVERY == 0

    def last_read_now(self, session_id: str, path: str) -> FileStamp | None:
        """Synchronous :meth:`last_read`."""
        _check_bounds(None, session_id, path)
        row = self._run(
            lambda db: db.execute(
                "SELECT mtime_ns, size, sha256 FROM read_state WHERE session_id = ? AND "
                "path = ? AND read_at >= ?",
                (session_id, path, self._clock() - READ_TTL_S),
            ).fetchone()
        )
        return None if row is None else FileStamp(int(row[0]), int(row[1]), str(row[2]))

    async def spend_grant(self, grant_id: str, expires_at: float) -> bool:
        """See :meth:`ExecutorState.spend_grant` (a local file: no thread hand-off)."""
        return self.spend_grant_now(grant_id, expires_at)

    async def record_read(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """See :meth:`ExecutorState.record_read`."""
        self.record_read_now(session_id, path, stamp)

    async def last_read(self, session_id: str, path: str) -> FileStamp | None:
        """See :meth:`ExecutorState.last_read`."""
        return self.last_read_now(session_id, path)

    def read_ledger(self, loop: asyncio.AbstractEventLoop) -> ReadLedger:
        """See :meth:`ExecutorState.read_ledger`: the file is local, so the tools write
        and look up reads directly, from the event loop or a worker thread (a statement
        takes tens of microseconds; a hop to the loop and back costs more)."""
        return SqliteReadLedger(self)

    async def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()


class SqliteReadLedger:
    """The tools' read state in an :class:`SqliteExecutorState` (shared by the executors of
    the node), called directly: it never waits on the event loop, so it may be called on it."""

    blocking = False
    """Local file statements: safe on the event loop."""

    def __init__(self, store: SqliteExecutorState) -> None:
        """Reads recorded in ``store``."""
        self.store = store

    def record(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """Remember that ``session_id`` saw ``path`` as ``stamp`` (in the shared file)."""
        self.store.record_read_now(session_id, path, stamp)

    def get(self, session_id: str, path: str) -> FileStamp | None:
        """The stamp the file holds for ``path`` in ``session_id``."""
        return self.store.last_read_now(session_id, path)

    def require_fresh(self, session_id: str, path: str, current: FileStamp) -> None:
        """Raise ``StaleWrite`` unless ``path`` was read in the session (by any executor
        sharing the file) and is unchanged since."""
        check_fresh(path, self.get(session_id, path), current)


class StoreReadState:
    """The tools' read state (``ReadState``'s interface) kept in an :class:`ExecutorState`,
    so a read on one replica counts for an edit on another.

    The file tools run in worker threads; each call here waits for the store on the
    executor's event loop. It must not be called on that loop (``blocking`` tells a tool
    to move off it), and it never answers "fresh" when the store cannot be reached.
    """

    blocking = True
    """Calls wait for the store: tools must call from a worker thread."""

    def __init__(
        self,
        state: ExecutorState,
        loop: asyncio.AbstractEventLoop,
        *,
        wait_s: float = STORE_WAIT_S,
    ) -> None:
        """Read state in ``state``, whose coroutines run on ``loop``."""
        self.state = state
        self._loop = loop
        self._wait_s = wait_s

    def _wait(self, coro: Coroutine[Any, Any, _T]) -> _T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise RuntimeError("StoreReadState called on the event loop: use a worker thread")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(self._wait_s)
        except TimeoutError as exc:
            future.cancel()
            raise DependencyUnavailable(
                f"the executor state store did not answer within {self._wait_s:g} s"
            ) from exc

    def record(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """Remember that ``session_id`` saw ``path`` as ``stamp`` (in the shared store)."""
        self._wait(self.state.record_read(session_id, path, stamp))

    def get(self, session_id: str, path: str) -> FileStamp | None:
        """The stamp the shared store holds for ``path`` in ``session_id``."""
        return self._wait(self.state.last_read(session_id, path))

    def require_fresh(self, session_id: str, path: str, current: FileStamp) -> None:
        """Raise ``StaleWrite`` unless ``path`` was read in the session (on any replica)
        and is unchanged since."""
        check_fresh(path, self.get(session_id, path), current)


def parse_state_dsn(dsn: str | None, state_dir: Path) -> tuple[str, str | Path]:
    """``("sqlite", path)`` or ``("postgresql", dsn)`` for the ``STATE_DSN`` setting.

    Unset: SQLite at ``{state_dir}/executor-state.sqlite3``. Anything else is refused
    (InvalidArgument), so a typo never falls back to a store the replicas do not share.
    """
    default = state_dir / "executor-state.sqlite3"
    kind, target = parse_store_dsn(dsn or "", str(default), setting="STOCKADE_EXECUTOR_STATE_DSN")
    return (kind, target) if kind == "postgresql" else (kind, Path(target))


async def open_state(
    dsn: str | None, state_dir: Path, *, wait_s: float = STORE_WAIT_S
) -> ExecutorState:
    """The store the settings name (see :func:`parse_state_dsn`), opened and migrated;
    each call to it waits at most ``wait_s`` (then refuses, UNAVAILABLE)."""
    kind, target = parse_state_dsn(dsn, state_dir)
    if kind == "postgresql":
        from stockade.executor.pg_state import PostgresExecutorState

        return await PostgresExecutorState.open(str(target), wait_s=wait_s)
    assert isinstance(target, Path)
    return await asyncio.to_thread(functools.partial(SqliteExecutorState, target, wait_s=wait_s))
