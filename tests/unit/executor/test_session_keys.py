"""Calls are known by (session id, call id), not by the call id alone (#12 item 4).

Call ids come from the model or its provider and repeat across sessions. Over a real
gRPC server with the real launcher: the same call id in concurrent sessions runs in each,
Cancel stops only the named session's call, and saved full outputs never overwrite each
other.
"""

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
from tests.procs import pids_with, sleep_marker, until_gone, until_pids_with


@dataclass
class Server:
    stub: x_grpc.ExecutorServiceStub
    servicer: ExecutorServicer
    library: Path


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    ws = tmp_path / "ws"
    lib = ws / "lib"
    lib.mkdir(parents=True)
    settings = ExecutorSettings(
        listen="127.0.0.1:0",
        workspace=ws,
        library_dir=lib,
        max_output_chars=200,
        allow_ungranted=True,
    )
    async with executor_servicer(settings) as servicer:
        running = await create_server(
            "executor",
            settings,
            [Registration(x_grpc.add_ExecutorServiceServicer_to_server, servicer, SERVICE_NAME)],
        )
        channel = grpc.aio.insecure_channel(running.address)
        try:
            yield Server(x_grpc.ExecutorServiceStub(channel), servicer, lib)
        finally:
            await channel.close()
            await servicer.core.drain()
            await stop_server(running)


def bash(session: str, call_id: str, command: str) -> x_pb2.ExecuteRequest:
    st = struct_pb2.Struct()
    st.update({"command": command})
    return x_pb2.ExecuteRequest(
        call=c_pb2.ToolCall(
            call_id=call_id, tool_name="run_bash", arguments=st, session_id=session
        ),
        interrupt_behavior=c_pb2.INTERRUPT_BEHAVIOR_CANCEL,
    )


async def result_of(stream: Any) -> x_pb2.ExecuteResult:
    while (msg := await stream.read()) is not grpc.aio.EOF:
        if msg.HasField("result"):
            return msg.result  # type: ignore[no-any-return]
    raise AssertionError("no result")


async def test_same_call_id_runs_in_every_session(server: Server) -> None:
    sessions = [f"ses-{i}" for i in range(6)]
    results = await asyncio.gather(
        *(result_of(server.stub.Execute(bash(s, "call_1", f"echo from {s}"))) for s in sessions)
    )
    assert [r.status for r in results] == [x_pb2.EXECUTION_STATUS_OK] * len(sessions)
    assert [r.content.strip() for r in results] == [f"from {s}" for s in sessions]


async def test_cancel_stops_only_the_named_sessions_call(server: Server) -> None:
    marks = {"sA": sleep_marker(), "sB": sleep_marker()}
    streams = {
        s: server.stub.Execute(bash(s, "c1", f"echo started; sleep {m}")) for s, m in marks.items()
    }
    for s, m in marks.items():
        await streams[s].read()
        assert await until_pids_with(m, 30), f"{s}'s command did not start"
    assert (await server.stub.Cancel(x_pb2.CancelRequest(session_id="sA", call_id="c1"))).found
    assert (await result_of(streams["sA"])).status == x_pb2.EXECUTION_STATUS_CANCELLED
    assert await until_gone(marks["sA"], 30) == []
    # Session B's call with the same id runs on.
    assert pids_with(marks["sB"])
    assert ("sB", "c1") in server.servicer.core.running()
    missing = await server.stub.Cancel(x_pb2.CancelRequest(session_id="sC", call_id="c1"))
    assert not missing.found
    assert (await server.stub.Cancel(x_pb2.CancelRequest(session_id="sB", call_id="c1"))).found
    assert (await result_of(streams["sB"])).status == x_pb2.EXECUTION_STATUS_CANCELLED
    assert await until_gone(marks["sB"], 30) == []


async def test_cancel_without_session_is_invalid(server: Server) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await server.stub.Cancel(x_pb2.CancelRequest(call_id="c1"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "session_id" in (info.value.details() or "")


@pytest.mark.parametrize("call_id", ["call_1", "../call_1"])
async def test_saved_outputs_do_not_overwrite_each_other(server: Server, call_id: str) -> None:
    sessions = ["sA", "sB", "../sA", "sA/../sB"]
    results = await asyncio.gather(
        *(
            result_of(
                server.stub.Execute(bash(s, call_id, f"for i in $(seq 200); do echo {s!r}; done"))
            )
            for s in sessions
        )
    )
    paths = [r.persisted_path for r in results]
    assert all(r.truncated for r in results)
    assert len(set(paths)) == len(sessions)
    for s, path in zip(sessions, paths, strict=True):
        p = Path(path)
        # Inside the library's tool-results, one folder per session, whatever the ids.
        assert p.parent.parent == (server.library / "tool-results").resolve()
        assert p.read_text().splitlines() == [s] * 200
