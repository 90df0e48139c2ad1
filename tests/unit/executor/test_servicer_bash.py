"""run_bash through the ExecutorService with the real launcher: streaming, re-checks,
CANCEL kills the command on client cancel, BLOCK lets it finish, capabilities."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.executor.app import SERVICE_NAME, executor_servicer
from stockade.executor.servicer import ExecutorServicer
from stockade.executor.settings import ExecutorSettings
from stockade.server import Registration, create_server
from stockade.server.app import stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc
from tests.procs import until_gone, until_pids_with


@dataclass
class Server:
    stub: x_grpc.ExecutorServiceStub
    servicer: ExecutorServicer


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello\n")
    settings = ExecutorSettings(listen="127.0.0.1:0", workspace=ws, allow_ungranted=True)
    async with executor_servicer(settings) as servicer:
        running = await create_server(
            "executor",
            settings,
            [Registration(x_grpc.add_ExecutorServiceServicer_to_server, servicer, SERVICE_NAME)],
        )
        channel = grpc.aio.insecure_channel(running.address)
        try:
            yield Server(x_grpc.ExecutorServiceStub(channel), servicer)
        finally:
            await channel.close()
            await servicer.core.drain()
            await stop_server(running)


def bash(command: str, call_id: str, **extra: Any) -> c_pb2.ToolCall:
    st = struct_pb2.Struct()
    st.update({"command": command, **extra})
    return c_pb2.ToolCall(call_id=call_id, tool_name="run_bash", arguments=st, session_id="s")


async def collect(stream: Any) -> tuple[str, x_pb2.ExecuteResult]:
    out = []
    async for msg in stream:
        if msg.HasField("chunk"):
            out.append(msg.chunk.data)
        else:
            return "".join(out), msg.result
    raise AssertionError("no result")


async def _until_gone(servicer: ExecutorServicer, call_id: str) -> None:
    while ("s", call_id) in servicer.core.running():
        await asyncio.sleep(0.02)


async def test_run_bash_streams_output(server: Server) -> None:
    out, result = await collect(
        server.stub.Execute(x_pb2.ExecuteRequest(call=bash("cat hello.txt; echo done", "b1")))
    )
    assert out == "hello\ndone\n"
    assert result.status == x_pb2.EXECUTION_STATUS_OK and result.exit_code == 0
    assert {layer.name for layer in result.layers} >= {"path_sandbox", "landlock"}


async def test_execute_refuses_denied_command_without_running_it(
    server: Server, tmp_path: Path
) -> None:
    target = tmp_path / "pwned"
    out, result = await collect(
        server.stub.Execute(x_pb2.ExecuteRequest(call=bash(f"touch {target}", "b2")))
    )
    assert result.status == x_pb2.EXECUTION_STATUS_REFUSED and out == ""
    assert not target.exists()


async def test_inspect_run_bash(server: Server) -> None:
    resp = await server.stub.Inspect(x_pb2.InspectRequest(call=bash("git status; rm -rf ~", "i1")))
    ins = resp.inspection
    assert [r.effect for r in ins.tool_rules] == [c_pb2.RULE_EFFECT_DENY]
    assert list(ins.analysis.sub_commands) == ["git", "rm"]
    assert ins.analysis.verdict == c_pb2.VERDICT_DENY
    resp = await server.stub.Inspect(x_pb2.InspectRequest(call=bash("ls -la", "i2")))
    assert list(resp.inspection.tool_rules) == [] and resp.inspection.read_only


async def test_client_cancel_kills_cancel_command(server: Server) -> None:
    marker = "31.4159"
    request = x_pb2.ExecuteRequest(
        call=bash(f"echo started; sleep {marker}", "c1"),
        interrupt_behavior=c_pb2.INTERRUPT_BEHAVIOR_CANCEL,
    )
    stream = server.stub.Execute(request)
    first = await stream.read()
    assert first.chunk.data == "started\n"
    assert await until_pids_with(marker)
    stream.cancel()
    await asyncio.wait_for(_until_gone(server.servicer, "c1"), 30)
    assert await until_gone(marker) == []


async def test_client_cancel_lets_block_command_finish(server: Server, tmp_path: Path) -> None:
    request = x_pb2.ExecuteRequest(
        call=bash("echo started; sleep 0.5; echo finished > done.txt", "c2"),
        interrupt_behavior=c_pb2.INTERRUPT_BEHAVIOR_BLOCK,
    )
    stream = server.stub.Execute(request)
    await stream.read()
    stream.cancel()
    await asyncio.wait_for(server.servicer.core.drain(), 30)
    await asyncio.wait_for(_until_gone(server.servicer, "c2"), 30)
    assert (tmp_path / "ws" / "done.txt").read_text() == "finished\n"


async def test_cancel_rpc_stops_command(server: Server) -> None:
    request = x_pb2.ExecuteRequest(
        call=bash("echo started; sleep 27.1828", "c3"),
        interrupt_behavior=c_pb2.INTERRUPT_BEHAVIOR_CANCEL,
    )
    stream = server.stub.Execute(request)
    await stream.read()
    assert (await server.stub.Cancel(x_pb2.CancelRequest(session_id="s", call_id="c3"))).found
    while True:
        msg = await stream.read()
        assert msg is not grpc.aio.EOF
        if msg.HasField("result"):
            result = msg.result
            break
    assert result.status == x_pb2.EXECUTION_STATUS_CANCELLED


async def test_capabilities_report_launcher_layers(server: Server) -> None:
    caps = await server.stub.GetCapabilities(x_pb2.GetCapabilitiesRequest())
    assert "run_bash" in caps.tools
    names = {layer.name for layer in caps.layers}
    assert {"path_sandbox", "grant_verification", "landlock", "netns", "rlimits"} <= names
    assert all(layer.detail for layer in caps.layers)
