"""The decision store on PostgreSQL: interchangeable replicas on one database (STORE-2).

Every replica reads and writes the same tables; what must hold across replicas is done by
the database, not by a lock in one process:

- first answer wins: ``finish_approval`` is one conditional ``UPDATE … WHERE state =
  'pending'``; exactly one of two racing resolvers (on any replicas) changes the row;
- denial counters are atomic: ``UPDATE … SET n = n + 1 RETURNING``, never read-modify-write;
- a counted grant is spent by a conditional decrement (``remaining_uses >= 1``), so two
  replicas cannot both spend its last use (the loser decides again);
- a session's rules and grants change under its row lock, so the rule limit holds.

Every write also announces itself with ``pg_notify`` in its own transaction (delivered on
commit) on one channel. Each replica LISTENs on a dedicated connection and

- drops its cached copy of a session another replica changed (mode, counters, rules,
  grants), so the ALLOW path of Decide reads no database when the session is cached;
- tells the approval broker about approvals raised or answered elsewhere (watchers see
  them, the waiter of an answered one wakes).

A cached read is kept only if no change to that session was announced since the read
began (an invalidation counter), so a read racing a remote write never caches the old
value. If the LISTEN connection is lost, nothing cached is trusted: the cache is dropped
and not used until the connection is back and the store has resynchronised (cache dropped
again, pending approvals re-read, every waiter woken to re-read its approval). Until then
every read goes to the database, and if that is down too, calls fail UNAVAILABLE (the
caller denies): never a stale grant or mode served as fresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import asyncpg
from opentelemetry import metrics

from stockade.db.postgres import CONNECTION_ERRORS, connect, keep_alive, migrate, open_pool
from stockade.decision.modes import Mode
from stockade.decision.rules import Effect, Rule, RuleIndex, Source
from stockade.decision.store.base import StoreListener
from stockade.decision.store.model import (
    APPROVAL_COLUMNS,
    DEFAULT_CACHE_MAX_SESSIONS,
    DEFAULT_MAX_SESSION_RULES,
    GRANT_COLUMNS,
    RULE_COLUMNS,
    SESSION_COLUMNS,
    ApprovalRecord,
    ApprovalState,
    CachedSession,
    GrantRecord,
    PendingLimits,
    SessionCache,
    SessionRecord,
    approval_from_row,
    call_to_json,
    check_pending,
    check_rule_count,
    check_task,
    counted_grants,
    live_grants,
    new_grant_rule,
    new_id,
    new_session_rule,
    rule_from_row,
    rule_to_json,
    session_from_row,
    session_not_found,
)
from stockade.errors import ApprovalNotFound, DependencyUnavailable, InvalidArgument

log = logging.getLogger(__name__)

T = TypeVar("T")

#: LISTEN/NOTIFY channel of every decision-store change.
CHANNEL = "stockade_decision"
#: How the connections show in ``pg_stat_activity`` (the pool's, and the listening one).
APPLICATION_NAME = "stockade-decision"
LISTEN_APPLICATION_NAME = "stockade-decision-listen"
#: Advisory lock key of the decision schema's migrations (the audit store uses ...0001).
_MIGRATION_LOCK = 0x53544B_0010
#: Advisory lock taken by every capped approval insert (the pending caps hold exactly).
_APPROVALS_LOCK = 0x53544B_0011
#: A NOTIFY payload is at most 8,000 bytes and carries a session id: ids are bounded.
MAX_ID_CHARS = 1_000
#: Announced changes queued for the broker; past it the store resynchronises instead.
MAX_QUEUED_CHANGES = 10_000
#: How often the LISTEN connection is checked, and how long the check may take: a
#: half-open TCP connection (the server or the path to it gone without a FIN or RST)
#: delivers no notification and raises no error, so only a round trip can tell. The probe
#: is the cheapest one there is (a simple-protocol ``SELECT`` with no target list: no
#: parse, plan or row; about 50 µs of the server's time). The timeout leaves room for a
#: loaded server or event loop: a false alarm costs a cache drop and a resync.
PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 2.0
#: The longest a lost feed can go unnoticed, so the longest a replica may serve a cached
#: session after another replica changed it: one interval plus one timeout. TCP keepalives
#: on the listening connection (``LISTEN_KEEPALIVE``) close it at the kernel level within
#: about 3 s of silence even if the event loop is too busy to probe.
FEED_LOSS_BOUND_S = PROBE_INTERVAL_S + PROBE_TIMEOUT_S
#: Every this many probes (about a minute), the probe also reads the database's clock, so
#: the offset of this replica's clock to it (``now``) follows a clock that was stepped.
CLOCK_SYNC_PROBES = 120
_DB_CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"
#: A new listening connection that takes longer is given up and tried again (a path that
#: went silent must not hold the reconnect for asyncpg's default minute).
LISTEN_CONNECT_TIMEOUT_S = 10.0
#: After a gap, approvals answered since the feed was last known good, less this margin
#: (how long the last good probe was before the gap is measured on this process's
#: monotonic clock, and ``finish_time`` on the database's: the margin covers the drift
#: between the two), are re-read, at most ``MAX_CATCH_UP`` of them: what was raised and
#: answered inside the gap reaches the watchers too.
CATCH_UP_MARGIN_S = 60.0
MAX_CATCH_UP = 1_000
#: TCP keepalive of the listening connection: idle seconds, interval seconds, probes.
LISTEN_KEEPALIVE = (1, 1, 2)
#: Longest a statement may take: a hung database fails calls (UNAVAILABLE) instead of
#: holding them (and the pool's connections) until the callers' deadlines.
COMMAND_TIMEOUT_S = 10.0
#: What makes a statement fail for want of a database (UNAVAILABLE, the caller denies).
_UNREACHABLE: tuple[type[Exception], ...] = (*CONNECTION_ERRORS, TimeoutError)
#: Sessions whose last invalidation is remembered (older ones: the floor, conservatively).
_TOUCHED_MAX = 50_000

#: Versioned migrations (append only: a released one is never edited).
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
CREATE TABLE decision_sessions (
  session_id TEXT PRIMARY KEY,
  mode TEXT NOT NULL,
  create_time DOUBLE PRECISION NOT NULL,
  consecutive_denials INTEGER NOT NULL DEFAULT 0,
  total_denials INTEGER NOT NULL DEFAULT 0,
  task TEXT NOT NULL DEFAULT ''
);
CREATE TABLE decision_session_rules (
  rule_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES decision_sessions(session_id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  effect TEXT NOT NULL,
  pattern TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  request_id TEXT,
  UNIQUE (session_id, request_id)
);
CREATE INDEX decision_session_rules_session ON decision_session_rules(session_id, seq);
CREATE TABLE decision_grants (
  grant_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES decision_sessions(session_id) ON DELETE CASCADE,
  pattern TEXT NOT NULL,
  remaining_uses INTEGER NOT NULL DEFAULT 0,
  unlimited BOOLEAN NOT NULL DEFAULT TRUE,
  expire_time DOUBLE PRECISION,
  create_time DOUBLE PRECISION NOT NULL,
  resolver TEXT NOT NULL DEFAULT ''
);
CREATE INDEX decision_grants_session ON decision_grants(session_id);
CREATE TABLE decision_approvals (
  approval_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES decision_sessions(session_id) ON DELETE CASCADE,
  call_id TEXT NOT NULL DEFAULT '',
  call_json TEXT NOT NULL,
  reason TEXT NOT NULL,
  risk TEXT NOT NULL,
  summary TEXT NOT NULL,
  state TEXT NOT NULL,
  create_time DOUBLE PRECISION NOT NULL,
  expire_time DOUBLE PRECISION NOT NULL,
  resolver TEXT NOT NULL DEFAULT '',
  resolution TEXT NOT NULL DEFAULT '',
  resolve_reason TEXT NOT NULL DEFAULT '',
  always_allow_applies BOOLEAN NOT NULL DEFAULT TRUE,
  finish_time DOUBLE PRECISION,
  waiter_seen DOUBLE PRECISION NOT NULL,
  rule_json TEXT NOT NULL DEFAULT ''
);
CREATE INDEX decision_approvals_session_call ON decision_approvals(session_id, call_id);
CREATE INDEX decision_approvals_pending ON decision_approvals(expire_time)
  WHERE state = 'pending';
CREATE INDEX decision_approvals_finished ON decision_approvals(finish_time)
  WHERE state <> 'pending';
""",
    ),
)

_APPROVAL_SELECT = f"SELECT {APPROVAL_COLUMNS} FROM decision_approvals"
_SESSION_SELECT = f"SELECT {SESSION_COLUMNS} FROM decision_sessions"
_RETURNING_SESSION = f"RETURNING {SESSION_COLUMNS}"
#: The database's clock in seconds since the epoch. Every time other replicas compare is
#: written and compared on it, inside the statements: approval deadlines and their
#: expiry, finish times (catch-up, retention), waiter heartbeats (``waiter_seen``) and the
#: re-attach window. A replica whose own clock is off by hours therefore expires, answers
#: and abandons nothing early and keeps nothing late.
_DB_NOW = "extract(epoch from now())::float8"


def _check_id(value: str, what: str) -> str:
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(
            f"{what} is {len(value):,} characters; the limit is {MAX_ID_CHARS:,}", argument=what
        )
    return value


class PostgresDecisionStore:
    """Sessions, rules, grants, approvals and counters on PostgreSQL, shared by replicas.

    Open with ``await PostgresDecisionStore.open(dsn)``; close with ``close``.
    """

    shared = True

    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        *,
        clock: Callable[[], float],
        cache_max_sessions: int,
        max_session_rules: int,
        meter: metrics.Meter | None = None,
    ) -> None:
        """Use ``open``."""
        self._pool = pool
        self._dsn = dsn
        self._clock = clock
        self._offset = 0.0
        """The database's clock less this replica's, measured on the listening connection
        (``now``)."""
        # Only the wall clock is re-measured while running: a clock a caller gave (a test's
        # fake one) is the caller's to move, measured against the database once per connect.
        self._sync_clock = clock is time.time
        self.max_session_rules = max_session_rules
        self._cache = SessionCache(cache_max_sessions)
        # Invalidation counter: a read that began at counter value s may be cached only if
        # its session was not invalidated after s (and no gap happened after s).
        self._seq = 0
        self._touched: OrderedDict[str, int] = OrderedDict()
        self._floor = 0
        self._origin = uuid.uuid4().hex[:16]
        """This store's id in notifications (its own are not news to it)."""
        self._listening = False
        self._listen_conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._changes: asyncio.Queue[str] = asyncio.Queue(MAX_QUEUED_CHANGES)
        self._resync_needed = asyncio.Event()
        self._listener: StoreListener | None = None
        self._last_good = time.monotonic()
        """When the change feed was last known to deliver (its latest good probe), on
        this process's monotonic clock."""
        self._missed_since: float | None = None
        """The earliest moment (monotonic) since which changes may have been missed and
        not yet caught up (None: nothing missed)."""
        self._fresh = False
        self._health_observers: list[Callable[[bool], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self.gaps = 0
        """How many times the change feed was lost (for tests and metrics)."""
        self.resyncs = 0
        """How many resynchronisations completed."""
        meter = meter or metrics.get_meter("stockade.decision")
        self._feed_events = meter.create_counter(
            "stockade.decision.store.feed",
            unit="{event}",
            description="The PostgreSQL change feed of this replica: lost (caches off) and "
            "resynced (back, caches on)",
        )
        self._grant_races = meter.create_counter(
            "stockade.decision.store.grant_races",
            unit="{decision}",
            description="ALLOWs decided again because another replica spent the counted "
            "grant's last use first",
        )

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        clock: Callable[[], float] = time.time,
        cache_max_sessions: int = DEFAULT_CACHE_MAX_SESSIONS,
        max_session_rules: int = DEFAULT_MAX_SESSION_RULES,
        pool_size: int = 10,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
        meter: metrics.Meter | None = None,
    ) -> PostgresDecisionStore:
        """Connect, apply the migrations (under the migration lock), start listening.

        ``DependencyUnavailable`` when the server cannot be reached.
        """
        conn = await connect(dsn, what="decision")
        try:
            await migrate(
                conn, MIGRATIONS, version_table="decision_schema_version", lock_key=_MIGRATION_LOCK
            )
        finally:
            await conn.close()
        pool = await open_pool(
            dsn,
            what="decision",
            min_size=1,
            max_size=pool_size,
            command_timeout=command_timeout_s,
            application_name=APPLICATION_NAME,
        )
        store = cls(
            pool,
            dsn,
            clock=clock,
            cache_max_sessions=cache_max_sessions,
            max_session_rules=max_session_rules,
            meter=meter,
        )
        try:
            await store._listen()
        except BaseException:
            await pool.close()
            raise
        store._tasks = [
            asyncio.create_task(store._keep_listening(), name="decision-store-listen"),
            asyncio.create_task(store._deliver(), name="decision-store-deliver"),
        ]
        return store

    # -- the change feed ----------------------------------------------------------------

    def now(self) -> float:
        """The database's clock as this replica estimates it: its own clock plus the
        offset measured on the listening connection (to within half a round trip). For
        what is compared in memory, where a statement cannot be (a scoped grant's "until"
        time on the ALLOW path), so that every replica agrees on it whatever its own
        clock says; deadlines, finish times and heartbeats are compared inside the
        statements, on the database's clock itself (``_DB_NOW``)."""
        return self._clock() + self._offset

    async def _measure_clock(self, conn: asyncpg.Connection, timeout: float | None) -> None:
        before = self._clock()
        db_now = float(await conn.fetchval(_DB_CLOCK, timeout=timeout))
        after = self._clock()
        self._offset = db_now - (before + after) / 2

    @property
    def listening(self) -> bool:
        """True while the change feed is connected (caches are used only then)."""
        return self._listening

    @property
    def cached_sessions(self) -> int:
        """How many sessions the in-memory cache holds now."""
        return len(self._cache)

    @property
    def cache_max_sessions(self) -> int:
        """How many sessions the cache holds at most."""
        return self._cache.max_sessions

    def on_changes(self, listener: StoreListener) -> None:
        """Tell ``listener`` about approvals other replicas change, and about resyncs."""
        self._listener = listener

    @property
    def fresh(self) -> bool:
        """True while the change feed is up and the store has caught up with what it
        missed: this replica then sees every other replica's change as it happens.

        False from the moment the feed is found lost until the resynchronisation after
        its return has finished. The replica then reports NOT_SERVING (its readiness
        probe fails, so Kubernetes routes new calls to replicas whose feed is up), and
        whatever still reaches it is served from the database with no cache, so it never
        acts on another replica's change late: a mode, rule, grant or answer made
        elsewhere applies here at once; only the live fan-out (watchers, instant waiter
        wake-ups) waits for the feed, and waiters poll meanwhile.
        """
        return self._fresh

    def on_health(self, observer: Callable[[bool], None]) -> None:
        """Call ``observer(fresh)`` on every change of ``fresh`` (the decision app mirrors
        it into the gRPC health status)."""
        self._health_observers.append(observer)
        observer(self._fresh)

    def _set_fresh(self, fresh: bool) -> None:
        if fresh == self._fresh:
            return
        self._fresh = fresh
        for observe in list(self._health_observers):
            try:
                observe(fresh)
            except Exception:  # an observer must not break the change feed
                log.exception("decision store: a health observer failed")

    async def _listen(self) -> None:
        conn = await connect(
            self._dsn,
            what="decision",
            application_name=LISTEN_APPLICATION_NAME,
            timeout=LISTEN_CONNECT_TIMEOUT_S,
        )
        idle_s, interval_s, count = LISTEN_KEEPALIVE
        keep_alive(conn, idle_s=idle_s, interval_s=interval_s, count=count)
        try:
            await conn.add_listener(CHANNEL, self._on_notify)
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._on_terminated)
        try:
            await self._measure_clock(conn, LISTEN_CONNECT_TIMEOUT_S)
        except BaseException:
            await conn.close()
            raise
        self._listen_conn = conn
        self._lost.clear()
        # Anything read before this point may have missed a notification: start clean.
        self._gap()
        self._listening = True
        if not self.gaps:
            self._set_fresh(True)  # first start: nothing was missed yet

    def _on_terminated(self, conn: object) -> None:
        self._feed_lost("the LISTEN connection closed")

    def _feed_lost(self, why: str) -> None:
        if not self._listening:
            return
        self._listening = False
        self.gaps += 1
        self._missed(self._last_good)
        self._set_fresh(False)
        self._feed_events.add(1, {"event": "lost"})
        self._gap()
        self._lost.set()
        if not self._closed:
            log.warning("decision store: %s; caches off until it is back", why)

    async def _keep_listening(self) -> None:
        """Probe the LISTEN connection; when it is lost, reconnect and resynchronise."""
        backoff = 0.1
        probes = 0
        while not self._closed:
            if self._listening:
                conn = self._listen_conn
                probes += 1
                try:
                    assert conn is not None
                    if self._sync_clock and probes % CLOCK_SYNC_PROBES == 0:
                        await self._measure_clock(conn, PROBE_TIMEOUT_S)
                    else:
                        await conn.execute("SELECT", timeout=PROBE_TIMEOUT_S)
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # any failure: the feed can no longer be trusted
                    self._feed_lost(f"the LISTEN connection failed ({type(err).__name__})")
                else:
                    self._last_good = time.monotonic()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._lost.wait(), PROBE_INTERVAL_S)
                    continue
            old, self._listen_conn = self._listen_conn, None
            if old is not None:
                old.terminate()
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("decision store: cannot listen yet (%s); retrying", err)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.1
            log.info("decision store: change feed back; resynchronising")
            self._resync_needed.set()
            with contextlib.suppress(asyncio.QueueFull):
                self._changes.put_nowait("")  # wake the delivery task to resync

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        """One change announced by some replica (runs in the event loop, synchronously)."""
        origin, _, rest = str(payload).partition("|")
        kind, _, rest = rest.partition("|")
        if origin == self._origin:
            return  # this replica already acted on its own change
        if kind == "s":  # a session's row, rules or grants changed
            self._invalidate(rest)
        elif kind == "a":  # an approval was raised, answered or expired
            approval_id, _, session_id = rest.partition("|")
            if session_id:
                self._invalidate(session_id)  # an answer may have added a grant
            try:
                self._changes.put_nowait(approval_id)
            except asyncio.QueueFull:
                self._missed(self._last_good)
                self._resync_needed.set()
        elif kind == "x":  # a session was deleted
            self._invalidate(rest)
        else:
            log.warning("decision store: ignored a malformed change notification")

    async def _deliver(self) -> None:
        """Hand announced approval changes to the broker, in order; resync when asked."""
        while True:
            approval_id = await self._changes.get()
            try:
                if self._resync_needed.is_set():
                    await self._resync()
                    continue
                if not approval_id or self._listener is None:
                    continue
                try:
                    rec = await self.get_approval(approval_id)
                except ApprovalNotFound:
                    continue  # deleted since (its session was deleted)
                await self._listener.approval_changed(rec)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The database is unreachable or the broker failed: do not lose the change,
                # resynchronise as soon as the next change (or the feed's return) arrives.
                log.exception("decision store: delivering a change failed; will resync")
                self._missed(self._last_good)
                self._resync_needed.set()
                await asyncio.sleep(0.5)
                with contextlib.suppress(asyncio.QueueFull):
                    self._changes.put_nowait("")

    def _missed(self, since: float) -> None:
        """Changes since ``since`` may not have been delivered: the next resync re-reads
        the approvals answered from then on."""
        if self._missed_since is None or since < self._missed_since:
            self._missed_since = since

    async def _resync(self) -> None:
        self._resync_needed.clear()
        # Drain what is queued: the re-reads below cover it.
        while not self._changes.empty():
            self._changes.get_nowait()
        self._gap()
        since, self._missed_since = self._missed_since, None
        try:
            pending = await self.pending_approvals()
            finished = (
                []
                if since is None
                else await self.finished_since(time.monotonic() - since + CATCH_UP_MARGIN_S)
            )
            if self._listener is not None:
                await self._listener.resynced(pending, finished)
        except BaseException:
            if since is not None:
                self._missed(since)  # not caught up: the next resync covers it again
            raise
        self.resyncs += 1
        self._feed_events.add(1, {"event": "resynced"})
        if self._listening and not self._resync_needed.is_set():
            self._set_fresh(True)

    async def drop_listen_connection(self) -> None:
        """Cut the LISTEN connection from the server's side (for fault tests)."""
        conn = self._listen_conn
        if conn is None:
            return
        pid = conn.get_server_pid()
        async with self._pool.acquire() as admin:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)

    # -- the session cache --------------------------------------------------------------

    def _gap(self) -> None:
        """Forget everything cached: it may have missed a change."""
        self._seq += 1
        self._floor = self._seq
        self._cache.clear()
        self._touched.clear()

    def _invalidate(self, session_id: str) -> None:
        self._seq += 1
        self._touched[session_id] = self._seq
        self._touched.move_to_end(session_id)
        while len(self._touched) > _TOUCHED_MAX:
            _, seq = self._touched.popitem(last=False)
            self._floor = max(self._floor, seq)
        self._cache.pop(session_id, None)

    def _written(self, rec: SessionRecord, started: int) -> None:
        """This replica changed the session's row (mode, counters) and read ``rec`` back
        in the same statement: keep it cached (with the compiled rules, which the row does
        not affect) if nothing else changed the session since ``started``; reads still in
        flight must not cache what they saw before."""
        sid = rec.session_id
        fresh = self._may_cache(sid, started)
        self._seq += 1
        self._touched[sid] = self._seq
        self._touched.move_to_end(sid)
        entry = self._cache.get(sid)
        if not fresh:
            self._cache.pop(sid, None)
        elif entry is not None:
            entry.record = rec
        else:
            self._cache.remember(sid, CachedSession(rec))

    def _may_cache(self, session_id: str, started: int) -> bool:
        return (
            self._listening
            and self._floor <= started
            and self._touched.get(session_id, 0) <= started
        )

    # -- plumbing -----------------------------------------------------------------------

    async def _run(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection; a lost database is UNAVAILABLE."""
        if self._closed:
            raise DependencyUnavailable("the decision store is closed")
        try:
            async with self._pool.acquire() as conn:
                # The pool's proxy forwards every Connection method.
                return await work(cast(asyncpg.Connection, conn))
        except _UNREACHABLE as err:
            raise DependencyUnavailable(
                f"the decision database is unreachable: {type(err).__name__}"
            ) from err

    async def _change_session(
        self,
        session_id: str,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        kind: str = "s",
    ) -> T:
        """Run ``work`` in one transaction that also announces the change of ``session_id``
        to every replica (``kind`` "s": its row, rules or grants; "x": deleted); this
        replica's cached copy is dropped whether or not the transaction commits."""

        async def run(conn: asyncpg.Connection) -> T:
            async with conn.transaction():
                result = await work(conn)
                await self._notify(conn, kind, session_id)
            return result

        try:
            return await self._run(run)
        finally:
            self._invalidate(session_id)

    async def _notify(self, conn: asyncpg.Connection, kind: str, *parts: str) -> None:
        await conn.execute(
            "SELECT pg_notify($1, $2)", CHANNEL, "|".join((self._origin, kind, *parts))
        )

    async def close(self) -> None:
        """Stop listening and close the connections."""
        if self._closed:
            return
        self._closed = True
        self._listening = False
        self._set_fresh(False)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._listen_conn is not None:
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self._listen_conn.close(timeout=5)
        await self._pool.close()

    # -- sessions -----------------------------------------------------------------------

    async def create_session(
        self, session_id: str | None, mode: Mode, *, task: str = ""
    ) -> tuple[SessionRecord, bool]:
        """Create a session (or return the existing one with that id); True if created."""
        check_task(task)
        sid = _check_id(session_id or new_id("ses"), "session_id")
        existing = await self.find_session(sid)
        if existing is not None:
            return existing, False

        async def insert(conn: asyncpg.Connection) -> bool:
            status = await conn.execute(
                "INSERT INTO decision_sessions (session_id, mode, create_time, task) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT (session_id) DO NOTHING",
                sid,
                mode.value,
                self.now(),
                task,
            )
            return bool(status == "INSERT 0 1")

        created = await self._run(insert)
        found = await self.find_session(sid)
        if found is None:  # deleted by another replica in between
            raise session_not_found(sid, meanwhile=True)
        return found, created

    async def find_session(self, session_id: str) -> SessionRecord | None:
        """The session (from the cache while the change feed is up), or None."""
        cached = self._cache.record(session_id)
        if cached is not None:
            return cached
        if len(session_id) > MAX_ID_CHARS:
            return None  # no such session can exist
        started = self._seq
        row = await self._run(
            lambda c: c.fetchrow(_SESSION_SELECT + " WHERE session_id = $1", session_id)
        )
        if row is None:
            return None
        rec = session_from_row(row)
        if self._may_cache(session_id, started) and session_id not in self._cache:
            self._cache.remember(session_id, CachedSession(rec))
        return rec

    async def get_session(self, session_id: str) -> SessionRecord:
        """The session; ``SessionNotFound`` if absent."""
        rec = await self.find_session(session_id)
        if rec is None:
            raise session_not_found(session_id)
        return rec

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session with its rules, grants and approvals (cascading)."""

        async def delete(conn: asyncpg.Connection) -> bool:
            status = await conn.execute(
                "DELETE FROM decision_sessions WHERE session_id = $1", session_id
            )
            return bool(status != "DELETE 0")

        if len(session_id) > MAX_ID_CHARS:
            return False
        return await self._change_session(session_id, delete, kind="x")

    async def set_mode(self, session_id: str, mode: Mode) -> SessionRecord:
        """Change a session's mode (every replica's cached copy is dropped)."""
        rec = await self._update_session(
            session_id, "UPDATE decision_sessions SET mode = $2 WHERE session_id = $1 ", mode.value
        )
        if rec is None:
            raise session_not_found(session_id)
        return rec

    async def record_outcome(self, session_id: str, denied: bool) -> SessionRecord:
        """Update the denial counters (DEC-9) in one atomic statement.

        An ALLOW on a session whose cached run of denials is 0 writes nothing (the common
        path stays free of database round trips).
        """
        rec = await self.get_session(session_id)
        if not denied and rec.consecutive_denials == 0:
            return rec
        if denied:
            sql = (
                "UPDATE decision_sessions SET consecutive_denials = consecutive_denials + 1, "
                "total_denials = total_denials + 1 WHERE session_id = $1 "
            )
        else:
            sql = (
                "UPDATE decision_sessions SET consecutive_denials = 0 "
                "WHERE session_id = $1 AND consecutive_denials <> 0 "
            )

        new = await self._update_session(session_id, sql)
        if new is not None:
            return new
        if denied:
            raise session_not_found(session_id)
        return await self.get_session(session_id)  # already 0 (another replica reset it)

    async def _update_session(
        self, session_id: str, sql: str, *args: object
    ) -> SessionRecord | None:
        """Run one ``UPDATE`` of the session's row (``sql``, with ``$1`` the session id)
        and announce it; return the row as it is now (kept in this replica's cache, see
        ``_written``), or None when no row changed."""

        async def update(conn: asyncpg.Connection) -> Any:
            async with conn.transaction():
                row = await conn.fetchrow(sql + _RETURNING_SESSION, session_id, *args)
                if row is not None:
                    await self._notify(conn, "s", session_id)
            return row

        started = self._seq
        try:
            row = await self._run(update)
        except BaseException:
            self._invalidate(session_id)
            raise
        if row is None:
            self._invalidate(session_id)
            return None
        rec = session_from_row(row)
        self._written(rec, started)
        return rec

    # -- rules --------------------------------------------------------------------------

    async def _lock_session(self, conn: asyncpg.Connection, session_id: str) -> None:
        """Lock the session's row for this transaction (its rules and grants change one
        writer at a time, so the rule limit and rule order hold across replicas)."""
        if (
            await conn.fetchval(
                "SELECT 1 FROM decision_sessions WHERE session_id = $1 FOR UPDATE", session_id
            )
            is None
        ):
            raise session_not_found(session_id)

    async def _check_capacity(self, conn: asyncpg.Connection, session_id: str) -> None:
        count = int(
            await conn.fetchval(
                "SELECT (SELECT count(*) FROM decision_session_rules WHERE session_id = $1) + "
                "(SELECT count(*) FROM decision_grants WHERE session_id = $1)",
                session_id,
            )
        )
        check_rule_count(session_id, count, self.max_session_rules)

    async def add_rule(
        self, session_id: str, effect: Effect, pattern: str, reason: str = "", request_id: str = ""
    ) -> Rule:
        """Add a SESSION rule (idempotent by request_id); ``InvalidPattern`` if it is bad."""
        await self.get_session(session_id)
        _check_id(request_id, "request_id")
        rule = new_session_rule(effect, pattern, reason)

        async def insert(conn: asyncpg.Connection) -> Rule:
            await self._lock_session(conn, session_id)
            if request_id:
                row = await conn.fetchrow(
                    f"SELECT {RULE_COLUMNS} FROM decision_session_rules "
                    "WHERE session_id = $1 AND request_id = $2",
                    session_id,
                    request_id,
                )
                if row is not None:
                    return rule_from_row(row)
            await self._check_capacity(conn, session_id)
            await conn.execute(
                "INSERT INTO decision_session_rules (rule_id, session_id, seq, effect, "
                "pattern, reason, request_id) VALUES ($1, $2, (SELECT COALESCE(MAX(seq), 0) "
                "+ 1 FROM decision_session_rules WHERE session_id = $2), $3, $4, $5, $6)",
                rule.rule_id,
                session_id,
                effect.value,
                rule.pattern,
                reason,
                request_id or None,
            )
            return rule

        return await self._change_session(session_id, insert)

    async def remove_rule(self, session_id: str, rule_id: str) -> bool:
        """Remove a session rule by id."""

        async def delete(conn: asyncpg.Connection) -> bool:
            status = await conn.execute(
                "DELETE FROM decision_session_rules WHERE session_id = $1 AND rule_id = $2",
                session_id,
                rule_id,
            )
            return bool(status != "DELETE 0")

        if len(session_id) > MAX_ID_CHARS:
            return False
        return await self._change_session(session_id, delete)

    async def list_rules(self, session_id: str) -> list[Rule]:
        """The session's own rules in order (grants are listed by ``list_grants``)."""
        rows = await self._run(
            lambda c: c.fetch(
                f"SELECT {RULE_COLUMNS} FROM decision_session_rules "
                "WHERE session_id = $1 ORDER BY seq",
                session_id,
            )
        )
        return [rule_from_row(r) for r in rows]

    async def check_rule_capacity(self, session_id: str) -> None:
        """``ResourceExhausted`` when the session holds ``max_session_rules`` already."""
        await self._run(lambda c: self._check_capacity(c, session_id))

    async def session_rules(self, session_id: str, *, cwd: str = "/") -> RuleIndex:
        """The session's rules and live grants, compiled (cached until something changes,
        on this replica or any other)."""
        rec = await self.get_session(session_id)
        cached = self._cache.get(rec.session_id)
        now = self.now()
        if cached is not None:
            index = cached.current_index(now)
            if index is not None:
                return index
        started = self._seq
        rules, grants = await self._run(lambda c: self._read_rules(c, session_id, now))
        if not self._may_cache(session_id, started):
            return CachedSession(rec).compile(rules, grants, cwd)  # for this call only
        entry = self._cache.get(session_id) or CachedSession(rec)
        index = entry.compile(rules, grants, cwd)
        self._cache.remember(session_id, entry)
        return index

    async def _read_rules(
        self, conn: asyncpg.Connection, session_id: str, now: float
    ) -> tuple[list[Rule], list[GrantRecord]]:
        # One snapshot for both, so rules and grants belong to the same moment.
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            rule_rows = await conn.fetch(
                f"SELECT {RULE_COLUMNS} FROM decision_session_rules "
                "WHERE session_id = $1 ORDER BY seq",
                session_id,
            )
            grant_rows = await conn.fetch(
                f"SELECT {GRANT_COLUMNS} FROM decision_grants "
                "WHERE session_id = $1 ORDER BY create_time",
                session_id,
            )
        return [rule_from_row(r) for r in rule_rows], live_grants(session_id, grant_rows, now)

    # -- grants -------------------------------------------------------------------------

    async def add_grant(
        self,
        session_id: str,
        pattern: str,
        *,
        remaining_uses: int = 0,
        expire_time: float | None = None,
        resolver: str = "",
    ) -> GrantRecord:
        """Add a scoped ALLOW grant for the session."""
        rule = new_grant_rule(pattern, resolver, remaining_uses)
        gid = rule.rule_id
        now = self.now()

        async def insert(conn: asyncpg.Connection) -> None:
            await self._lock_session(conn, session_id)
            await self._check_capacity(conn, session_id)
            await conn.execute(
                "INSERT INTO decision_grants (grant_id, session_id, pattern, remaining_uses, "
                "unlimited, expire_time, create_time, resolver) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                gid,
                session_id,
                pattern,
                remaining_uses,
                remaining_uses == 0,
                expire_time,
                now,
                resolver,
            )

        await self._change_session(session_id, insert)
        return GrantRecord(gid, session_id, rule, remaining_uses, expire_time, now, resolver)

    async def list_grants(self, session_id: str) -> list[GrantRecord]:
        """The session's live grants."""
        _, grants = await self._run(lambda c: self._read_rules(c, session_id, self.now()))
        return grants

    async def revoke_grant(self, grant_id: str) -> bool:
        """Delete a grant; True if it existed."""

        async def delete(conn: asyncpg.Connection) -> str | None:
            async with conn.transaction():
                sid = await conn.fetchval(
                    "DELETE FROM decision_grants WHERE grant_id = $1 RETURNING session_id",
                    grant_id,
                )
                if sid is not None:
                    await self._notify(conn, "s", sid)
            return None if sid is None else str(sid)

        sid = await self._run(delete)
        if sid is None:
            return False
        self._invalidate(sid)
        return True

    async def use_grants(self, session_id: str, rules: tuple[Rule, ...]) -> bool:
        """Spend one use of each counted grant among ``rules``; delete those used up.

        Each use is a conditional decrement, so across replicas a grant's last use is
        spent once; False when one was used up elsewhere first (decide again).
        """
        cached = self._cache.get(session_id)
        grants = cached.grants_by_rule if cached is not None else None
        if grants is None:
            # Not cached (feed down, or evicted): look the rules up in the database.
            ids = [r.rule_id for r in rules if r.source is Source.SESSION]
            if not ids:
                return True
            rows = await self._run(
                lambda c: c.fetch(
                    "SELECT grant_id, unlimited FROM decision_grants WHERE grant_id = ANY($1)",
                    ids,
                )
            )
            counted = [str(r[0]) for r in rows if not r[1]]
            gone = {r.rule_id for r in rules if r.rule_id.startswith("grant-")} - {
                str(r[0]) for r in rows
            }
            if gone:
                self._invalidate(session_id)
                return False
        else:
            counted = [g.grant_id for g in counted_grants(grants, rules)]
        if not counted:
            return True

        async def spend(conn: asyncpg.Connection) -> bool:
            for gid in counted:
                left = await conn.fetchval(
                    "UPDATE decision_grants SET remaining_uses = remaining_uses - 1 "
                    "WHERE grant_id = $1 AND NOT unlimited AND remaining_uses >= 1 "
                    "RETURNING remaining_uses",
                    gid,
                )
                if left is None:
                    raise _Spent  # rolls back the uses spent so far
                if left == 0:
                    await conn.execute("DELETE FROM decision_grants WHERE grant_id = $1", gid)
            return True

        try:
            return await self._change_session(session_id, spend)
        except _Spent:
            self._grant_races.add(1)
            return False

    # -- approvals ----------------------------------------------------------------------

    async def insert_approval(
        self,
        rec: ApprovalRecord,
        limits: PendingLimits | None = None,
        *,
        timeout_s: float | None = None,
    ) -> ApprovalRecord:
        """Store a new pending approval, announce it to every replica and return it as
        stored; ``ResourceExhausted`` past ``limits``. With ``timeout_s`` it is created now
        and due ``timeout_s`` later on the database's clock, whatever this replica's clock
        says.

        The limits are exact across replicas: the count and the insert run in one
        transaction under a transaction-scoped advisory lock that every replica's insert
        takes, so two asks can never both see room for one. (It serialises the raising of
        approvals, which wait for people anyway; answers and reads do not take it.)
        """

        if timeout_s is None:
            times = "$9, $10"
            time_args: tuple[float, ...] = (rec.create_time, rec.expire_time)
        else:
            times = f"{_DB_NOW}, {_DB_NOW} + $9"
            time_args = (timeout_s,)

        async def insert(conn: asyncpg.Connection) -> Any:
            async with conn.transaction():
                if limits is not None:
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", _APPROVALS_LOCK)
                    counts = await conn.fetchrow(
                        "SELECT count(*), count(*) FILTER (WHERE session_id = $1) "
                        "FROM decision_approvals WHERE state = 'pending'",
                        rec.session_id,
                    )
                    assert counts is not None  # an aggregate always returns a row
                    check_pending(rec.session_id, int(counts[0]), int(counts[1]), limits)
                n = len(time_args)
                stored = await conn.fetchrow(
                    "INSERT INTO decision_approvals (approval_id, session_id, call_id, call_json, "
                    "reason, risk, summary, state, always_allow_applies, rule_json, "
                    "create_time, expire_time, waiter_seen) "
                    f"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, ${9 + n}, ${10 + n}, {times}, "
                    f"{_DB_NOW}) RETURNING create_time, expire_time",
                    rec.approval_id,
                    rec.session_id,
                    rec.call.call_id,
                    call_to_json(rec.call),
                    rec.reason,
                    rec.risk,
                    rec.summary,
                    rec.state.value,
                    *time_args,
                    rec.always_allow_applies,
                    rule_to_json(rec.rule),
                )
                await self._notify(conn, "a", rec.approval_id, "")
            return stored

        stored = await self._run(insert)
        return replace(rec, create_time=float(stored[0]), expire_time=float(stored[1]))

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        """One approval (always read from the database); ``ApprovalNotFound`` if absent."""
        row = None
        if len(approval_id) <= MAX_ID_CHARS:
            row = await self._run(
                lambda c: c.fetchrow(_APPROVAL_SELECT + " WHERE approval_id = $1", approval_id)
            )
        if row is None:
            raise ApprovalNotFound(
                f"approval {approval_id!r} does not exist", approval_id=approval_id
            )
        return approval_from_row(row)

    async def approval_time_left(self, approval_id: str) -> tuple[ApprovalRecord, float]:
        """One approval and the seconds until its deadline on the database's clock (read
        in the same statement); ``ApprovalNotFound`` if absent."""
        row = None
        if len(approval_id) <= MAX_ID_CHARS:
            row = await self._run(
                lambda c: c.fetchrow(
                    f"SELECT {APPROVAL_COLUMNS}, expire_time - {_DB_NOW} "
                    "FROM decision_approvals WHERE approval_id = $1",
                    approval_id,
                )
            )
        if row is None:
            raise ApprovalNotFound(
                f"approval {approval_id!r} does not exist", approval_id=approval_id
            )
        return approval_from_row(row), float(row[-1])

    async def pending_for_call(self, session_id: str, call_id: str) -> ApprovalRecord | None:
        """The pending approval of one call, if a retried Decide already made one."""
        if not call_id:
            return None
        row = await self._run(
            lambda c: c.fetchrow(
                _APPROVAL_SELECT + " WHERE session_id = $1 AND call_id = $2 AND state = 'pending'",
                session_id,
                call_id,
            )
        )
        return None if row is None else approval_from_row(row)

    async def pending_approvals(self, session_id: str = "") -> list[ApprovalRecord]:
        """Pending approvals, oldest first, optionally of one session."""
        if session_id:
            rows = await self._run(
                lambda c: c.fetch(
                    _APPROVAL_SELECT
                    + " WHERE state = 'pending' AND session_id = $1 ORDER BY create_time",
                    session_id,
                )
            )
        else:
            rows = await self._run(
                lambda c: c.fetch(
                    _APPROVAL_SELECT + " WHERE state = 'pending' ORDER BY create_time"
                )
            )
        return [approval_from_row(r) for r in rows]

    async def finish_approval(
        self,
        approval_id: str,
        state: ApprovalState,
        *,
        resolver: str = "",
        resolution: str = "",
        reason: str = "",
        in_time: bool = False,
    ) -> bool:
        """Move a pending approval to ``state``, finished now on the database's clock;
        False if it was no longer pending (or, with ``in_time``, if its deadline had
        passed on the database's clock).

        One conditional UPDATE is "first answer wins" across replicas: under READ
        COMMITTED a second UPDATE of the same row waits for the first to commit, re-checks
        ``state = 'pending'`` on the new row version, and changes nothing.
        """
        deadline = f" AND expire_time > {_DB_NOW}" if in_time else ""

        async def update(conn: asyncpg.Connection) -> str | None:
            async with conn.transaction():
                sid = await conn.fetchval(
                    "UPDATE decision_approvals SET state = $2, resolver = $3, resolution = $4, "
                    f"resolve_reason = $5, finish_time = {_DB_NOW} "
                    f"WHERE approval_id = $1 AND state = 'pending'{deadline} RETURNING session_id",
                    approval_id,
                    state.value,
                    resolver,
                    resolution,
                    reason,
                )
                if sid is not None:
                    await self._notify(conn, "a", approval_id, str(sid))
            return None if sid is None else str(sid)

        return await self._run(update) is not None

    async def finished_since(self, age_s: float, limit: int = MAX_CATCH_UP) -> list[ApprovalRecord]:
        """Approvals answered or expired in the last ``age_s`` seconds of the database's
        clock (oldest first, at most ``limit``): what a replica re-reads after a gap in
        its change feed."""
        rows = await self._run(
            lambda c: c.fetch(
                _APPROVAL_SELECT + f" WHERE state <> 'pending' AND finish_time >= {_DB_NOW} - $1 "
                "ORDER BY finish_time LIMIT $2",
                age_s,
                limit,
            )
        )
        return [approval_from_row(r) for r in rows]

    async def expire_overdue(
        self, reason: str, approval_id: str = "", limit: int = 500
    ) -> list[ApprovalRecord]:
        """Expire (up to ``limit`` of) the pending approvals (only ``approval_id``, if
        given) whose deadline has passed on the database's clock: one conditional UPDATE,
        so of replicas sweeping at once each approval is expired by one, and a replica
        whose own clock runs hours fast expires nothing early."""
        only = " AND approval_id = $3" if approval_id else ""
        args: tuple[object, ...] = (reason, limit, approval_id) if approval_id else (reason, limit)
        overdue = f"state = 'pending' AND expire_time <= {_DB_NOW}"
        return await self._finish_where(
            "UPDATE decision_approvals SET state = 'expired', resolve_reason = $1, "
            f"finish_time = {_DB_NOW} WHERE approval_id IN (SELECT approval_id FROM "
            f"decision_approvals WHERE {overdue}{only} ORDER BY expire_time LIMIT $2 "
            f"FOR UPDATE SKIP LOCKED) AND {overdue} RETURNING approval_id, session_id",
            *args,
        )

    async def _finish_where(self, update: str, *args: object) -> list[ApprovalRecord]:
        """Run ``update`` (an UPDATE of approvals ``RETURNING approval_id, session_id``),
        announce each approval it finished, and return them as stored now."""

        async def run(conn: asyncpg.Connection) -> list[Any]:
            async with conn.transaction():
                ids = await conn.fetch(update, *args)
                for approval_id, session_id in ids:
                    await self._notify(conn, "a", approval_id, session_id)
                if not ids:
                    return []
                return list(
                    await conn.fetch(
                        _APPROVAL_SELECT + " WHERE approval_id = ANY($1)", [r[0] for r in ids]
                    )
                )

        return [approval_from_row(r) for r in await self._run(run)]

    async def delete_finished_approvals(self, older_than_s: float, limit: int = 5_000) -> int:
        """Delete up to ``limit`` answered or expired approvals finished more than
        ``older_than_s`` seconds ago on the database's clock."""
        status = await self._run(
            lambda c: c.execute(
                "DELETE FROM decision_approvals WHERE approval_id IN (SELECT approval_id FROM "
                f"decision_approvals WHERE finish_time < {_DB_NOW} - $1 AND state <> 'pending' "
                "LIMIT $2)",
                older_than_s,
                limit,
            )
        )
        return int(str(status).rpartition(" ")[2] or 0)

    async def count_approvals(self) -> int:
        """All stored approvals (for tests and metrics)."""
        return int(await self._run(lambda c: c.fetchval("SELECT count(*) FROM decision_approvals")))

    async def touch_waiters(self, approval_ids: Sequence[str]) -> None:
        """Record that callers on this replica wait for ``approval_ids`` now (the
        database's now: every replica's heartbeats are on one clock)."""
        ids = list(approval_ids)
        if not ids:
            return
        await self._run(
            lambda c: c.execute(
                f"UPDATE decision_approvals SET waiter_seen = {_DB_NOW} "
                "WHERE approval_id = ANY($1) AND state = 'pending'",
                ids,
            )
        )

    async def abandon_unwatched(self, older_than_s: float, reason: str) -> list[ApprovalRecord]:
        """Expire (up to 500 of) the pending approvals no replica has waited for in the
        last ``older_than_s`` seconds of the database's clock: one conditional UPDATE, so
        a waiter that touched its approval first keeps it, and of two sweeping replicas
        each approval is abandoned by one. A replica whose own clock is off by minutes
        abandons nothing early and keeps nothing late."""
        return await self._finish_where(
            "UPDATE decision_approvals SET state = 'expired', resolve_reason = $2, "
            f"finish_time = {_DB_NOW} WHERE approval_id IN (SELECT approval_id FROM "
            f"decision_approvals WHERE state = 'pending' AND waiter_seen <= {_DB_NOW} - $1 "
            "ORDER BY waiter_seen LIMIT 500 FOR UPDATE SKIP LOCKED) "
            f"AND state = 'pending' AND waiter_seen <= {_DB_NOW} - $1 "
            "RETURNING approval_id, session_id",
            older_than_s,
            reason,
        )


class _Spent(Exception):
    """A counted grant was used up by another replica first (rolls the spending back)."""
