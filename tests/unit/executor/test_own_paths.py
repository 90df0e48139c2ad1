"""Stockade's own state, keys and policy inside the roots (red team, issue 11, reach).

With the defaults (``WORKSPACE=.``, ``STATE_DIR=.stockade/state``) a ``stockade serve all``
started in a project keeps the decision service's grant-signing key, its session database
and the executor's state inside the writable root: ``cat
.stockade/state/grant_signing_key.pem`` was ALLOWED. Through the real ExecutorService
(gRPC, real launcher): the analysis and the file tools refuse them, a program the analysis
cannot see into finds the directory hidden, and ordinary files stay readable."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.executor.app import SERVICE_NAME, executor_servicer
from stockade.executor.own import own_paths
from stockade.executor.settings import ExecutorSettings
from stockade.server import Registration, create_server
from stockade.server.app import stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

KEY = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIStockadeOwnKeyForTests\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    state = workspace / ".stockade" / "state"
    state.mkdir(parents=True)
    (state / "grant_signing_key.pem").write_text(KEY)
    (state / "decision.db").write_text("sessions")
    (workspace / "app.py").write_text("print('hello')\n")
    return workspace


@pytest.fixture
async def stub(ws: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    monkeypatch.chdir(ws)  # as `stockade serve all` started in the project
    settings = ExecutorSettings(
        listen="127.0.0.1:0",
        workspace=ws,
        state_dir=ws / ".stockade" / "state",
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
            yield x_grpc.ExecutorServiceStub(channel)
        finally:
            await channel.close()
            await servicer.core.drain()
            await stop_server(running)


def _call(tool: str, args: dict[str, Any], call_id: str) -> c_pb2.ToolCall:
    st = struct_pb2.Struct()
    st.update(args)
    return c_pb2.ToolCall(call_id=call_id, tool_name=tool, arguments=st, session_id="s")


async def _run(stub: Any, tool: str, args: dict[str, Any], call_id: str) -> tuple[str, Any]:
    out: list[str] = []
    async for msg in stub.Execute(x_pb2.ExecuteRequest(call=_call(tool, args, call_id))):
        if msg.HasField("chunk"):
            out.append(msg.chunk.data)
        else:
            return "".join(out) + msg.result.content, msg.result
    raise AssertionError("no result")


async def test_stockade_state_is_refused_to_the_analysis_and_the_file_tools(stub: Any) -> None:
    for command in (
        "cat .stockade/state/grant_signing_key.pem",
        "head -c 100 .stockade/state/decision.db",
        "ls .stockade/state",
    ):
        inspection = await stub.Inspect(
            x_pb2.InspectRequest(call=_call("run_bash", {"command": command}, "i"))
        )
        rules = inspection.inspection.tool_rules
        assert any(r.effect == c_pb2.RULE_EFFECT_DENY for r in rules), command
    out, _ = await _run(
        stub, "read_file", {"file_path": ".stockade/state/grant_signing_key.pem"}, "r1"
    )
    assert "PRIVATE KEY" not in out
    write = await stub.Inspect(
        x_pb2.InspectRequest(
            call=_call(
                "file_write", {"file_path": ".stockade/state/decision.db", "content": "x"}, "w"
            )
        )
    )
    assert any(r.effect == c_pb2.RULE_EFFECT_DENY for r in write.inspection.tool_rules)


async def test_a_program_finds_the_state_hidden_and_ordinary_files_readable(
    stub: Any, ws: Path
) -> None:
    # A program the analysis cannot see into builds the path at run time.
    probe = (
        "python3 -c \"import os; p = os.path.join('.stock' + 'ade', 'state'); "
        "print(os.listdir(p)); print(open(os.path.join(p, 'grant_signing_key.pem')).read())\"; "
        "cat app.py"
    )
    out, _ = await _run(stub, "run_bash", {"command": probe}, "b1")
    assert "PRIVATE KEY" not in out and "decision.db" not in out, out
    assert "print('hello')" in out, out
    assert "PRIVATE KEY" in (ws / ".stockade/state/grant_signing_key.pem").read_text()


def test_own_paths_names_state_secrets_and_configured_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "keys").mkdir(parents=True)
    (ws / "keys" / "tls.key").write_text("k")
    environ = {
        "STOCKADE_EXECUTOR_TLS_KEY_FILE": str(ws / "keys" / "tls.key"),
        "STOCKADE_DECISION_PROJECT_POLICY_FILE": str(ws / "stockade.toml"),
        "STOCKADE_AUDIT_STATE_DIR": str(ws / "audit-state"),
        "STOCKADE_DECISION_STATE_DIR": str(tmp_path),  # holds the root: left out
        "OTHER_KEY_FILE": str(ws / "x"),
    }
    own = own_paths(None, roots=(str(ws),), environ=environ, cwd=str(tmp_path / "elsewhere"))
    real = os.path.realpath
    assert real(str(ws / "keys" / "tls.key")) in own.secret_files
    assert real(str(ws / "stockade.toml")) in own.files
    assert real(str(ws / "audit-state")) in own.state_dirs
    assert real(str(ws / ".stockade" / "state")) in own.state_dirs
    assert real(str(tmp_path)) not in own.state_dirs
    assert not any("/x" == p[-2:] for p in own.protected_write_globs())
    # Reads: only what exists (a denied path that is not there would make every
    # recursive read of the root a question); writes: all of it.
    assert real(str(ws / "keys" / "tls.key")) in own.denied_read_globs()
    assert real(str(ws / "audit-state")) not in own.denied_read_globs()
    assert real(str(ws / "audit-state")) in own.protected_write_globs()
    assert real(str(ws / "stockade.toml")) in own.protected_write_globs()
