"""The ask flow (DEC-8): pending approvals, many watchers, first answer wins, timeouts.

Approvals are stored by ``SessionStore`` (so they survive a restart); this module adds
the live part: watchers get every change as it happens, waiters wake when an answer
arrives, and an approval nobody answers before its deadline becomes EXPIRED (a denial).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from stockade.decision.rules import BASH_TOOL, PRIMARY_FIELDS, escape_content
from stockade.decision.sessions import (
    ApprovalRecord,
    ApprovalState,
    GrantRecord,
    PendingCall,
    SessionStore,
    new_id,
)
from stockade.errors import ApprovalAlreadyResolved, InvalidArgument


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


class ApprovalBroker:
    """Creates, streams, resolves and awaits approvals."""

    def __init__(self, store: SessionStore, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._watchers: set[tuple[str, asyncio.Queue[ApprovalRecord]]] = set()
        self._answered: dict[str, asyncio.Event] = {}

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
    ) -> ApprovalRecord:
        """Store a pending approval and tell the watchers."""
        now = self._clock()
        rec = ApprovalRecord(
            approval_id=new_id("appr"),
            session_id=session_id,
            call=call,
            reason=reason,
            risk=risk,
            summary=summary,
            state=ApprovalState.PENDING,
            create_time=now,
            expire_time=now + timeout_s,
            always_allow_applies=always_allow_applies,
        )
        await self._store.insert_approval(rec)
        self._publish(rec)
        return rec

    def _publish(self, rec: ApprovalRecord) -> None:
        for session_id, queue in list(self._watchers):
            if not session_id or session_id == rec.session_id:
                queue.put_nowait(rec)
        if rec.state is not ApprovalState.PENDING:
            event = self._answered.pop(rec.approval_id, None)
            if event is not None:
                event.set()

    async def watch(self, session_id: str = "") -> AsyncGenerator[ApprovalRecord, None]:
        """Yield the pending approvals now, then every change, until the caller stops."""
        queue: asyncio.Queue[ApprovalRecord] = asyncio.Queue()
        entry = (session_id, queue)
        # Register before reading the backlog so nothing created in between is missed.
        self._watchers.add(entry)
        try:
            seen: set[str] = set()
            for rec in await self._store.pending_approvals(session_id):
                seen.add(rec.approval_id)
                yield rec
            while True:
                rec = await queue.get()
                if rec.state is ApprovalState.PENDING and rec.approval_id in seen:
                    continue
                yield rec
        finally:
            self._watchers.discard(entry)

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
        if rec.state is ApprovalState.PENDING and self._clock() >= rec.expire_time:
            await self._expire(rec)
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
        state = ApprovalState.DENIED if resolution is Resolution.DENY else ApprovalState.ALLOWED
        won = await self._store.finish_approval(
            approval_id, state, resolver=resolver, resolution=resolution.value, reason=reason
        )
        if not won:
            latest = await self._store.get_approval(approval_id)
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

    async def _expire(self, rec: ApprovalRecord) -> bool:
        if await self._store.finish_approval(
            rec.approval_id, ApprovalState.EXPIRED, reason="approval timed out"
        ):
            await self._store.record_outcome(rec.session_id, denied=True)
            self._publish(await self._store.get_approval(rec.approval_id))
            return True
        return False

    async def wait(self, approval_id: str) -> ApprovalRecord:
        """Wait for the answer; past the deadline the approval expires (a denial)."""
        while True:
            # Register before reading, so an answer landing in between still wakes us.
            event = self._answered.setdefault(approval_id, asyncio.Event())
            rec = await self._store.get_approval(approval_id)
            if rec.state is not ApprovalState.PENDING:
                return rec
            left = rec.expire_time - self._clock()
            if left <= 0:
                await self._expire(rec)
                continue
            try:
                await asyncio.wait_for(event.wait(), timeout=left)
            except TimeoutError:
                pass
