"""The paper ToolProvider over real gRPC: in-process server and the real entry point."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade.agent.ports import discover
from stockade.agent.registry import Location
from stockade.agent.remote_tools import ToolProviderClient
from stockade.agent.tools import default_registry
from stockade.papers.app import PapersApp
from stockade.papers.settings import PapersSettings
from stockade.server.app import create_server, stop_server
from stockade.server.errors import error_info


@pytest.fixture
async def papers_address() -> AsyncIterator[str]:
    app = PapersApp(PapersSettings(listen="127.0.0.1:0", grace_seconds=0))
    async with app.open() as registrations:
        running = await create_server(app.name, app.settings, registrations)
        yield running.address
        await stop_server(running)


async def test_list_tools_merges_into_the_agent_registry(papers_address: str) -> None:
    client = ToolProviderClient(papers_address)
    registry = default_registry().restrict(["read_file"])
    assert "search_papers" not in default_registry()  # a product tool, not a default
    taken = await discover(registry, [client])
    await client.close()
    assert taken == {papers_address: ["search_papers", "get_paper_metadata", "get_paper_content"]}
    spec = registry.get("get_paper_metadata")
    assert spec.location is Location.REMOTE and spec.provider == papers_address
    assert spec.read_only and spec.is_concurrency_safe({})
    assert spec.parameters["required"] == ["paper_id"]


async def test_call_tool_results_and_errors(papers_address: str) -> None:
    client = ToolProviderClient(papers_address)
    found = await client.call_tool(
        session_id="s1", call_id="c1", tool_name="search_papers", arguments={"query": "cmb planck"}
    )
    assert not found.is_error
    assert json.loads(found.content)["results"][0]["paper_id"] == "1807.06209"
    missing = await client.call_tool(
        session_id="s1", call_id="c2", tool_name="get_paper_content", arguments={"paper_id": "x"}
    )
    assert missing.is_error and "no paper with id 'x'" in missing.content
    bad = await client.call_tool(
        session_id="s1", call_id="c3", tool_name="search_papers", arguments={"query": 5}
    )
    assert bad.is_error and "expected string" in bad.content
    unknown = await client.call_tool(
        session_id="s1", call_id="c4", tool_name="run_bash", arguments={"command": "id"}
    )
    assert unknown.is_error and "NOT_FOUND" in unknown.content
    await client.close()


async def test_unknown_tool_is_not_found_with_error_info(papers_address: str) -> None:
    from stockade.v1 import common_pb2
    from stockade.v1 import tool_provider_pb2 as tp_pb2
    from stockade.v1 import tool_provider_pb2_grpc as tp_grpc

    async with grpc.aio.insecure_channel(papers_address) as channel:
        stub = tp_grpc.ToolProviderStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.CallTool(
                tp_pb2.CallToolRequest(call=common_pb2.ToolCall(tool_name="file_write"))
            )
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND
        info = error_info(caught.value)
        assert info is not None and info.reason == "UNKNOWN_TOOL"


async def test_unreachable_provider_is_skipped() -> None:
    registry = default_registry().restrict(["read_file"])
    client = ToolProviderClient("127.0.0.1:1", timeout_s=2)
    assert await discover(registry, [client]) == {}
    result = await client.call_tool(
        session_id="s", call_id="c", tool_name="search_papers", arguments={"query": "x"}
    )
    await client.close()
    assert result.is_error and "UNAVAILABLE" in result.content
    assert registry.names() == ["read_file"]


async def test_entry_point_serves_health_and_stops_on_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    env = {
        **os.environ,
        "STOCKADE_PAPERS_LISTEN": "127.0.0.1:0",
        "STOCKADE_READY_FILE": str(ready),
        "OTEL_SDK_DISABLED": "true",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stockade.papers", env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        for _ in range(1800):  # at least 90 s: a busy machine can be slow to start Python
            if ready.exists() or proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        assert ready.exists(), "provider did not become ready"
        address = ready.read_text().strip().split("=", 1)[1]
        async with grpc.aio.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = await health.Check(
                health_pb2.HealthCheckRequest(service="stockade.v1.ToolProvider")
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0


def test_default_port_is_50055() -> None:
    assert PapersSettings().listen == "127.0.0.1:50055"
