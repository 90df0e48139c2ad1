"""The ask flow (DEC-8): pending approvals, many watchers, first answer wins, timeouts.

Approvals are stored by the decision store (so they survive a restart); this module adds
the live part: watchers get every change as it happens, waiters wake when an answer
arrives, and an approval nobody answers before its deadline becomes EXPIRED (a denial).

Replicas (a shared store, STORE-2): the store reports approvals other replicas raise or
answer (``approval_changed``), so watchers here see the whole fleet's approvals and a
waiter here wakes when the answer is given elsewhere; after a lost change feed the store
resynchronises (``resynced``) and every waiter re-reads its approval. Which approvals still
have a waiter is recorded in the store (``touch_waiters``), since the waiter may sit on
another replica: an approval no replica has waited for within ``reattach_s`` is abandoned.

Clocks: deadlines, their expiry, finish times and retention are the store's (the
database's on a shared store, compared inside its statements), never a replica's own, so
a replica whose clock is off expires nothing early and keeps nothing late. The broker
itself only measures how long ago a waiter left, on the store's ``now``.

Restarts: a waiter cut off by a restart re-attaches (the agent calls AwaitApproval again);
an approval whose waiter does not come back within ``reattach_s`` is marked EXPIRED as
abandoned, so no answer can be given that nobody will act on. On shutdown, waits end at
once with UNAVAILABLE instead of holding the grace period.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import NamedTuple

from stockade.contract.tools import PRIMARY_FIELDS
from stockade.decision.rules import BASH_TOOL, Rule, escape_content
from stockade.decision.store.base import DecisionStore
from stockade.decision.store.model import (
    ApprovalRecord,
    ApprovalState,
    GrantRecord,
    PendingCall,
    PendingLimits,
    new_id,
)
from stockade.errors import (
    ApprovalAlreadyResolved,
    ApprovalNotFound,
    DependencyUnavailable,
    InvalidArgument,
    ResourceExhausted,
)
from stockade.server.lifecycle import stopping

log = logging.getLogger(__name__)


class Resolution(Enum):
    """A resolver's answer."""

    ALLOW_ONCE = "allow_once"
    DENY = "deny"
    ALWAYS_ALLOW = "always_allow"


class Resolved(NamedTuple):
    """What an answer did."""

    approval: ApprovalRecord
    grant: GrantRecord | None
    """The session grant an ALWAYS_ALLOW created."""
    note: str = ""
    """Why the answer took effect more narrowly than asked (empty when it did not)."""


@dataclass(frozen=True)
class GrantScope:
    """How far an ALWAYS_ALLOW reaches: N uses (0 = unlimited) and/or a deadline."""

    remaining_uses: int = 0
    expire_time: float | None = None


def grant_pattern(call: PendingCall) -> str:
    """The pattern an ALWAYS_ALLOW adds: exactly this call's primary content, nothing more."""
    field = PRIMARY_FIELDS.get(call.tool_name)
    if field is None:
        field = next(
            (f for f in ("command", "file_path", "path", "pattern", "url") if f in call.arguments),
            None,
        )
    value = call.arguments.get(field) if field else None
    if not isinstance(value, str) or not value.strip():
        return call.tool_name
    if call.tool_name == BASH_TOOL:
        value = " ".join(value.split())
    return f"{call.tool_name}({escape_content(value)})"


@dataclass(frozen=True)
class ApprovalLimits:
    """Bounds of the ask flow (every queue and backlog is bounded, #12 item 2)."""

    max_pending: int = 10_000
    """Pending approvals in the whole service; past it an ASK is RESOURCE_EXHAUSTED."""
    max_pending_per_session: int = 100
    """Pending approvals of one session."""
    max_watchers: int = 64
    """WatchApprovals streams at once."""
    watch_queue: int = 1_000
    """Changes queued for one watcher; a watcher that falls this far behind is dropped
    (RESOURCE_EXHAUSTED) and may reconnect to get the current backlog."""
    retention_s: float = 86_400.0
    """How long answered and expired approvals are kept before they are deleted."""
    reattach_s: float = 30.0
    """How long a pending approval waits for its waiter to come back (after the waiter's
    call ended, or after a restart of this service) before it is marked abandoned."""
    sweep_s: float = 5.0
    """How often overdue, abandoned and old approvals are swept."""


ABANDONED_REASON = "abandoned: nobody was waiting for the answer any more"
TIMED_OUT_REASON = "approval timed out"
FINISHED_REMEMBERED = 10_000
"""Answered approvals whose ids the broker remembers (a catch-up re-reads at most 1,000)."""
GAP_POLL_S = 1.0
"""How often a waiter re-reads its approval while the store's change feed is down (an
answer given on another replica then sends no wake-up)."""


class _Watcher:
    """One WatchApprovals stream: a bounded queue of changes and its wake-up event."""

    __slots__ = ("event", "overflowed", "queue", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.queue: deque[ApprovalRecord] = deque()
        self.event = asyncio.Event()
        self.overflowed = False


class ApprovalBroker:
    """Creates, streams, resolves and awaits approvals.

    Memory is bounded whatever the clients do: the pending approvals are held once, in
    ``_pending`` (every watcher's backlog is a list of references to the same records),
    each watcher's queue holds at most ``limits.watch_queue`` changes, and the number of
    watchers and of pending approvals (per session and in total) is capped.
    """

    def __init__(self, store: DecisionStore, *, limits: ApprovalLimits | None = None) -> None:
        self._store = store
        self._clock = store.now
        self.limits = limits or ApprovalLimits()
        self._watchers: set[_Watcher] = set()
        self._answered: dict[str, asyncio.Event] = {}
        self._pending: dict[str, ApprovalRecord] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        """Ids of the latest approvals this broker saw answered or expired."""
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._waiters: Counter[str] = Counter()
        self._orphaned: dict[str, float] = {}
        """Pending approval id → when its last waiter left (or this service started)."""
        store.on_changes(self)
        store.on_health(self._feed_changed)

    async def load(self) -> None:
        """Read the pending approvals once (at start, or on first use).

        Approvals pending from before a restart have lost their waiters: each gets
        ``reattach_s`` for its waiter to come back before it is marked abandoned.
        """
        async with self._load_lock:
            if self._loaded:
                return
            now = self._clock()
            for rec in await self._store.pending_approvals():
                self._track(rec)
                if not self._store.shared:  # shared: the waiter may be on another replica
                    self._orphaned[rec.approval_id] = now
            self._loaded = True

    async def approval_changed(self, rec: ApprovalRecord) -> None:
        """Another replica raised, answered or expired ``rec``: tell the watchers (once
        per change) and wake the waiters here."""
        if not self._loaded:
            return  # ``load`` reads the pending ones from the store
        if rec.state is ApprovalState.PENDING:
            if rec.approval_id not in self._pending:
                self._publish(rec)
            return
        if rec.approval_id in self._pending:
            self._publish(rec)
        else:  # never seen pending here (raised and answered in between): wake only
            event = self._answered.pop(rec.approval_id, None)
            if event is not None:
                event.set()

    async def resynced(
        self, pending: Sequence[ApprovalRecord], finished: Sequence[ApprovalRecord] = ()
    ) -> None:
        """The store's change feed was lost and is back: reconcile with ``pending`` (what
        the store holds now), tell the watchers of the answers in ``finished`` they have
        not seen (an approval raised and answered inside the gap included), and wake
        every waiter to re-read its approval."""
        if not self._loaded:
            return
        for rec in finished:
            if rec.approval_id not in self._pending and rec.approval_id not in self._finished:
                self._publish(rec)
        now_pending = {rec.approval_id: rec for rec in pending}
        for approval_id in [a for a in self._pending if a not in now_pending]:
            try:
                final = await self._store.get_approval(approval_id)
            except ApprovalNotFound:
                final = None
            if final is not None and final.state is not ApprovalState.PENDING:
                self._publish(final)
            elif final is None:  # deleted with its session: just stop holding it
                self._track(replace(self._pending[approval_id], state=ApprovalState.EXPIRED))
        for rec in now_pending.values():
            if rec.approval_id not in self._pending:
                self._publish(rec)
        for event in self._answered.values():
            event.set()
        self._answered.clear()

    def _feed_changed(self, fresh: bool) -> None:
        """The store's change feed was lost: wake every waiter, so it re-reads its
        approval now and keeps polling (``GAP_POLL_S``) until the feed is back."""
        if fresh:
            return
        for event in self._answered.values():
            event.set()
        self._answered.clear()

    def _track(self, rec: ApprovalRecord) -> None:
        """Keep ``_pending`` current with ``rec``'s state."""
        if rec.state is ApprovalState.PENDING:
            self._pending[rec.approval_id] = rec
            return
        self._pending.pop(rec.approval_id, None)
        self._orphaned.pop(rec.approval_id, None)
        # Remembered (bounded) so a catch-up after a gap does not send an answer twice.
        self._finished[rec.approval_id] = None
        while len(self._finished) > FINISHED_REMEMBERED:
            self._finished.popitem(last=False)

    @property
    def pending_count(self) -> int:
        """Pending approvals held now."""
        return len(self._pending)

    async def create(
        self,
        session_id: str,
        call: PendingCall,
        *,
        reason: str,
        risk: str,
        summary: str,
        timeout_s: float,
        always_allow_applies: bool = True,
        rule: Rule | None = None,
    ) -> ApprovalRecord:
        """Store a pending approval and tell the watchers; ``ResourceExhausted`` past the
        pending limits (the caller's ASK then fails closed)."""
        await self.load()
        limits = self.limits
        # The store checks the caps in the same statement or transaction as the insert,
        # against what is stored (every replica's approvals), so they hold exactly even
        # when several replicas (or several calls here) ask at once.
        caps = PendingLimits(limits.max_pending, limits.max_pending_per_session)
        # The store stamps the times on its own clock (``timeout_s``): these are ignored.
        rec = ApprovalRecord(
            approval_id=new_id("appr"),
            session_id=session_id,
            call=call,
            reason=reason,
            risk=risk,
            summary=summary,
            state=ApprovalState.PENDING,
            create_time=0.0,
            expire_time=0.0,
            always_allow_applies=always_allow_applies,
            rule=rule,
        )
        rec = await self._store.insert_approval(rec, caps, timeout_s=timeout_s)
        self._publish(rec)
        return rec

    def _publish(self, rec: ApprovalRecord) -> None:
        self._track(rec)
        limit = self.limits.watch_queue
        for watcher in self._watchers:
            if watcher.overflowed or (watcher.session_id and watcher.session_id != rec.session_id):
                continue
            if len(watcher.queue) >= limit:
                # Fallen behind: drop what it has not read; its stream ends with
                # RESOURCE_EXHAUSTED and a reconnect gets the current backlog.
                watcher.overflowed = True
                watcher.queue.clear()
            else:
                watcher.queue.append(rec)
            watcher.event.set()
        if rec.state is not ApprovalState.PENDING:
            event = self._answered.pop(rec.approval_id, None)
            if event is not None:
                event.set()

    async def watch(self, session_id: str = "") -> AsyncGenerator[ApprovalRecord, None]:
        """Yield the pending approvals now, then every change, until the caller stops.

        ``ResourceExhausted`` when ``max_watchers`` streams are open already, or when
        this watcher falls ``watch_queue`` changes behind.
        """
        await self.load()
        limits = self.limits
        if len(self._watchers) >= limits.max_watchers:
            raise ResourceExhausted(
                f"{len(self._watchers)} approval watchers are connected; the limit is "
                f"{limits.max_watchers} (max_approval_watchers)",
                limit="max_approval_watchers",
                value=str(limits.max_watchers),
            )
        watcher = _Watcher(session_id)
        # Registering and taking the backlog happen in one step (no await between), so
        # every change after the snapshot is queued and nothing is missed or doubled.
        self._watchers.add(watcher)
        backlog = [
            rec for rec in self._pending.values() if not session_id or rec.session_id == session_id
        ]
        try:
            for rec in backlog:
                if watcher.overflowed:
                    break
                yield rec
            del backlog
            while True:
                if watcher.overflowed:
                    raise ResourceExhausted(
                        f"this approval watcher fell more than {limits.watch_queue} changes "
                        "behind (approval_watch_queue) and was dropped; reconnect to get the "
                        "current backlog",
                        limit="approval_watch_queue",
                        value=str(limits.watch_queue),
                    )
                if not watcher.queue:
                    watcher.event.clear()
                    await watcher.event.wait()
                    continue
                yield watcher.queue.popleft()
        finally:
            self._watchers.discard(watcher)

    @property
    def watcher_count(self) -> int:
        """How many watchers are connected."""
        return len(self._watchers)

    async def resolve(
        self,
        approval_id: str,
        resolution: Resolution,
        *,
        resolver: str,
        reason: str = "",
        scope: GrantScope | None = None,
    ) -> Resolved:
        """Answer an approval; the first answer wins, later ones get ``ApprovalAlreadyResolved``.

        ALWAYS_ALLOW on an approval that an explicit ask rule or a hook raised is recorded
        as ALLOW_ONCE with a note: such an ask outranks every allow rule (DEC-3), so a
        session grant would be listed and never take effect.
        """
        rec = await self._store.get_approval(approval_id)
        if rec.state is not ApprovalState.PENDING:
            raise ApprovalAlreadyResolved(
                f"approval {approval_id} is already {rec.state.value}"
                + (f" by {rec.resolver}" if rec.resolver else ""),
                approval_id=approval_id,
                state=rec.state.value,
            )
        if scope is not None and scope.remaining_uses < 0:
            raise InvalidArgument("scope.remaining_uses must not be negative")
        note = ""
        if resolution is Resolution.ALWAYS_ALLOW and not rec.always_allow_applies:
            resolution = Resolution.ALLOW_ONCE
            note = (
                f"allowed once, no session grant made: {rec.reason}; explicit ask rules and "
                "hooks ask every time (they outrank allow rules)"
            )
        if resolution is Resolution.ALWAYS_ALLOW:
            # Refuse before answering: an ALWAYS_ALLOW past the rule limit must not become
            # an answered approval without its grant.
            await self._store.check_rule_capacity(rec.session_id)
        left_at = self._orphaned.get(approval_id)
        # Shared store: this replica only knows its own waiters; the caller may have
        # re-attached to another replica, so say where nobody waits.
        where = "on this replica " if self._store.shared else ""
        if left_at is not None:
            note = "; ".join(
                n
                for n in (
                    note,
                    f"nobody is waiting for this answer {where}now (the caller left "
                    f"{max(0.0, self._clock() - left_at):.0f} s ago; unless it re-attaches "
                    f"within {self.limits.reattach_s:g} s of leaving, the call will not run)",
                )
                if n
            )
        state = ApprovalState.DENIED if resolution is Resolution.DENY else ApprovalState.ALLOWED
        # ``in_time``: an answer counts only before the deadline on the store's clock.
        won = await self._store.finish_approval(
            approval_id,
            state,
            resolver=resolver,
            resolution=resolution.value,
            reason=reason,
            in_time=True,
        )
        if not won:
            latest = await self._store.get_approval(approval_id)
            if latest.state is ApprovalState.PENDING:  # still pending: its deadline passed
                await self._expire_overdue(approval_id)
                latest = await self._store.get_approval(approval_id)
                raise ApprovalAlreadyResolved(
                    f"approval {approval_id} is already {latest.state.value}: its deadline "
                    "passed before the answer",
                    approval_id=approval_id,
                    state=latest.state.value,
                )
            raise ApprovalAlreadyResolved(
                f"approval {approval_id} was answered first by {latest.resolver or 'another'}",
                approval_id=approval_id,
                state=latest.state.value,
            )
        grant = None
        if resolution is Resolution.ALWAYS_ALLOW:
            s = scope or GrantScope()
            grant = await self._store.add_grant(
                rec.session_id,
                grant_pattern(rec.call),
                remaining_uses=s.remaining_uses,
                expire_time=s.expire_time,
                resolver=resolver,
            )
        await self._store.record_outcome(rec.session_id, denied=state is ApprovalState.DENIED)
        final = await self._store.get_approval(approval_id)
        self._publish(final)
        return Resolved(final, grant, note)

    async def _expire(self, rec: ApprovalRecord, reason: str) -> bool:
        """Expire ``rec`` now whatever its deadline (an abandoned approval)."""
        if await self._store.finish_approval(rec.approval_id, ApprovalState.EXPIRED, reason=reason):
            await self._store.record_outcome(rec.session_id, denied=True)
            self._publish(await self._store.get_approval(rec.approval_id))
            return True
        return False

    async def _expire_overdue(self, approval_id: str = "") -> int:
        """Expire the approvals (only ``approval_id``, if given) whose deadline has passed
        on the store's clock, each once across replicas, counting a denial for each."""
        expired = 0
        while True:
            batch = await self._store.expire_overdue(TIMED_OUT_REASON, approval_id)
            for rec in batch:
                await self._store.record_outcome(rec.session_id, denied=True)
                self._publish(rec)
            expired += len(batch)
            if approval_id or len(batch) < 500:
                return expired

    async def wait(self, approval_id: str) -> ApprovalRecord:
        """Wait for the answer; past the deadline the approval expires (a denial).

        When the server starts stopping, the wait ends at once with ``DependencyUnavailable``
        (UNAVAILABLE): the approval stays pending and the caller re-attaches to another
        replica or after the restart, instead of holding the shutdown's grace period.
        """
        await self.load()
        if self._store.shared:
            # Tell every replica a caller waits (again) for this approval, before the
            # first read: a re-attach after a replica died keeps it from being abandoned.
            await self._store.touch_waiters([approval_id])
        self._waiters[approval_id] += 1
        self._orphaned.pop(approval_id, None)
        stop = stopping()
        try:
            while True:
                if stop.is_set():
                    raise DependencyUnavailable(
                        "the decision service is shutting down; the approval is still "
                        "pending: call AwaitApproval again (another replica, or after the "
                        "restart)",
                        approval_id=approval_id,
                    )
                # Register before reading, so an answer landing in between still wakes us.
                event = self._answered.setdefault(approval_id, asyncio.Event())
                # The time left is the store's (the database's clock, read with the
                # approval), so this replica's own clock cannot shorten or stretch it.
                rec, left = await self._store.approval_time_left(approval_id)
                if rec.state is not ApprovalState.PENDING:
                    return rec
                if left <= 0:
                    await self._expire_overdue(approval_id)
                    continue
                if not self._store.fresh:
                    # The change feed is down: an answer given on another replica would
                    # not wake us, so read again soon instead of waiting for the resync.
                    left = min(left, GAP_POLL_S)
                answered = asyncio.ensure_future(event.wait())
                stopped = asyncio.ensure_future(stop.wait())
                try:
                    await asyncio.wait(
                        {answered, stopped}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    answered.cancel()
                    stopped.cancel()
        finally:
            self._waiters[approval_id] -= 1
            if self._waiters[approval_id] <= 0:
                del self._waiters[approval_id]
                # Nobody left to wake: drop the event (an AwaitApproval of an unknown or
                # abandoned id must not leave one behind for ever).
                self._answered.pop(approval_id, None)
                if approval_id in self._pending and not stop.is_set():
                    # The caller gave up or was cut off: it has ``reattach_s`` to come back.
                    self._orphaned[approval_id] = self._clock()

    def waiting(self, approval_id: str) -> int:
        """How many callers are waiting for ``approval_id`` now."""
        return self._waiters.get(approval_id, 0)

    async def sweep(self) -> tuple[int, int, int]:
        """Expire overdue approvals, mark abandoned ones, delete old answered ones.

        Returns (expired, abandoned, deleted). Overdue approvals expire even when nobody
        waits for them, so the backlog watchers see holds only live questions.
        """
        await self.load()
        now = self._clock()
        abandoned = deleted = 0
        # Overdue on the store's clock, whichever replica raised them (each expired once).
        expired = await self._expire_overdue()
        cutoff = now - self.limits.reattach_s
        if self._store.shared:
            # The waiters are spread over the replicas: each touches its own, and an
            # approval nobody touched within ``reattach_s`` (its replica died, its caller
            # left) is abandoned by whichever replica sweeps first.
            # Heartbeats and the window are on the store's clock (the database's), so a
            # replica whose clock is off does not abandon another replica's waiters.
            await self._store.touch_waiters(list(self._waiters))
            abandoned_now = await self._store.abandon_unwatched(
                self.limits.reattach_s, ABANDONED_REASON
            )
            for gone in abandoned_now:
                await self._store.record_outcome(gone.session_id, denied=True)
                self._publish(gone)
                abandoned += 1
        for approval_id in [a for a, t in self._orphaned.items() if t <= cutoff]:
            orphan = self._pending.get(approval_id)
            if orphan is None or self._waiters.get(approval_id) or self._store.shared:
                # (shared: the caller may have re-attached on another replica; the store's
                # record of waiters decided above)
                self._orphaned.pop(approval_id, None)
                continue
            abandoned += await self._expire(orphan, ABANDONED_REASON)
        while True:
            batch = await self._store.delete_finished_approvals(self.limits.retention_s)
            deleted += batch
            if batch < 5_000:
                break
            await asyncio.sleep(0)  # let calls run between batches
        return expired, abandoned, deleted

    async def run_sweeper(self) -> None:
        """Sweep every ``sweep_s`` until cancelled; a failed sweep is logged and retried."""
        while True:
            await asyncio.sleep(self.limits.sweep_s)
            try:
                expired, abandoned, deleted = await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # the next sweep tries again
                log.exception("approval sweep failed")
                continue
            if expired or abandoned or deleted:
                log.info(
                    "approvals swept: %d expired, %d abandoned, %d old ones deleted",
                    expired,
                    abandoned,
                    deleted,
                )
