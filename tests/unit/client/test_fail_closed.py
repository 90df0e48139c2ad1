"""The async decision client denies when the service is unreachable or late."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from stockade.client.base import aio_channel
from stockade.client.decision import DecisionClient
from stockade.server.app import Registration, create_server, stop_server
from stockade.server.settings import ServerSettings
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2


async def test_unreachable_service_is_a_deny() -> None:
    async with aio_channel("unix:///tmp/stockade-nothing-listens-here.sock") as ch:
        resp = await DecisionClient(ch, decide_deadline_s=0.5).decide(d_pb2.DecideRequest())
    assert resp.verdict == c_pb2.VERDICT_DENY
    assert "fail closed" in resp.reason


async def test_late_answer_is_a_deny() -> None:
    async def slow(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await asyncio.sleep(2)
        return d_pb2.DecideResponse(verdict=c_pb2.VERDICT_ALLOW).SerializeToString()

    def add(servicer: object, server: grpc.aio.Server) -> None:
        handler = grpc.method_handlers_generic_handler(
            "stockade.v1.DecisionService", {"Decide": grpc.unary_unary_rpc_method_handler(slow)}
        )
        server.add_generic_rpc_handlers((handler,))

    srv = await create_server(
        "slow",
        ServerSettings(listen="127.0.0.1:0", grace_seconds=0),
        [Registration(add, None, "x")],
    )
    try:
        async with aio_channel(srv.address) as ch:
            resp = await DecisionClient(ch, decide_deadline_s=0.2).decide(d_pb2.DecideRequest())
        assert resp.verdict == c_pb2.VERDICT_DENY
        assert "DEADLINE_EXCEEDED" in resp.reason
    finally:
        await stop_server(srv)
