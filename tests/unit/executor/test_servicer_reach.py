"""Issue 11's run-time layers through the real ExecutorService (gRPC, real launcher):
GetCapabilities and every Execute result report the memory cgroup with the configured
limit, and a command the analysis lets through (a program it cannot see into) still
cannot rewrite the repository's git config."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.executor.app import SERVICE_NAME, executor_servicer
from stockade.executor.settings import ExecutorSettings
from stockade.server import Registration, create_server
from stockade.server.app import stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[x_grpc.ExecutorServiceStub]:
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True, timeout=60)
    (ws / "rewrite.py").write_text(
        "import sys\n"
        "try:\n"
        "    open('.git/config', 'a').write('[core]\\n\\tfsmonitor = touch PWNED\\n')\n"
        "    print('WROTE')\n"
        "except OSError as e:\n"
        "    print('REFUSED', e.errno)\n"
    )
    settings = ExecutorSettings(
        listen="127.0.0.1:0", workspace=ws, allow_ungranted=True, memory_limit_mb=64
    )
    async with executor_servicer(settings) as servicer:
        running = await create_server(
            "executor",
            settings,
            [Registration(x_grpc.add_ExecutorServiceServicer_to_server, servicer, SERVICE_NAME)],
        )
        channel = grpc.aio.insecure_channel(running.address)
        try:
            yield x_grpc.ExecutorServiceStub(channel)
        finally:
            await channel.close()
            await servicer.core.drain()
            await stop_server(running)


def _bash(command: str, call_id: str) -> c_pb2.ToolCall:
    st = struct_pb2.Struct()
    st.update({"command": command})
    return c_pb2.ToolCall(call_id=call_id, tool_name="run_bash", arguments=st, session_id="s")


async def _collect(stream: Any) -> tuple[str, x_pb2.ExecuteResult]:
    out = []
    async for msg in stream:
        if msg.HasField("chunk"):
            out.append(msg.chunk.data)
        else:
            return "".join(out), msg.result
    raise AssertionError("no result")


async def test_memory_layer_and_read_only_git_through_the_service(
    stub: x_grpc.ExecutorServiceStub, tmp_path: Path
) -> None:
    caps = await stub.GetCapabilities(x_pb2.GetCapabilitiesRequest())
    memory = {layer.name: layer for layer in caps.layers}["memory_cgroup"]
    assert memory.active, memory.detail
    config = (tmp_path / "ws" / ".git" / "config").read_text()
    out, result = await _collect(
        stub.Execute(x_pb2.ExecuteRequest(call=_bash("python3 rewrite.py", "r1")))
    )
    assert result.status == x_pb2.EXECUTION_STATUS_OK, result
    assert "REFUSED 30" in out, out  # EROFS: the git dir is read-only at run time
    assert (tmp_path / "ws" / ".git" / "config").read_text() == config
    layers = {layer.name: layer for layer in result.layers}
    assert layers["memory_cgroup"].active
    # A repository made by a program the analysis cannot see into is removed, and the
    # command's output says so.
    (tmp_path / "ws" / "mk.py").write_text(
        "import subprocess\nsubprocess.run(['git', 'init', '-q', 'inner'], check=True)\n"
    )
    out, result = await _collect(
        stub.Execute(x_pb2.ExecuteRequest(call=_bash("python3 mk.py", "r2")))
    )
    assert result.status == x_pb2.EXECUTION_STATUS_OK, result
    assert "removed git repository data" in out and "inner/.git" in out, out
    assert not (tmp_path / "ws" / "inner" / ".git").exists()
    # The limit in force is the configured one (the host layer names the default).
    out, _ = await _collect(
        stub.Execute(
            x_pb2.ExecuteRequest(
                call=_bash(
                    "python3 -c \"import sys; b = bytearray(200 << 20); print('ALLOCATED')\"",
                    "r3",
                )
            )
        )
    )
    assert "ALLOCATED" not in out, out  # 200 MiB does not fit in the 64 MiB limit


async def test_a_command_cannot_reach_the_executors_own_unix_socket(tmp_path: Path) -> None:
    """The executor listens on a unix socket; its own commands run as its uid (so the
    peer-uid check would let them in), but the socket's directory is hidden from them."""
    import tempfile

    sock_dir = Path(tempfile.mkdtemp(prefix="stockade-sock-"))
    ws = tmp_path / "ws"
    ws.mkdir()
    listen = f"unix://{sock_dir}/executor.sock"
    settings = ExecutorSettings(listen=listen, workspace=ws, allow_ungranted=True)
    probe = (
        'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
        f"s.connect('{sock_dir}/executor.sock'); print('CONNECTED')\""
    )
    try:
        async with executor_servicer(settings) as servicer:
            running = await create_server(
                "executor",
                settings,
                [
                    Registration(
                        x_grpc.add_ExecutorServiceServicer_to_server, servicer, SERVICE_NAME
                    )
                ],
            )
            try:
                async with grpc.aio.insecure_channel(listen) as channel:
                    stub = x_grpc.ExecutorServiceStub(channel)
                    out, result = await _collect(
                        stub.Execute(x_pb2.ExecuteRequest(call=_bash(probe, "u1")))
                    )
            finally:
                await servicer.core.drain()
                await stop_server(running)
    finally:
        subprocess.run(["rm", "-rf", str(sock_dir)], check=False)
    assert result.status in (x_pb2.EXECUTION_STATUS_OK, x_pb2.EXECUTION_STATUS_ERROR), result
    assert "CONNECTED" not in out, out
    assert "No such file" in out or "Connection refused" in out or "denied" in out, out
