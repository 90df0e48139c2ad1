"""The live approvals: one WatchApprovals stream, mirrored in memory, fanned out to pages.

The console holds one stream to the decision service for all sessions and keeps the
pending approvals it reports (bounded by ``max_pending``) plus the most recent answers
(so a page can say who answered). Each browser following ``/events`` gets a bounded queue
of changes; a browser too slow to keep up is dropped and reconnects (EventSource does so
by itself) to a fresh page state, instead of the console buffering without limit.

When the stream ends or fails (the decision service restarted, or dropped a slow watcher)
the feed reconnects with jittered backoff; the decision service sends the pending backlog
again on every new stream, so nothing is missed. An approval whose deadline passes with
nobody waiting on it is shown as timed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace

import grpc

from stockade.console.views import ApprovalView, approval_view
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

log = logging.getLogger("stockade.console.feed")

RECENT_ANSWERS = 500
"""Answered approvals remembered (for "answered by …" on pages opened later)."""
CLIENT_QUEUE = 256
"""Changes buffered per browser before that browser is dropped."""


@dataclass(frozen=True)
class Change:
    """One change to the set of approvals, for the browsers."""

    approval: ApprovalView


class TooManyClients(Exception):
    """More browsers follow the stream than ``max_clients`` allows."""


class ApprovalFeed:
    """Mirrors the decision service's pending approvals and streams their changes."""

    def __init__(
        self,
        stub: d_grpc.DecisionServiceAsyncStub,
        *,
        metadata: Sequence[tuple[str, str]] = (),
        max_pending: int = 1000,
        max_clients: int = 200,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 5.0,
    ) -> None:
        self._stub = stub
        self._metadata = tuple(metadata)
        self._max_pending = max_pending
        self._max_clients = max_clients
        self._clock = clock
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._pending: OrderedDict[str, ApprovalView] = OrderedDict()
        self._answered: OrderedDict[str, ApprovalView] = OrderedDict()
        self._clients: set[asyncio.Queue[Change | None]] = set()
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        """Set while a stream to the decision service is open."""
        self.overflow = 0
        """Pending approvals not kept because ``max_pending`` was reached."""
        self.reconnects = 0
        """Streams opened after the first (for tests and the status line)."""

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Begin following the stream (in a background task)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="console-approval-feed")

    async def close(self) -> None:
        """Stop following and end every browser's stream."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for queue in list(self._clients):
            self._offer(queue, None)

    async def _run(self) -> None:
        delay = self._backoff[0]
        first = True
        while True:
            try:
                call = self._stub.WatchApprovals(
                    d_pb2.WatchApprovalsRequest(), metadata=self._metadata, wait_for_ready=True
                )
                await call.wait_for_connection()  # raises AioRpcError if it fails
                if not first:
                    self.reconnects += 1
                first = False
                self.connected.set()
                async for message in call:
                    delay = self._backoff[0]
                    self._apply(approval_view(message.approval))
                log.info("the approvals stream ended; reconnecting")
            except grpc.aio.AioRpcError as err:
                log.warning("approvals stream failed (%s); reconnecting", err.code().name)
            finally:
                self.connected.clear()
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, self._backoff[1])

    # -- state ----------------------------------------------------------------------------

    def _apply(self, view: ApprovalView) -> None:
        if view.pending:
            if view.approval_id not in self._pending and len(self._pending) >= self._max_pending:
                self.overflow += 1
                return
            self._pending[view.approval_id] = view
        else:
            self._pending.pop(view.approval_id, None)
            self._remember(view)
        self._broadcast(view)

    def _remember(self, view: ApprovalView) -> None:
        self._answered[view.approval_id] = view
        self._answered.move_to_end(view.approval_id)
        while len(self._answered) > RECENT_ANSWERS:
            self._answered.popitem(last=False)

    def _expire_overdue(self) -> None:
        """Pending approvals past their deadline are denials (DEC-8) even when nobody is
        waiting on them to say so; show them as timed out."""
        now = self._clock()
        for view in list(self._pending.values()):
            if view.expire_time is not None and view.expire_time <= now:
                self._apply(replace(view, state="expired"))

    def pending(self) -> list[ApprovalView]:
        """The pending approvals, oldest first."""
        self._expire_overdue()
        return list(self._pending.values())

    def answered(self, approval_id: str) -> ApprovalView | None:
        """A recently answered approval, if remembered."""
        return self._answered.get(approval_id)

    def forget_pending(self, approval_id: str, state: str, resolver: str) -> None:
        """Record an answer learnt from a ResolveApproval reply (the stream will say the
        same; this makes the page right even before it does)."""
        view = self._pending.get(approval_id)
        if view is not None:
            self._apply(replace(view, state=state, resolver=resolver))

    # -- browsers -------------------------------------------------------------------------

    def follow(self) -> AsyncIterator[Change]:
        """Changes from now on, until the feed closes or this follower falls behind.

        Registers at once (raising ``TooManyClients`` past the bound), so a caller can
        refuse the browser before it starts a response."""
        if len(self._clients) >= self._max_clients:
            raise TooManyClients(f"more than {self._max_clients} browsers follow approvals")
        queue: asyncio.Queue[Change | None] = asyncio.Queue(CLIENT_QUEUE)
        self._clients.add(queue)
        return self._drain(queue)

    async def _drain(self, queue: asyncio.Queue[Change | None]) -> AsyncIterator[Change]:
        try:
            while True:
                change = await queue.get()
                if change is None:
                    return
                yield change
        finally:
            self._clients.discard(queue)

    @property
    def client_count(self) -> int:
        """Browsers following now."""
        return len(self._clients)

    def _broadcast(self, view: ApprovalView) -> None:
        for queue in list(self._clients):
            self._offer(queue, Change(view))

    def _offer(self, queue: asyncio.Queue[Change | None], change: Change | None) -> None:
        try:
            queue.put_nowait(change)
        except asyncio.QueueFull:
            # Too slow: end its stream (the browser reconnects and re-reads the page).
            self._clients.discard(queue)
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()
            queue.put_nowait(None)
