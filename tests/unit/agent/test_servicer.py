"""AgentService over real gRPC: RunTurn, Cancel, ResolveApproval pass-through, remote tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from stockade.agent.convert import event_to_pb
from stockade.agent.core import AgentCore
from stockade.agent.remote_tools import ToolProviderClient
from stockade.agent.servicer import AgentServicer
from stockade.agent.settings import AgentSettings
from stockade.llm.base import ModelToolCall, ModelTurn
from stockade.papers.app import PapersApp
from stockade.papers.settings import PapersSettings
from stockade.server import Registration
from stockade.server.app import create_server, stop_server
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import agent_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from tests.unit.agent.conftest import Harness, ListProvider, finished


def turn(*calls: ModelToolCall) -> ModelTurn:
    return ModelTurn(tool_calls=calls, prompt_tokens=10, completion_tokens=5)


async def serve_agent(core: AgentCore) -> Any:
    settings = AgentSettings(listen="127.0.0.1:0", grace_seconds=0)
    registration = Registration(
        a_grpc.add_AgentServiceServicer_to_server, AgentServicer(core), "stockade.v1.AgentService"
    )
    return await create_server("agent", settings, [registration])


@pytest.fixture
async def papers() -> AsyncIterator[str]:
    app = PapersApp(PapersSettings(listen="127.0.0.1:0", grace_seconds=0))
    async with app.open() as registrations:
        running = await create_server(app.name, app.settings, registrations)
        yield running.address
        await stop_server(running)


async def test_approval_answered_through_the_agent_with_the_callers_credentials(
    harness: Harness,
) -> None:
    harness.decision.verdicts["file_write"] = c_pb2.VERDICT_ASK
    provider = ListProvider(
        [turn(ModelToolCall("c1", "file_write", {"file_path": "a", "content": "b"}))]
    )
    running = await serve_agent(harness.core(provider))
    async with grpc.aio.insecure_channel(running.address) as channel:
        stub = a_grpc.AgentServiceStub(channel)
        events = []
        async for event in stub.RunTurn(a_pb2.RunTurnRequest(session_id="s1", message="go")):
            events.append(event)
            if event.WhichOneof("event") != "permission_requested":
                continue
            # An explicit ask: the event tells the caller "always" would only allow once.
            assert not event.permission_requested.always_allow_applies
            request = a_pb2.ResolveAgentApprovalRequest(
                approval_id=event.permission_requested.approval_id,
                resolution=d_pb2.RESOLUTION_ALWAYS_ALLOW,
                resolver="ops-bot",
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ResolveApproval(request)  # no credentials: the decision refuses
            assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
            answer = await stub.ResolveApproval(
                request, metadata=(("authorization", "Bearer admin"),)
            )
            assert answer.approval.state == d_pb2.APPROVAL_STATE_ALLOWED
            assert answer.approval.resolver == "ops-bot"
            assert answer.note == "allowed once, no session grant made"  # passed through
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.ResolveApproval(a_pb2.ResolveAgentApprovalRequest(approval_id="x"))
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    await stop_server(running)
    assert finished(events)["c1"].verdict == c_pb2.VERDICT_ALLOW
    assert events[-1].terminated.reason == a_pb2.TERMINATION_REASON_COMPLETED


async def test_cancel_over_grpc(harness: Harness) -> None:
    provider = ListProvider([], block=asyncio.Event())
    running = await serve_agent(harness.core(provider))
    async with grpc.aio.insecure_channel(running.address) as channel:
        stub = a_grpc.AgentServiceStub(channel)
        assert not (await stub.Cancel(a_pb2.CancelTurnRequest(session_id="s1"))).cancelled
        stream = stub.RunTurn(a_pb2.RunTurnRequest(session_id="s1", message="go"))
        reader = asyncio.ensure_future(_collect(stream))
        for _ in range(200):
            if provider.requests:
                break
            await asyncio.sleep(0.01)
        assert (await stub.Cancel(a_pb2.CancelTurnRequest(session_id="s1"))).cancelled
        events = await asyncio.wait_for(reader, 10)
    await stop_server(running)
    assert events[-1].terminated.reason == a_pb2.TERMINATION_REASON_CANCELLED


async def _collect(stream: Any) -> list[a_pb2.RunTurnResponse]:
    return [event async for event in stream]


async def test_remote_paper_tools_run_in_parallel_through_the_pipeline(
    harness: Harness, papers: str
) -> None:
    provider = ListProvider(
        [
            turn(
                ModelToolCall("p1", "search_papers", {"query": "supernovae"}),
                ModelToolCall("p2", "get_paper_metadata", {"paper_id": "1602.03837"}),
                ModelToolCall("p3", "get_paper_content", {"paper_id": "missing"}),
            )
        ]
    )
    client = ToolProviderClient(papers)
    core = harness.core(provider, tool_providers={papers: client})
    running = await serve_agent(core)
    async with grpc.aio.insecure_channel(running.address) as channel:
        stub = a_grpc.AgentServiceStub(channel)
        events = await _collect(stub.RunTurn(a_pb2.RunTurnRequest(session_id="s1", message="go")))
    await stop_server(running)
    await client.close()
    done = finished(events)
    results = json.loads(done["p1"].content)["results"]
    assert {r["paper_id"] for r in results[:2]} == {"astro-ph/9805201", "astro-ph/9812133"}
    assert json.loads(done["p2"].content)["year"] == 2016
    assert "no paper with id 'missing'" in done["p3"].content
    assert harness.executor.executed == []  # remote tools never go through the executor
    assert harness.executor.inspected == []
    remote = [r for r in harness.decision.requests if r.call.tool_name == "search_papers"]
    assert remote and remote[0].inspection.read_only


async def test_unserved_remote_tools_are_not_offered(harness: Harness) -> None:
    provider = ListProvider([turn(ModelToolCall("p1", "search_papers", {"query": "x"}))])
    events = [event_to_pb(e) async for e in harness.core(provider).run_turn("s1", "go")]
    assert "unknown tool 'search_papers'" in finished(events)["p1"].content
