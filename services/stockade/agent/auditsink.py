"""First-cut audit sink: fire-and-forget Record calls that never block the loop.

The audit issue replaces this with the batching, spooling client
(``stockade.client.audit``); the loop only needs ``enqueue`` and ``aclose``.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import audit_service_pb2_grpc as au_grpc

log = logging.getLogger("stockade.agent.audit")


class AuditSink:
    """Sends each event in its own background task."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = au_grpc.AuditServiceStub(channel)
        self._tasks: set[asyncio.Task[None]] = set()

    def enqueue(self, event: au_pb2.AuditEvent) -> None:
        """Queue an event without waiting."""
        task = asyncio.get_running_loop().create_task(self._send(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, event: au_pb2.AuditEvent) -> None:
        try:
            await self._stub.Record(au_pb2.RecordRequest(event=event), timeout=5.0)
        except grpc.aio.AioRpcError as err:
            log.warning("audit event %s not recorded: %s", event.event_id, err.code().name)

    async def aclose(self) -> None:
        """Wait for the events in flight."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
