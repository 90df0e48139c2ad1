"""The agent's audit sink: ordered, traced, never blocking, never losing events.

Each event is sent with its own ``Record`` call from a task created when the event is
queued, so the RPC runs in the queuing context: the audit hop is part of the tool call's
trace (X-1). The tasks are chained, so rows arrive in the order the agent produced them.
If a call fails (the audit service is down or slow), the event goes to the spooling
``AuditRecorder`` instead, and so does every later event while the recorder still holds
any: the recorder replays them in order, idempotently by event id, when the service is
back (AUD-4); after that, events go direct again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import grpc

from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import audit_service_pb2_grpc as au_grpc

log = logging.getLogger("stockade.agent.audit")


class Fallback(Protocol):
    """The spooling recorder's side used here (``stockade.client.audit.AuditRecorder``)."""

    @property
    def pending(self) -> int:
        """Events not yet acknowledged."""
        ...

    def enqueue(self, event: au_pb2.AuditEvent) -> None:
        """Queue (or spool) an event."""
        ...

    async def aclose(self) -> None:
        """Flush what it can, spool the rest."""
        ...


class AuditSink:
    """Sends events in order, each in the context it was queued from."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        fallback: Fallback | None = None,
        *,
        timeout_s: float = 5.0,
    ) -> None:
        self._stub = au_grpc.AuditServiceStub(channel)
        self._fallback = fallback
        self._timeout_s = timeout_s
        self._last: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def enqueue(self, event: au_pb2.AuditEvent) -> None:
        """Queue an event without waiting."""
        task = asyncio.get_running_loop().create_task(self._send(event, self._last))
        self._last = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, event: au_pb2.AuditEvent, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])  # order only; its outcome is its own business
        if self._fallback is not None and self._fallback.pending:
            self._fallback.enqueue(event)  # stay behind the events it still holds
            return
        try:
            await self._stub.Record(au_pb2.RecordRequest(event=event), timeout=self._timeout_s)
        except grpc.aio.AioRpcError as err:
            if self._fallback is None:
                log.warning("audit event %s not recorded: %s", event.event_id, err.code().name)
                return
            log.warning("audit unavailable (%s); spooling from %s", err.code().name, event.event_id)
            self._fallback.enqueue(event)

    async def drain(self) -> None:
        """Wait until every queued event was sent or handed to the fallback."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Wait for the events in flight, then close the fallback (which flushes it)."""
        await self.drain()
        if self._fallback is not None:
            await self._fallback.aclose()
