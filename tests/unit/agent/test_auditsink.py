"""The agent's audit sink: order, fallback to the spooling recorder, trace context."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import grpc

from stockade.agent.auditsink import AuditSink
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import audit_service_pb2_grpc as au_grpc


class Audit(au_grpc.AuditServiceServicer):
    def __init__(self) -> None:
        self.ids: list[str] = []
        self.metadata: list[dict[str, Any]] = []

    async def Record(  # noqa: N802
        self, request: au_pb2.RecordRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> au_pb2.RecordResponse:
        await asyncio.sleep(random.random() / 200)  # jitter: concurrent calls would reorder
        self.ids.append(request.event.event_id)
        return au_pb2.RecordResponse()


@dataclass
class Recorder:
    events: list[str] = field(default_factory=list)
    acked: int = 0
    closed: bool = False

    @property
    def pending(self) -> int:
        return len(self.events) - self.acked

    def enqueue(self, event: au_pb2.AuditEvent) -> None:
        self.events.append(event.event_id)

    async def aclose(self) -> None:
        self.closed = True


async def serve(service: Audit, port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    au_grpc.add_AuditServiceServicer_to_server(service, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


async def test_events_arrive_in_order() -> None:
    service = Audit()  # type: ignore[abstract]
    server, port = await serve(service)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        sink = AuditSink(channel)
        for i in range(40):
            sink.enqueue(au_pb2.AuditEvent(event_id=f"e{i}"))
        await sink.aclose()
    await server.stop(None)
    assert service.ids == [f"e{i}" for i in range(40)]


async def test_outage_spools_in_order_then_goes_direct_again() -> None:
    service = Audit()  # type: ignore[abstract]
    server, port = await serve(service)
    recorder = Recorder()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        sink = AuditSink(channel, recorder, timeout_s=2)
        sink.enqueue(au_pb2.AuditEvent(event_id="a"))
        await asyncio.sleep(0.2)
        await server.stop(None)  # the audit service goes away
        for name in ("b", "c", "d"):
            sink.enqueue(au_pb2.AuditEvent(event_id=name))
        await sink.drain()
        assert service.ids == ["a"] and recorder.events == ["b", "c", "d"]
        server, _ = await serve(service, port)  # back, but the recorder still holds events
        sink.enqueue(au_pb2.AuditEvent(event_id="e"))
        await sink.drain()
        assert recorder.events[-1] == "e" and service.ids == ["a"]
        recorder.acked = len(recorder.events)  # the recorder replayed everything
        await asyncio.wait_for(channel.channel_ready(), 10)
        sink.enqueue(au_pb2.AuditEvent(event_id="f"))
        await sink.aclose()
    await server.stop(None)
    assert service.ids == ["a", "f"] and recorder.closed
