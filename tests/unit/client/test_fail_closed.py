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


async def test_an_approval_wait_the_server_cancels_or_ends_unavailable_reattaches() -> None:
    """A stopping service ends a wait UNAVAILABLE, or CANCELLED when it had received the
    wait and not yet started it: the approval is stored and still pending, so the client
    waits again (and gets the answer) instead of denying. Any other code still denies."""
    ends = [grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED]
    attempts: list[str] = []

    async def await_approval(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        approval_id = d_pb2.AwaitApprovalRequest.FromString(request).approval_id
        attempts.append(approval_id)
        if approval_id == "appr-denied":
            await context.abort(grpc.StatusCode.INTERNAL, "broken")
        if ends:
            await context.abort(ends.pop(0), "stopping")
        return d_pb2.AwaitApprovalResponse(verdict=c_pb2.VERDICT_ALLOW).SerializeToString()

    def add(servicer: object, server: grpc.aio.Server) -> None:
        handler = grpc.method_handlers_generic_handler(
            "stockade.v1.DecisionService",
            {"AwaitApproval": grpc.unary_unary_rpc_method_handler(await_approval)},
        )
        server.add_generic_rpc_handlers((handler,))

    srv = await create_server(
        "stopping",
        ServerSettings(listen="127.0.0.1:0", grace_seconds=0),
        [Registration(add, None, "x")],
    )
    try:
        async with aio_channel(srv.address) as ch:
            client = DecisionClient(ch)
            answer = await client.await_approval("appr-1", timeout=60)
            assert answer.verdict == c_pb2.VERDICT_ALLOW
            assert attempts == ["appr-1"] * 4
            denied = await client.await_approval("appr-denied", timeout=60)
        assert denied.verdict == c_pb2.VERDICT_DENY and "INTERNAL" in denied.reason
        assert attempts.count("appr-denied") == 1
    finally:
        await stop_server(srv)
