"""The decision store on one SQLite file (DEC-6): the embedded default, one replica.

Sessions with their mode and denial counters, session rules, scoped "always allow"
grants and approvals all live in one database file and survive a restart. Reads that
every decision needs (the session's mode, counters and compiled rules) are served from
an in-memory cache that every write keeps current, so a plain ALLOW costs no SQL. The
cache is an LRU bounded by ``cache_max_sessions`` (a session falls out and is read back
on its next call), so millions of sessions do not grow the service's memory.

Approvals are indexed by state and by (session, call), and resolved or expired ones are
deleted after a retention period (``delete_finished_approvals``), so a request costs the
same after a million approvals as after ten. Older databases are upgraded in place when
opened (columns added, indexes created). What is not SQL (records, checks, row mappers,
the session cache) is shared with the PostgreSQL store (``model.py``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import aiosqlite

from stockade.decision.modes import Mode
from stockade.decision.rules import Effect, Rule, RuleIndex
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
from stockade.errors import ApprovalNotFound

_SCHEMA = """
PRAGMA journal_mode=WAL;
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY,
  mode TEXT NOT NULL,
  create_time REAL NOT NULL,
  consecutive_denials INTEGER NOT NULL DEFAULT 0,
  total_denials INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS session_rules (
  rule_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  effect TEXT NOT NULL,
  pattern TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  request_id TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS session_rules_request
  ON session_rules(session_id, request_id) WHERE request_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS grants (
  grant_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
  pattern TEXT NOT NULL,
  remaining_uses INTEGER NOT NULL DEFAULT 0,
  unlimited INTEGER NOT NULL DEFAULT 1,
  expire_time REAL,
  create_time REAL NOT NULL,
  resolver TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS approvals (
  approval_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions(session_id) ON DELETE CASCADE,
  call_id TEXT NOT NULL DEFAULT '',
  call_json TEXT NOT NULL,
  reason TEXT NOT NULL,
  risk TEXT NOT NULL,
  summary TEXT NOT NULL,
  state TEXT NOT NULL,
  create_time REAL NOT NULL,
  expire_time REAL NOT NULL,
  resolver TEXT NOT NULL DEFAULT '',
  resolution TEXT NOT NULL DEFAULT '',
  resolve_reason TEXT NOT NULL DEFAULT '',
  always_allow_applies INTEGER NOT NULL DEFAULT 1,
  finish_time REAL,
  rule_json TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS session_rules_session ON session_rules(session_id, seq);
CREATE INDEX IF NOT EXISTS grants_session ON grants(session_id);
CREATE INDEX IF NOT EXISTS approvals_session_call ON approvals(session_id, call_id);
CREATE INDEX IF NOT EXISTS approvals_state_expiry ON approvals(state, expire_time);
"""

_MIGRATIONS = (
    # (table, column, definition, backfill): columns added after the first release of the
    # schema, with the statement that fills them in for existing rows.
    ("approvals", "always_allow_applies", "INTEGER NOT NULL DEFAULT 1", None),
    ("sessions", "task", "TEXT NOT NULL DEFAULT ''", None),
    (
        "approvals",
        "finish_time",
        "REAL",
        # Answered before the upgrade: the deadline is the latest the answer can have come.
        "UPDATE approvals SET finish_time = expire_time WHERE state <> 'pending'",
    ),
    # The rule that asked (JSON of the winning rule); '' for approvals made before it was
    # kept: the reason they carry is all that is known of their rule.
    ("approvals", "rule_json", "TEXT NOT NULL DEFAULT ''", None),
)
# Created after the migrations: they use columns older databases only have from then on.
_LATE_INDEXES = ("CREATE INDEX IF NOT EXISTS approvals_finished ON approvals(finish_time)",)


class SQLiteDecisionStore:
    """Sessions, session rules, grants and approvals in one SQLite file (one replica)."""

    shared = False
    """Only this process writes the file: nothing changes behind its back."""

    def __init__(
        self,
        db: aiosqlite.Connection,
        *,
        clock: Callable[[], float] = time.time,
        cache_max_sessions: int = DEFAULT_CACHE_MAX_SESSIONS,
        max_session_rules: int = DEFAULT_MAX_SESSION_RULES,
    ):
        self._db = db
        self._clock = clock
        self._cache = SessionCache(cache_max_sessions)
        self.max_session_rules = max_session_rules

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        cache_max_sessions: int = DEFAULT_CACHE_MAX_SESSIONS,
        max_session_rules: int = DEFAULT_MAX_SESSION_RULES,
    ) -> SQLiteDecisionStore:
        """Open (and create if needed) the database at ``path``, upgrading an older schema
        in place."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        db = await aiosqlite.connect(str(path))
        await db.executescript(_SCHEMA)
        for table, column, definition, backfill in _MIGRATIONS:
            async with db.execute(f"PRAGMA table_info({table})") as cur:
                columns = {row[1] for row in await cur.fetchall()}
            if column not in columns:
                await db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
                if backfill:
                    await db.execute(backfill)
        for statement in _LATE_INDEXES:
            await db.execute(statement)
        await db.execute("PRAGMA foreign_keys=ON")
        await db.commit()
        return cls(
            db,
            clock=clock,
            cache_max_sessions=cache_max_sessions,
            max_session_rules=max_session_rules,
        )

    def now(self) -> float:
        """The store's one clock: deadlines, finish times, retention and the broker's
        bookkeeping are all measured on it (one replica, one clock source)."""
        return self._clock()

    @property
    def cached_sessions(self) -> int:
        """How many sessions the in-memory cache holds now."""
        return len(self._cache)

    @property
    def cache_max_sessions(self) -> int:
        """How many sessions the cache holds at most."""
        return self._cache.max_sessions

    async def close(self) -> None:
        """Close the database."""
        await self._db.close()

    # -- sessions -----------------------------------------------------------------------

    async def create_session(
        self, session_id: str | None, mode: Mode, *, task: str = ""
    ) -> tuple[SessionRecord, bool]:
        """Create a session (or return the existing one with that id); True if created."""
        check_task(task)
        sid = session_id or new_id("ses")
        existing = await self.find_session(sid)
        if existing is not None:
            return existing, False
        rec = SessionRecord(sid, mode, self._clock(), task=task)
        await self._db.execute(
            "INSERT OR IGNORE INTO sessions (session_id, mode, create_time, task) "
            "VALUES (?, ?, ?, ?)",
            (sid, mode.value, rec.create_time, task),
        )
        await self._db.commit()
        found = await self.find_session(sid)
        assert found is not None
        return found, True

    async def find_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None."""
        rec = self._cache.record(session_id)
        if rec is not None:
            return rec
        async with self._db.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        rec = self._cache.record(session_id)
        if rec is not None:  # another call read it meanwhile and may have moved on
            return rec
        rec = session_from_row(row)
        self._cache.remember(session_id, CachedSession(rec))
        return rec

    async def get_session(self, session_id: str) -> SessionRecord:
        """The session; ``SessionNotFound`` if absent."""
        rec = await self.find_session(session_id)
        if rec is None:
            raise session_not_found(session_id)
        return rec

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session with its rules, grants and approvals."""
        self._cache.pop(session_id, None)
        for table in ("session_rules", "grants", "approvals"):
            await self._db.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
        cur = await self._db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        await self._db.commit()
        return cur.rowcount > 0

    async def set_mode(self, session_id: str, mode: Mode) -> SessionRecord:
        """Change a session's mode."""
        rec = await self.get_session(session_id)
        await self._db.execute(
            "UPDATE sessions SET mode = ? WHERE session_id = ?", (mode.value, session_id)
        )
        await self._db.commit()
        return self._update_cached(replace(rec, mode=mode))

    def _update_cached(self, rec: SessionRecord) -> SessionRecord:
        cached = self._cache.get(rec.session_id)
        if cached is None:
            self._cache.remember(rec.session_id, CachedSession(rec))
        else:
            cached.record = rec
        return rec

    async def record_outcome(self, session_id: str, denied: bool) -> SessionRecord:
        """Update the denial counters (DEC-9): a denial counts, anything allowed resets the run."""
        rec = await self.get_session(session_id)
        if denied:
            new = replace(
                rec,
                consecutive_denials=rec.consecutive_denials + 1,
                total_denials=rec.total_denials + 1,
            )
        elif rec.consecutive_denials == 0:
            return rec  # nothing changes: no write on the common ALLOW path
        else:
            new = replace(rec, consecutive_denials=0)
        await self._db.execute(
            "UPDATE sessions SET consecutive_denials = ?, total_denials = ? WHERE session_id = ?",
            (new.consecutive_denials, new.total_denials, session_id),
        )
        await self._db.commit()
        return self._update_cached(new)

    # -- rules --------------------------------------------------------------------------

    async def add_rule(
        self, session_id: str, effect: Effect, pattern: str, reason: str = "", request_id: str = ""
    ) -> Rule:
        """Add a SESSION rule (idempotent by request_id); ``InvalidPattern`` if it is bad."""
        await self.get_session(session_id)
        rule = new_session_rule(effect, pattern, reason)
        if request_id:
            async with self._db.execute(
                f"SELECT {RULE_COLUMNS} FROM session_rules WHERE session_id = ? AND request_id = ?",
                (session_id, request_id),
            ) as cur:
                row = await cur.fetchone()
            if row is not None:
                return rule_from_row(row)
        await self.check_rule_capacity(session_id)
        # seq orders a session's rules; only the session's own maximum matters (indexed).
        await self._db.execute(
            "INSERT INTO session_rules (rule_id, session_id, seq, effect, pattern, reason, "
            "request_id) VALUES (?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM session_rules "
            "WHERE session_id = ?), ?, ?, ?, ?)",
            (rule.rule_id, session_id, session_id, effect.value, rule.pattern, reason,
             request_id or None),
        )  # fmt: skip
        await self._db.commit()
        self._invalidate(session_id)
        return rule

    async def remove_rule(self, session_id: str, rule_id: str) -> bool:
        """Remove a session rule by id."""
        cur = await self._db.execute(
            "DELETE FROM session_rules WHERE session_id = ? AND rule_id = ?", (session_id, rule_id)
        )
        await self._db.commit()
        self._invalidate(session_id)
        return cur.rowcount > 0

    async def list_rules(self, session_id: str) -> list[Rule]:
        """The session's own rules in order (grants are listed by ``list_grants``)."""
        async with self._db.execute(
            f"SELECT {RULE_COLUMNS} FROM session_rules WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ) as cur:
            rows = await cur.fetchall()
        return [rule_from_row(r) for r in rows]

    async def check_rule_capacity(self, session_id: str) -> None:
        """``ResourceExhausted`` when the session holds ``max_session_rules`` rules and
        grants already (every change recompiles them all, and every call matches them)."""
        async with self._db.execute(
            "SELECT (SELECT COUNT(*) FROM session_rules WHERE session_id = ?) + "
            "(SELECT COUNT(*) FROM grants WHERE session_id = ?)",
            (session_id, session_id),
        ) as cur:
            row = await cur.fetchone()
        check_rule_count(session_id, int(row[0]) if row else 0, self.max_session_rules)

    def _invalidate(self, session_id: str) -> None:
        cached = self._cache.get(session_id)
        if cached is not None:
            cached.forget_rules()

    async def session_rules(self, session_id: str, *, cwd: str = "/") -> RuleIndex:
        """The session's rules and live grants, compiled (cached until something changes)."""
        rec = await self.get_session(session_id)
        cached = self._cache.get(rec.session_id)
        if cached is None:  # a cache of one, and another session pushed this one out
            cached = CachedSession(rec)
            self._cache.remember(rec.session_id, cached)
        now = self._clock()
        index = cached.current_index(now)
        if index is not None:
            return index
        rules = await self.list_rules(session_id)
        grants = [g for g in await self.list_grants(session_id) if g.live(now)]
        return cached.compile(rules, grants, cwd)

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
        await self.check_rule_capacity(session_id)
        now = self._clock()
        await self._db.execute(
            "INSERT INTO grants (grant_id, session_id, pattern, remaining_uses, unlimited, "
            "expire_time, create_time, resolver) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (gid, session_id, pattern, remaining_uses, int(remaining_uses == 0), expire_time, now,
             resolver),
        )  # fmt: skip
        await self._db.commit()
        self._invalidate(session_id)
        return GrantRecord(gid, session_id, rule, remaining_uses, expire_time, now, resolver)

    async def list_grants(self, session_id: str) -> list[GrantRecord]:
        """The session's live grants."""
        now = self._clock()
        async with self._db.execute(
            f"SELECT {GRANT_COLUMNS} FROM grants WHERE session_id = ? ORDER BY create_time",
            (session_id,),
        ) as cur:
            rows = await cur.fetchall()
        return live_grants(session_id, rows, now)

    async def revoke_grant(self, grant_id: str) -> bool:
        """Delete a grant; True if it existed."""
        async with self._db.execute(
            "SELECT session_id FROM grants WHERE grant_id = ?", (grant_id,)
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            return False
        await self._db.execute("DELETE FROM grants WHERE grant_id = ?", (grant_id,))
        await self._db.commit()
        self._invalidate(row[0])
        return True

    async def use_grants(self, session_id: str, rules: tuple[Rule, ...]) -> bool:
        """Spend one use of each counted grant among ``rules``; delete those used up.

        Always True here (one process: nobody else spends them); see ``DecisionStore``.
        """
        cached = self._cache.get(session_id)
        grants = cached.grants_by_rule if cached is not None else None
        if not grants:
            return True
        changed = False
        for g in counted_grants(grants, rules):
            if g.remaining_uses <= 1:
                await self._db.execute("DELETE FROM grants WHERE grant_id = ?", (g.grant_id,))
            else:
                await self._db.execute(
                    "UPDATE grants SET remaining_uses = remaining_uses - 1 WHERE grant_id = ?",
                    (g.grant_id,),
                )
            changed = True
        if changed:
            await self._db.commit()
            self._invalidate(session_id)
        return True

    # -- what only a shared store needs (one process: nothing to do) -----------------

    fresh = True
    """Nothing changes behind this process's back: what it caches is always current."""

    def on_changes(self, listener: object) -> None:
        """No other replica writes this file, so there is nothing to report."""

    def on_health(self, observer: Callable[[bool], None]) -> None:
        """Always fresh: nothing to report."""

    async def touch_waiters(self, approval_ids: Sequence[str]) -> None:
        """Waiters are tracked in this process's memory (the approval broker)."""

    async def abandon_unwatched(self, older_than_s: float, reason: str) -> list[ApprovalRecord]:
        """Nothing: the broker tracks this process's waiters itself."""
        return []

    # -- approvals ----------------------------------------------------------------------

    async def insert_approval(
        self,
        rec: ApprovalRecord,
        limits: PendingLimits | None = None,
        *,
        timeout_s: float | None = None,
    ) -> ApprovalRecord:
        """Store a new pending approval (due ``timeout_s`` from now on the store's clock,
        if given) and return it as stored; ``ResourceExhausted`` past ``limits``.

        The limits are checked by the INSERT itself (``INSERT … SELECT … WHERE`` the
        counts are below them): SQLite runs one statement at a time, so concurrent asks
        cannot both pass a check made before either is stored.
        """
        if timeout_s is not None:
            now = self._clock()
            rec = replace(rec, create_time=now, expire_time=now + timeout_s)
        values = (
            rec.approval_id, rec.session_id, rec.call.call_id, call_to_json(rec.call), rec.reason,
            rec.risk, rec.summary, rec.state.value, rec.create_time, rec.expire_time,
            int(rec.always_allow_applies), rule_to_json(rec.rule),
        )  # fmt: skip
        columns = (
            "INSERT INTO approvals (approval_id, session_id, call_id, call_json, reason, risk, "
            "summary, state, create_time, expire_time, always_allow_applies, rule_json) "
        )
        if limits is None:
            await self._db.execute(columns + "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
            await self._db.commit()
            return rec
        while True:
            cur = await self._db.execute(
                columns + "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
                "WHERE (SELECT count(*) FROM approvals WHERE state = 'pending') < ? AND "
                "(SELECT count(*) FROM approvals WHERE state = 'pending' AND session_id = ?) < ?",
                (*values, limits.total, rec.session_id, limits.per_session),
            )
            await self._db.commit()
            if cur.rowcount == 1:
                return rec
            # Refused: say which cap is full (if one was answered meanwhile, try again).
            async with self._db.execute(
                "SELECT count(*), coalesce(sum(session_id = ?), 0) FROM approvals "
                "WHERE state = 'pending'",
                (rec.session_id,),
            ) as counted:
                row = await counted.fetchone()
            total, in_session = (int(row[0]), int(row[1])) if row else (0, 0)
            check_pending(rec.session_id, total, in_session, limits)

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        """One approval; ``ApprovalNotFound`` if absent."""
        async with self._db.execute(
            _APPROVAL_SELECT + " WHERE approval_id = ?", (approval_id,)
        ) as c:
            row = await c.fetchone()
        if row is None:
            raise ApprovalNotFound(
                f"approval {approval_id!r} does not exist", approval_id=approval_id
            )
        return approval_from_row(row)

    async def approval_time_left(self, approval_id: str) -> tuple[ApprovalRecord, float]:
        """One approval and the seconds until its deadline on the store's clock."""
        rec = await self.get_approval(approval_id)
        return rec, rec.expire_time - self._clock()

    async def pending_for_call(self, session_id: str, call_id: str) -> ApprovalRecord | None:
        """The pending approval of one call, if a retried Decide already made one."""
        if not call_id:
            return None
        async with self._db.execute(
            _APPROVAL_SELECT + " WHERE session_id = ? AND call_id = ? AND state = 'pending'",
            (session_id, call_id),
        ) as cur:
            row = await cur.fetchone()
        return None if row is None else approval_from_row(row)

    async def pending_approvals(self, session_id: str = "") -> list[ApprovalRecord]:
        """Pending approvals, oldest first, optionally of one session."""
        sql = _APPROVAL_SELECT + " WHERE state = 'pending'"
        params: tuple[str, ...] = ()
        if session_id:
            sql += " AND session_id = ?"
            params = (session_id,)
        async with self._db.execute(sql + " ORDER BY create_time", params) as cur:
            rows = await cur.fetchall()
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
        """Move a pending approval to ``state``; False if it was no longer pending (or,
        with ``in_time``, if its deadline had passed).

        One conditional UPDATE is the atomic "first answer wins": SQLite applies
        statements one at a time, so exactly one of two racing resolvers sees a row change.
        """
        now = self._clock()
        try:
            cur = await self._db.execute(
                "UPDATE approvals SET state = ?, resolver = ?, resolution = ?, resolve_reason = ?, "
                "finish_time = ? WHERE approval_id = ? AND state = 'pending'"
                + (" AND expire_time > ?" if in_time else ""),
                (state.value, resolver, resolution, reason, now, approval_id)
                + ((now,) if in_time else ()),
            )
            await self._db.commit()
        except sqlite3.Error:
            await self._db.rollback()
            raise
        return cur.rowcount == 1

    async def expire_overdue(
        self, reason: str, approval_id: str = "", limit: int = 500
    ) -> list[ApprovalRecord]:
        """Expire the pending approvals (only ``approval_id``, if given) whose deadline
        has passed on the store's clock, oldest deadline first; return them as stored."""
        now = self._clock()
        only = " AND approval_id = ?" if approval_id else ""
        try:
            async with self._db.execute(
                "UPDATE approvals SET state = 'expired', resolve_reason = ?, finish_time = ? "
                "WHERE approval_id IN (SELECT approval_id FROM approvals WHERE state = 'pending' "
                f"AND expire_time <= ?{only} ORDER BY expire_time LIMIT ?) RETURNING approval_id",
                (reason, now, now, *((approval_id,) if approval_id else ()), limit),
            ) as cur:
                ids = [str(r[0]) for r in await cur.fetchall()]
            await self._db.commit()
        except sqlite3.Error:
            await self._db.rollback()
            raise
        return [await self.get_approval(i) for i in ids]

    async def delete_finished_approvals(self, older_than_s: float, limit: int = 5_000) -> int:
        """Delete up to ``limit`` answered or expired approvals finished more than
        ``older_than_s`` seconds ago; returns how many. Batched, so a large backlog never
        holds the database long."""
        cur = await self._db.execute(
            "DELETE FROM approvals WHERE approval_id IN (SELECT approval_id FROM approvals "
            "WHERE finish_time < ? AND state <> 'pending' LIMIT ?)",
            (self._clock() - older_than_s, limit),
        )
        await self._db.commit()
        return max(cur.rowcount, 0)

    async def count_approvals(self) -> int:
        """All stored approvals (for tests and metrics)."""
        async with self._db.execute("SELECT COUNT(*) FROM approvals") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0


_APPROVAL_SELECT = f"SELECT {APPROVAL_COLUMNS} FROM approvals"
