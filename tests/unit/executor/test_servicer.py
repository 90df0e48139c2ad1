"""ExecutorService over a real gRPC server on port 0: Inspect, Execute, Cancel, capabilities,
grants, time limits and interrupt behaviour (CANCEL vs BLOCK) under client cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, json_format, struct_pb2

from stockade.decision.grants import GrantSigner, generate_keypair, load_private_key
from stockade.errors import PathRefused
from stockade.executor.app import SERVICE_NAME, build_core, build_sandbox
from stockade.executor.inspect import Inspection
from stockade.executor.servicer import ExecutorServicer
from stockade.executor.settings import ExecutorSettings
from stockade.executor.tools import file_tools
from stockade.executor.tools.base import Chunk, ExecContext, Status, Tool, ToolResult
from stockade.server import Registration, create_server
from stockade.server.app import stop_server
from stockade.server.errors import error_info
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc


@dataclass
class SlowTool:
    """A real tool that streams a chunk every few ms until ``steps`` or its cancel event."""

    name: str = "slow"
    steps: int = 40
    honour_cancel: bool = True
    log: list[str] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(
        self, args: Mapping[str, Any], ctx: ExecContext
    ) -> AsyncIterator[Chunk | ToolResult]:
        self.started.set()
        try:
            for i in range(self.steps):
                if self.honour_cancel and ctx.cancel.is_set():
                    self.log.append("stopped")
                    yield ToolResult(status=Status.CANCELLED, content=f"stopped at {i}")
                    return
                yield Chunk(f"tick {i}\n", stderr=i % 2 == 1)
                await asyncio.sleep(0.02)
            self.log.append("finished")
            yield ToolResult(status=Status.OK, content="all done")
        except asyncio.CancelledError:
            self.log.append("killed")
            raise
        finally:
            self.done.set()


@dataclass
class RaisingTool:
    """A real tool that fails: with a domain error, or with a bug."""

    name: str
    error: Exception

    async def run(
        self, args: Mapping[str, Any], ctx: ExecContext
    ) -> AsyncIterator[Chunk | ToolResult]:
        yield Chunk("before the failure\n")
        raise self.error


@dataclass
class ImmediateTool:
    """A tool that can answer on the event loop (``run_now``): with a result, by raising,
    or by declining (None) so that ``run`` runs."""

    name: str
    now: ToolResult | Exception | None

    def run_now(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult | None:
        if isinstance(self.now, Exception):
            raise self.now
        return self.now

    async def run(
        self, args: Mapping[str, Any], ctx: ExecContext
    ) -> AsyncIterator[Chunk | ToolResult]:
        yield Chunk("through run\n")
        yield ToolResult(status=Status.OK, content="from run")


@dataclass
class Server:
    stub: x_grpc.ExecutorServiceStub
    servicer: ExecutorServicer
    channel: grpc.aio.Channel


async def _serve(settings: ExecutorSettings, tools: dict[str, Tool]) -> AsyncIterator[Server]:
    servicer = ExecutorServicer(build_core(settings, build_sandbox(settings), tools=tools))
    servicer.core.timeout_backstop_s = 0.0
    real_inspector = servicer.core.inspector

    def inspector(tool: str, args: Mapping[str, Any]) -> Inspection:
        # The test-only tool has no executor rules; every real tool goes to inspect_call.
        if tool in ("slow", "refusing", "buggy") or tool.startswith("now_"):
            return Inspection(tool, (), True, True, "low", "A test tool.")
        return real_inspector(tool, args)

    servicer.core.inspector = inspector
    running = await create_server(
        "executor",
        settings,
        [Registration(x_grpc.add_ExecutorServiceServicer_to_server, servicer, SERVICE_NAME)],
    )
    channel = grpc.aio.insecure_channel(running.address)
    try:
        yield Server(x_grpc.ExecutorServiceStub(channel), servicer, channel)
    finally:
        await channel.close()
        await servicer.core.drain()
        await stop_server(running)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "hello.txt").write_text("hello\nworld\n")
    (tmp_path / "outside.txt").write_text("secret")
    return root


@pytest.fixture
def slow() -> SlowTool:
    return SlowTool()


@pytest.fixture
async def server(ws: Path, slow: SlowTool) -> AsyncIterator[Server]:
    settings = ExecutorSettings(
        listen="127.0.0.1:0", workspace=ws, library_dir=ws.parent / "lib", allow_ungranted=True
    )
    (ws.parent / "lib").mkdir()
    tools: dict[str, Tool] = {
        **file_tools(),
        "slow": slow,
        "refusing": RaisingTool("refusing", PathRefused("not here", path="/x")),
        "buggy": RaisingTool("buggy", RuntimeError("secret internals")),
        "now_ok": ImmediateTool("now_ok", ToolResult(status=Status.OK, content="right away")),
        "now_refusing": ImmediateTool("now_refusing", PathRefused("not here", path="/x")),
        "now_buggy": ImmediateTool("now_buggy", RuntimeError("secret internals")),
        "now_declines": ImmediateTool("now_declines", None),
    }
    async for s in _serve(settings, tools):
        yield s


def call(
    tool: str, args: dict[str, Any], call_id: str = "c1", session: str = "s1"
) -> c_pb2.ToolCall:
    st = struct_pb2.Struct()
    st.update(args)
    return c_pb2.ToolCall(call_id=call_id, tool_name=tool, arguments=st, session_id=session)


async def execute(
    stub: x_grpc.ExecutorServiceStub, request: x_pb2.ExecuteRequest
) -> tuple[list[x_pb2.OutputChunk], x_pb2.ExecuteResult]:
    chunks: list[x_pb2.OutputChunk] = []
    async for msg in stub.Execute(request):
        if msg.HasField("chunk"):
            chunks.append(msg.chunk)
        else:
            return chunks, msg.result
    raise AssertionError("no result")


# --- Inspect -----------------------------------------------------------------------------


async def test_inspect_read_inside(server: Server, ws: Path) -> None:
    resp = await server.stub.Inspect(
        x_pb2.InspectRequest(call=call("read_file", {"file_path": "hello.txt"}))
    )
    ins = resp.inspection
    assert list(ins.tool_rules) == []
    assert ins.read_only and ins.inside_working_dir
    assert ins.explanation.risk == c_pb2.RISK_LEVEL_LOW
    assert str(ws / "hello.txt") in ins.explanation.summary


async def test_inspect_read_outside_is_immune_deny(server: Server, ws: Path) -> None:
    resp = await server.stub.Inspect(
        x_pb2.InspectRequest(call=call("read_file", {"file_path": str(ws.parent / "outside.txt")}))
    )
    [rule] = resp.inspection.tool_rules
    assert rule.effect == c_pb2.RULE_EFFECT_DENY and rule.bypass_immune
    assert rule.source == c_pb2.RULE_SOURCE_TOOL and "outside" in rule.reason
    assert resp.inspection.explanation.risk == c_pb2.RISK_LEVEL_HIGH


async def test_inspect_write_is_settleable_ask(server: Server) -> None:
    resp = await server.stub.Inspect(
        x_pb2.InspectRequest(call=call("file_write", {"file_path": "n.txt", "content": "abc"}))
    )
    [rule] = resp.inspection.tool_rules
    assert rule.effect == c_pb2.RULE_EFFECT_ASK and not rule.bypass_immune
    assert not resp.inspection.read_only and resp.inspection.inside_working_dir
    assert resp.inspection.explanation.risk == c_pb2.RISK_LEVEL_MEDIUM


async def test_inspect_unknown_tool_and_missing_fields(server: Server) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await server.stub.Inspect(x_pb2.InspectRequest(call=call("format_disk", {})))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    detail = error_info(info.value)
    assert detail is not None and detail.reason == "UNKNOWN_TOOL"
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await server.stub.Inspect(x_pb2.InspectRequest(call=c_pb2.ToolCall(tool_name="read_file")))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await server.stub.Inspect(x_pb2.InspectRequest(call=call("read_file", {})))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- Execute -----------------------------------------------------------------------------


async def test_execute_read_file(server: Server) -> None:
    chunks, result = await execute(
        server.stub, x_pb2.ExecuteRequest(call=call("read_file", {"file_path": "hello.txt"}))
    )
    assert chunks == []
    assert result.status == x_pb2.EXECUTION_STATUS_OK
    assert result.content == "     1\thello\n     2\tworld"
    assert {layer.name for layer in result.layers} >= {"path_sandbox", "grant_verification"}
    assert result.elapsed.ToNanoseconds() > 0


async def test_execute_rechecks_and_refuses(server: Server, ws: Path) -> None:
    _, result = await execute(
        server.stub,
        x_pb2.ExecuteRequest(
            call=call("file_write", {"file_path": ".git/hooks/pre-commit", "content": "x"})
        ),
    )
    assert result.status == x_pb2.EXECUTION_STATUS_REFUSED and ".git/hooks" in result.error
    assert not (ws / ".git").exists()
    _, result = await execute(
        server.stub,
        x_pb2.ExecuteRequest(call=call("read_file", {"file_path": "../outside.txt"}, call_id="c2")),
    )
    assert result.status == x_pb2.EXECUTION_STATUS_REFUSED and "secret" not in result.content


async def test_execute_write_read_edit_cycle(server: Server, ws: Path) -> None:
    _, r = await execute(
        server.stub,
        x_pb2.ExecuteRequest(
            call=call(
                "file_edit",
                {"file_path": "hello.txt", "old_string": "world", "new_string": "there"},
                "e1",
            )
        ),
    )
    assert r.status == x_pb2.EXECUTION_STATUS_ERROR and "not been read" in r.error
    await execute(
        server.stub, x_pb2.ExecuteRequest(call=call("read_file", {"file_path": "hello.txt"}, "r1"))
    )
    _, r = await execute(
        server.stub,
        x_pb2.ExecuteRequest(
            call=call(
                "file_edit",
                {"file_path": "hello.txt", "old_string": "world", "new_string": "there"},
                "e2",
            )
        ),
    )
    assert r.status == x_pb2.EXECUTION_STATUS_OK
    assert (ws / "hello.txt").read_text() == "hello\nthere\n"


async def test_execute_streams_chunks_then_result(server: Server) -> None:
    chunks, result = await execute(server.stub, x_pb2.ExecuteRequest(call=call("slow", {})))
    assert len(chunks) == 40 and chunks[0].data == "tick 0\n"
    assert chunks[1].stream == x_pb2.OUTPUT_STREAM_STDERR
    assert result.status == x_pb2.EXECUTION_STATUS_OK and result.content == "all done"


async def test_execute_time_limit(server: Server, slow: SlowTool) -> None:
    slow.honour_cancel = False
    request = x_pb2.ExecuteRequest(
        call=call("slow", {}), timeout=duration_pb2.Duration(nanos=100_000_000)
    )
    chunks, result = await execute(server.stub, request)
    assert result.status == x_pb2.EXECUTION_STATUS_TIMEOUT
    assert 0 < len(chunks) < 40
    await asyncio.wait_for(slow.done.wait(), 10)
    assert slow.log == ["killed"]


async def test_client_cancel_kills_cancel_tool(server: Server, slow: SlowTool) -> None:
    request = x_pb2.ExecuteRequest(
        call=call("slow", {}), interrupt_behavior=c_pb2.INTERRUPT_BEHAVIOR_CANCEL
    )
    stream = server.stub.Execute(request)
    first = await stream.read()
    assert first.chunk.data == "tick 0\n"
    stream.cancel()
    await asyncio.wait_for(slow.done.wait(), 10)
    assert slow.log and slow.log[0] in ("stopped", "killed")
    assert "finished" not in slow.log


async def test_client_cancel_lets_block_tool_finish(server: Server, slow: SlowTool) -> None:
    request = x_pb2.ExecuteRequest(
        call=call("slow", {}), interrupt_behavior=c_pb2.INTERRUPT_BEHAVIOR_BLOCK
    )
    stream = server.stub.Execute(request)
    await stream.read()
    stream.cancel()
    await asyncio.wait_for(slow.done.wait(), 10)
    assert slow.log == ["finished"]


async def test_unspecified_interrupt_is_block(server: Server, slow: SlowTool) -> None:
    stream = server.stub.Execute(x_pb2.ExecuteRequest(call=call("slow", {})))
    await stream.read()
    stream.cancel()
    await asyncio.wait_for(slow.done.wait(), 10)
    assert slow.log == ["finished"]


async def test_cancel_rpc_stops_cancel_tool(server: Server, slow: SlowTool) -> None:
    request = x_pb2.ExecuteRequest(
        call=call("slow", {}, call_id="k1"), interrupt_behavior=c_pb2.INTERRUPT_BEHAVIOR_CANCEL
    )
    task = asyncio.create_task(execute(server.stub, request))
    await asyncio.wait_for(slow.started.wait(), 10)
    found = await server.stub.Cancel(x_pb2.CancelRequest(session_id="s1", call_id="k1"))
    assert found.found
    _, result = await task
    assert result.status == x_pb2.EXECUTION_STATUS_CANCELLED
    assert slow.log == ["stopped"]
    missing = await server.stub.Cancel(x_pb2.CancelRequest(session_id="s1", call_id="nope"))
    assert not missing.found


async def test_cancel_rpc_leaves_block_tool_running(server: Server, slow: SlowTool) -> None:
    request = x_pb2.ExecuteRequest(
        call=call("slow", {}, call_id="b1"), interrupt_behavior=c_pb2.INTERRUPT_BEHAVIOR_BLOCK
    )
    task = asyncio.create_task(execute(server.stub, request))
    await asyncio.wait_for(slow.started.wait(), 10)
    assert (await server.stub.Cancel(x_pb2.CancelRequest(session_id="s1", call_id="b1"))).found
    _, result = await task
    assert result.status == x_pb2.EXECUTION_STATUS_OK and slow.log == ["finished"]


async def test_same_call_id_twice_is_refused(server: Server, slow: SlowTool) -> None:
    request = x_pb2.ExecuteRequest(call=call("slow", {}, call_id="dup"))
    task = asyncio.create_task(execute(server.stub, request))
    await asyncio.wait_for(slow.started.wait(), 10)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await execute(server.stub, request)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    _, result = await task
    assert result.status == x_pb2.EXECUTION_STATUS_OK


async def test_capabilities(server: Server, ws: Path) -> None:
    caps = await server.stub.GetCapabilities(x_pb2.GetCapabilitiesRequest())
    assert set(caps.tools) >= {"read_file", "file_write", "file_edit", "glob_files", "grep_files"}
    assert (str(ws), True) in {(r.path, r.writable) for r in caps.roots}
    layers = {layer.name: layer for layer in caps.layers}
    assert layers["path_sandbox"].active
    assert (
        not layers["grant_verification"].active
        and "without a grant" in layers["grant_verification"].detail
    )
    assert not caps.network_enabled


# --- grants (DEC-12) -----------------------------------------------------------------------


async def test_grants_required_when_key_configured(ws: Path, tmp_path: Path) -> None:
    priv, pub = generate_keypair(tmp_path / "keys")
    signer = GrantSigner(load_private_key(priv))
    settings = ExecutorSettings(listen="127.0.0.1:0", workspace=ws, grant_public_key_file=pub)
    async for s in _serve(settings, file_tools()):
        caps = await s.stub.GetCapabilities(x_pb2.GetCapabilitiesRequest())
        assert {layer.name: layer.active for layer in caps.layers}["grant_verification"]
        the_call = call("read_file", {"file_path": "hello.txt"}, call_id="g1")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await execute(s.stub, x_pb2.ExecuteRequest(call=the_call))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        detail = error_info(info.value)
        assert detail is not None and detail.reason == "GRANT_MISSING"
        args = json_format.MessageToDict(the_call.arguments)
        g = signer.sign(session_id="s1", call_id="g1", tool_name="read_file", arguments=args)
        grant = d_pb2.Grant(payload=g.payload, signature=g.signature, key_id=g.key_id)
        _, result = await execute(s.stub, x_pb2.ExecuteRequest(call=the_call, grant=grant))
        assert result.status == x_pb2.EXECUTION_STATUS_OK
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await execute(s.stub, x_pb2.ExecuteRequest(call=the_call, grant=grant))
        detail = error_info(info.value)
        assert detail is not None and detail.reason == "GRANT_REPLAYED"
        other = call("read_file", {"file_path": "../outside.txt"}, call_id="g1")
        g2 = signer.sign(session_id="s1", call_id="g1", tool_name="read_file", arguments=args)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await execute(
                s.stub,
                x_pb2.ExecuteRequest(
                    call=other, grant=d_pb2.Grant(payload=g2.payload, signature=g2.signature)
                ),
            )
        detail = error_info(info.value)
        assert detail is not None and detail.reason == "GRANT_MISMATCH"


async def test_tool_failures_are_reported_not_leaked(server: Server) -> None:
    chunks, result = await execute(server.stub, x_pb2.ExecuteRequest(call=call("refusing", {})))
    assert [c.data for c in chunks] == ["before the failure\n"]
    assert result.status == x_pb2.EXECUTION_STATUS_REFUSED and result.error == "not here"
    _, result = await execute(server.stub, x_pb2.ExecuteRequest(call=call("buggy", {}, "c2")))
    assert result.status == x_pb2.EXECUTION_STATUS_ERROR
    assert "secret internals" not in result.error and "internal error" in result.error


async def test_calls_answered_on_the_loop_map_failures_alike(server: Server) -> None:
    chunks, result = await execute(server.stub, x_pb2.ExecuteRequest(call=call("now_ok", {})))
    assert chunks == [] and result.status == x_pb2.EXECUTION_STATUS_OK
    assert result.content == "right away"
    req = x_pb2.ExecuteRequest(call=call("now_refusing", {}, "c2"))
    _, result = await execute(server.stub, req)
    assert result.status == x_pb2.EXECUTION_STATUS_REFUSED and result.error == "not here"
    _, result = await execute(server.stub, x_pb2.ExecuteRequest(call=call("now_buggy", {}, "c3")))
    assert result.status == x_pb2.EXECUTION_STATUS_ERROR
    assert "secret internals" not in result.error and "internal error" in result.error
    req = x_pb2.ExecuteRequest(call=call("now_declines", {}, "c4"))
    chunks, result = await execute(server.stub, req)
    assert [c.data for c in chunks] == ["through run\n"] and result.content == "from run"
    assert server.servicer.core.running() == []


async def test_settings_globs_bind_the_file_tools(ws: Path) -> None:
    (ws / ".env").write_text("TOKEN=1\n")
    settings = ExecutorSettings(
        listen="127.0.0.1:0",
        workspace=ws,
        denied_read_globs=["**/.env"],
        protected_write_globs=["*.lock"],
        allow_ungranted=True,
    )
    async for s in _serve(settings, file_tools()):
        _, r = await execute(
            s.stub, x_pb2.ExecuteRequest(call=call("read_file", {"file_path": ".env"}))
        )
        assert r.status == x_pb2.EXECUTION_STATUS_REFUSED and "TOKEN" not in r.content
        ins = await s.stub.Inspect(
            x_pb2.InspectRequest(call=call("read_file", {"file_path": ".env"}))
        )
        assert ins.inspection.tool_rules[0].effect == c_pb2.RULE_EFFECT_DENY
        _, r = await execute(
            s.stub,
            x_pb2.ExecuteRequest(
                call=call("file_write", {"file_path": "poetry.lock", "content": "x"}, "w1")
            ),
        )
        assert r.status == x_pb2.EXECUTION_STATUS_REFUSED and not (ws / "poetry.lock").exists()
        _, r = await execute(
            s.stub,
            x_pb2.ExecuteRequest(
                call=call("file_write", {"file_path": ".bashrc", "content": "x"}, "w2")
            ),
        )
        assert r.status == x_pb2.EXECUTION_STATUS_OK  # the configured list replaced the default


async def test_without_a_grant_key_every_execute_is_refused(ws: Path) -> None:
    """Fail closed: an executor that cannot verify grants runs nothing (DEC-12)."""
    settings = ExecutorSettings(listen="127.0.0.1:0", workspace=ws)
    async for s in _serve(settings, file_tools()):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await execute(
                s.stub, x_pb2.ExecuteRequest(call=call("read_file", {"file_path": "hello.txt"}))
            )
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "no grant public key" in (info.value.details() or "")


async def test_capabilities_say_an_executor_without_a_key_refuses_everything(ws: Path) -> None:
    settings = ExecutorSettings(listen="127.0.0.1:0", workspace=ws)
    async for s in _serve(settings, file_tools()):
        caps = await s.stub.GetCapabilities(x_pb2.GetCapabilitiesRequest())
        grant = {layer.name: layer for layer in caps.layers}["grant_verification"]
        assert grant.active and "every Execute is refused" in grant.detail
