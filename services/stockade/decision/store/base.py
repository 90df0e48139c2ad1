"""The decision store interface (STORE-1, STORE-2).

``SQLiteDecisionStore`` (``stockade.decision.store.sqlite``: one SQLite file, one replica,
the embedded default) and ``PostgresDecisionStore`` (``stockade.decision.store.postgres``:
any number of interchangeable replicas on one PostgreSQL) both provide
``DecisionStore``.

A shared store also reports what other replicas change (``StoreListener``): approvals
raised or answered elsewhere, and a resynchronisation after the change feed was lost,
so the approval broker's watchers and waiters see the whole fleet's approvals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from stockade.decision.modes import Mode
from stockade.decision.rules import Effect, Rule, RuleIndex
from stockade.decision.store.model import (
    ApprovalRecord,
    ApprovalState,
    GrantRecord,
    PendingLimits,
    SessionRecord,
)


class StoreListener(Protocol):
    """What a shared store tells the approval broker about other replicas' changes."""

    async def approval_changed(self, rec: ApprovalRecord) -> None:
        """Another replica raised, answered or expired ``rec`` (its state as stored now)."""

    async def resynced(
        self, pending: Sequence[ApprovalRecord], finished: Sequence[ApprovalRecord]
    ) -> None:
        """The change feed was lost and is back: ``pending`` is every approval pending
        now, ``finished`` the approvals answered or expired since shortly before the gap
        began (some may be known already); anything learnt before the gap may be
        stale."""


class DecisionStore(Protocol):
    """Sessions, session rules, modes, grants, approvals and denial counters.

    The behaviour is ``SQLiteDecisionStore``'s; see its docstrings. ``shared`` is True when other
    replicas write the same store (PostgreSQL).
    """

    @property
    def shared(self) -> bool:
        """True when other replicas write the same store."""

    @property
    def cached_sessions(self) -> int:
        """How many sessions the in-memory cache holds now."""

    max_session_rules: int

    @property
    def fresh(self) -> bool:
        """True while this store learns every other replica's change as it happens (a
        private store always does). While False, nothing is served from a cache and the
        replica reports NOT_SERVING (``on_health``)."""

    def on_changes(self, listener: StoreListener) -> None:
        """Tell ``listener`` what other replicas change (a no-op for a private store)."""

    def on_health(self, observer: Callable[[bool], None]) -> None:
        """Call ``observer(fresh)`` whenever ``fresh`` changes (never, for a private store)."""

    async def close(self) -> None:
        """Close the store."""

    async def create_session(
        self, session_id: str | None, mode: Mode, *, task: str = ""
    ) -> tuple[SessionRecord, bool]:
        """Create a session (or return the existing one); True if created."""

    async def find_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None."""

    async def get_session(self, session_id: str) -> SessionRecord:
        """The session; ``SessionNotFound`` if absent."""

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session with its rules, grants and approvals."""

    async def set_mode(self, session_id: str, mode: Mode) -> SessionRecord:
        """Change a session's mode."""

    async def record_outcome(self, session_id: str, denied: bool) -> SessionRecord:
        """Update the denial counters (atomically across replicas)."""

    async def add_rule(
        self, session_id: str, effect: Effect, pattern: str, reason: str = "", request_id: str = ""
    ) -> Rule:
        """Add a SESSION rule (idempotent by request_id)."""

    async def remove_rule(self, session_id: str, rule_id: str) -> bool:
        """Remove a session rule by id."""

    async def list_rules(self, session_id: str) -> list[Rule]:
        """The session's own rules in order."""

    async def check_rule_capacity(self, session_id: str) -> None:
        """``ResourceExhausted`` when the session is at ``max_session_rules``."""

    async def session_rules(self, session_id: str, *, cwd: str = "/") -> RuleIndex:
        """The session's rules and live grants, compiled (cached while unchanged)."""

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

    async def list_grants(self, session_id: str) -> list[GrantRecord]:
        """The session's live grants."""

    async def revoke_grant(self, grant_id: str) -> bool:
        """Delete a grant; True if it existed."""

    async def use_grants(self, session_id: str, rules: tuple[Rule, ...]) -> bool:
        """Spend one use of each counted grant among ``rules``; False when one of them was
        used up meanwhile (by another replica), so the ALLOW it gave must be decided again."""

    def now(self) -> float:
        """The store's clock (seconds since the epoch) for what is compared in memory: a
        scoped grant's "until" time, how long ago a waiter left. A private store has one
        clock for everything (one clock source); a shared store estimates the database's
        clock here (this replica's own plus a measured offset), while deadlines, finish
        times, heartbeats and retention are compared inside its statements on the
        database's clock itself, so replicas' clocks never meet."""

    async def insert_approval(
        self,
        rec: ApprovalRecord,
        limits: PendingLimits | None = None,
        *,
        timeout_s: float | None = None,
    ) -> ApprovalRecord:
        """Store a new pending approval and return it as stored; ``ResourceExhausted``
        (nothing stored) when it would pass ``limits``, checked atomically with the insert
        (exact across replicas).

        With ``timeout_s``, the store stamps the approval: created now and due
        ``timeout_s`` later, on the store's clock (``rec``'s times are ignored). Without
        it, ``rec``'s times are stored as they are (imports and tests)."""

    async def get_approval(self, approval_id: str) -> ApprovalRecord:
        """One approval; ``ApprovalNotFound`` if absent."""

    async def approval_time_left(self, approval_id: str) -> tuple[ApprovalRecord, float]:
        """One approval and the seconds until its deadline on the store's clock (zero or
        less once it has passed); ``ApprovalNotFound`` if absent."""

    async def pending_for_call(self, session_id: str, call_id: str) -> ApprovalRecord | None:
        """The pending approval of one call, if a retried Decide already made one."""

    async def pending_approvals(self, session_id: str = "") -> list[ApprovalRecord]:
        """Pending approvals, oldest first, optionally of one session."""

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
        """Move a pending approval to ``state``, finished now on the store's clock; False
        if it was no longer pending (the first answer wins, across replicas too) or, with
        ``in_time``, if its deadline had passed on the store's clock."""

    async def expire_overdue(
        self, reason: str, approval_id: str = "", limit: int = 500
    ) -> list[ApprovalRecord]:
        """Expire, with ``reason``, the pending approvals (only ``approval_id``, if given)
        whose deadline has passed on the store's clock, in one conditional statement (of
        replicas sweeping at once, each approval is expired by one, and never before its
        deadline whatever a replica's own clock says); return them as stored now."""

    async def delete_finished_approvals(self, older_than_s: float, limit: int = 5_000) -> int:
        """Delete answered or expired approvals finished more than ``older_than_s``
        seconds ago on the store's clock."""

    async def count_approvals(self) -> int:
        """All stored approvals."""

    async def touch_waiters(self, approval_ids: Sequence[str]) -> None:
        """Record that callers on this replica wait for ``approval_ids`` now, on the
        store's own clock (shared stores: a replica that dies stops touching, and the
        approval is abandoned elsewhere)."""

    async def abandon_unwatched(self, older_than_s: float, reason: str) -> list[ApprovalRecord]:
        """Expire, with ``reason``, the pending approvals no replica has touched in the
        last ``older_than_s`` seconds of the store's clock, in one statement (a touch that
        lands first keeps its approval); return them as stored now (shared stores; a
        private one returns [])."""
