"""Every typed client method takes ``timeout=`` and ``metadata=`` and sends them (#13 item
2), over a real gRPC server on port 0 that records what each call carried.

The server answers every RPC of the four services with an empty message (a stream with
none), so the test sees exactly the deadline and metadata each client method sends. A
new client method without both keywords, or one this test does not call, fails here.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from stockade.client.agent import AgentClient, SyncAgentClient
from stockade.client.audit import AuditClient, SyncAuditClient
from stockade.client.base import (
    FAIL_CLOSED,
    aio_channel,
    call_options,
    deadline_s,
    merge_metadata,
    sync_channel,
)
from stockade.client.decision import DecisionClient, SyncDecisionClient
from stockade.client.executor import ExecutorClient, SyncExecutorClient
from stockade.server.app import Registration, create_server, stop_server
from stockade.server.settings import ServerSettings
from stockade.v1 import agent_service_pb2 as ag_pb2
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.clientcalls import CLIENT_CALLS

CLIENTS = [
    DecisionClient,
    SyncDecisionClient,
    ExecutorClient,
    SyncExecutorClient,
    AgentClient,
    SyncAgentClient,
    AuditClient,
    SyncAuditClient,
]
NOT_RPC_METHODS = {"close", "stub"}
"""Public members that make no call."""

CALLS = CLIENT_CALLS
SERVICES = {
    "stockade.v1.DecisionService": d_pb2,
    "stockade.v1.ExecutorService": x_pb2,
    "stockade.v1.AgentService": ag_pb2,
    "stockade.v1.AuditService": au_pb2,
}


def public_methods(cls: type) -> list[str]:
    return [
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_")
        and name not in NOT_RPC_METHODS
        and (inspect.isfunction(member) or inspect.isasyncgenfunction(member))
    ]


@pytest.mark.parametrize("cls", CLIENTS, ids=lambda c: c.__name__)
def test_every_typed_method_takes_timeout_and_metadata(cls: type) -> None:
    methods = public_methods(cls)
    assert sorted(methods) == sorted(CALLS[cls.__name__]), "a method this test does not call"
    for name in methods:
        params = inspect.signature(getattr(cls, name)).parameters
        for keyword in ("timeout", "metadata"):
            assert keyword in params, f"{cls.__name__}.{name} has no {keyword}="
            assert params[keyword].kind is inspect.Parameter.KEYWORD_ONLY
            assert params[keyword].default is None


class Seen:
    """What each call carried: (method, deadline left in seconds or None, metadata)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float | None, dict[str, str]]] = []
        self.lock = threading.Lock()

    def add(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        md = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        with self.lock:
            self.calls.append((method, context.time_remaining(), md))


def _handlers(seen: Seen) -> Callable[[object, grpc.aio.Server], None]:
    def add(servicer: object, server: grpc.aio.Server) -> None:
        for full_name, pb2 in SERVICES.items():
            service = pb2.DESCRIPTOR.services_by_name[full_name.rsplit(".", 1)[1]]
            handlers: dict[str, grpc.RpcMethodHandler] = {}
            for method in service.methods:
                handlers[method.name] = _handler(seen, method)
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(full_name, handlers),)
            )

    return add


def _handler(seen: Seen, method: Any) -> grpc.RpcMethodHandler:
    name = method.name
    if method.server_streaming:

        async def stream(request: Any, context: Any) -> AsyncIterator[bytes]:
            if method.client_streaming:
                async for _ in request:
                    pass
            seen.add(name, context)
            return
            yield b""  # an async generator that yields nothing

        if method.client_streaming:
            return grpc.stream_stream_rpc_method_handler(stream)
        return grpc.unary_stream_rpc_method_handler(stream)

    async def unary(request: Any, context: Any) -> bytes:
        if method.client_streaming:
            async for _ in request:
                pass
        seen.add(name, context)
        if name == "Decide":  # a real verdict, so the client does not fail closed
            return d_pb2.DecideResponse(verdict=c_pb2.VERDICT_ALLOW).SerializeToString()
        return b""

    if method.client_streaming:
        return grpc.stream_unary_rpc_method_handler(unary)
    return grpc.unary_unary_rpc_method_handler(unary)


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Seen]]:
    seen = Seen()
    srv = await create_server(
        "recorder",
        ServerSettings(listen="127.0.0.1:0", grace_seconds=0),
        [Registration(_handlers(seen), None, "stockade.test.Recorder")],
    )
    try:
        yield srv.address, seen
    finally:
        await stop_server(srv)


async def _drive(result: Any) -> None:
    if inspect.isasyncgen(result):
        async for _ in result:
            pass
    elif inspect.isawaitable(result):
        await result
    elif inspect.isgenerator(result):
        await asyncio.to_thread(list, result)


async def test_each_method_sends_its_timeout_and_metadata(server: tuple[str, Seen]) -> None:
    address, seen = server
    async with aio_channel(address) as ach:
        channel = sync_channel(address)
        try:
            for cls in CLIENTS:
                is_sync = cls.__name__.startswith("Sync")
                client: Any
                if cls in (AuditClient, SyncAuditClient):
                    client = cls(address) if is_sync else cls(address, channel=ach)
                else:
                    client = cls(channel if is_sync else ach)
                for name, args in CALLS[cls.__name__].items():
                    probe = f"{cls.__name__}.{name}"
                    before = len(seen.calls)
                    method = getattr(client, name)
                    if is_sync:
                        result = await asyncio.to_thread(
                            method, *args, timeout=7.5, metadata=[("x-probe", probe)]
                        )
                        await _drive(result)
                    else:
                        await _drive(method(*args, timeout=7.5, metadata=[("x-probe", probe)]))
                    made = seen.calls[before:]
                    assert made, f"{probe} made no call"
                    for rpc, left, md in made:
                        assert md.get("x-probe") == probe, (probe, rpc, md)
                        # 7.5 s, not the client's default (2, 10, 300 or 600 s); the
                        # server's clock reads the propagated deadline a little apart.
                        assert left is not None and 6 < left < 8, (probe, rpc, left)
                if cls is SyncAuditClient:
                    client.close()
        finally:
            channel.close()


async def test_without_a_timeout_every_call_still_has_a_deadline(server: tuple[str, Seen]) -> None:
    """The client's default applies; only a live stream (Tail) may run without one."""
    address, seen = server
    async with aio_channel(address) as ach:
        await DecisionClient(ach).resolve_approval(d_pb2.ResolveApprovalRequest())
        await ExecutorClient(ach).cancel("s", "c")
        await AgentClient(ach).cancel("s")
        await AuditClient(address, channel=ach).session_metrics("s")
        async for _ in AuditClient(address, channel=ach).tail():
            pass
    deadlines = {rpc: left for rpc, left, _ in seen.calls}
    for rpc in ("ResolveApproval", "Cancel", "GetSessionMetrics"):
        assert deadlines[rpc] is not None and deadlines[rpc] > 0, rpc
    assert deadlines["Tail"] is None


async def test_forwarded_credentials_replace_the_clients_own(server: tuple[str, Seen]) -> None:
    """The agent forwards its caller's authorization: only that one is sent, never beside
    the client's own admin token (the server would accept either)."""
    address, seen = server
    async with aio_channel(address) as ach:
        client = DecisionClient(ach, admin_token="client-own-token")
        await client.resolve_approval(d_pb2.ResolveApprovalRequest())
        await client.resolve_approval(
            d_pb2.ResolveApprovalRequest(), metadata=[("Authorization", "Bearer callers-token")]
        )
    (_, _, own), (_, _, forwarded) = seen.calls
    assert own["authorization"] == "Bearer client-own-token"
    assert forwarded["authorization"] == "Bearer callers-token"
    assert merge_metadata(
        [("authorization", "Bearer a"), ("x-request-id", "r")],
        [("AUTHORIZATION", "Bearer b")],
    ) == (("x-request-id", "r"), ("authorization", "Bearer b"))


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True])
def test_a_timeout_that_is_not_a_positive_time_is_refused(bad: float) -> None:
    """Zero, negative, infinite or NaN would mean "fail at once" or "wait for ever"."""
    with pytest.raises(ValueError, match="positive number of seconds"):
        deadline_s(bad, 10.0)
    with pytest.raises(ValueError):
        call_options(bad, None, default_s=10.0)


async def test_permission_answers_fail_closed_the_same_way() -> None:
    """Decide and AwaitApproval against nothing: the same DENY, with the same words."""
    async with aio_channel("unix:///tmp/stockade-nobody-listens-dec13.sock") as ch:
        client = DecisionClient(ch)
        decided = await client.decide(d_pb2.DecideRequest(), timeout=0.5)
        waited = await client.await_approval("appr-x", timeout=0.5)
    for answer in (decided, waited):
        assert answer.verdict == c_pb2.VERDICT_DENY
        assert re.match(
            rf"{re.escape(FAIL_CLOSED)}( after \d+ attempts)?: decision service UNAVAILABLE: ",
            answer.reason,
        ), answer.reason
