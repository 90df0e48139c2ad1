"""The agent's side of a reliable audit trail (issue #12): a call nested too deeply fails
alone; an Execute the agent stopped waiting for is recorded as UNKNOWN, not FAIL; a call's
result is released only once its audit event is durable; calls are refused while the
trail cannot be written."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from stockade.agent.convert import event_to_pb
from stockade.llm.base import MAX_ARGUMENT_DEPTH, ModelToolCall, ModelTurn
from stockade.v1 import audit_service_pb2 as audit_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.unit.agent.conftest import FakeExecutor, Harness, ListProvider, finished, run


def _turn(*calls: ModelToolCall) -> ModelTurn:
    return ModelTurn(tool_calls=calls, prompt_tokens=10, completion_tokens=5)


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": [value]} if len(str(depth)) % 2 else {"a": value}
    return value


async def test_deeply_nested_arguments_fail_that_call_only(harness: Harness) -> None:
    for depth in (MAX_ARGUMENT_DEPTH + 1, 5_000):
        harness.sink.events.clear()
        harness.executor.executed.clear()
        provider = ListProvider(
            [
                _turn(
                    ModelToolCall("deep", "read_file", {"file_path": "a", "x": _nested(depth)}),
                    ModelToolCall("flat", "read_file", {"file_path": "b.txt"}),
                )
            ]
        )
        events = await run(harness.core(provider))
        done = finished(events)
        assert done["deep"].content.startswith("Error: read_file: the arguments are nested")
        assert done["deep"].status == x_pb2.EXECUTION_STATUS_ERROR
        assert done["flat"].status == x_pb2.EXECUTION_STATUS_OK
        assert events[-1].terminated.reason == 1  # COMPLETED, not ERROR
        assert [r.call.call_id for r in harness.executor.executed] == ["flat"]
        statuses = {e.call_id: e.status for e in harness.sink.events if e.call_id}
        assert statuses == {"deep": audit_pb2.AUDIT_STATUS_FAIL, "flat": audit_pb2.AUDIT_STATUS_OK}


async def test_arguments_at_the_depth_limit_still_run(harness: Harness) -> None:
    provider = ListProvider(
        [_turn(ModelToolCall("ok", "read_file", {"file_path": "a", "x": _nested(10)}))]
    )
    events = await run(harness.core(provider))
    assert finished(events)["ok"].status == x_pb2.EXECUTION_STATUS_OK


async def test_an_execute_the_agent_gave_up_on_is_recorded_as_outcome_unknown(
    harness: Harness,
) -> None:
    release = asyncio.Event()

    async def hang(call: c_pb2.ToolCall, executor: FakeExecutor) -> x_pb2.ExecuteResult:
        await release.wait()
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content="late")

    harness.executor.behaviours["read_file"] = hang
    provider = ListProvider([_turn(ModelToolCall("slow", "read_file", {"file_path": "a"}))])
    try:
        events = await run(harness.core(provider, tool_timeout_s=0.3))
    finally:
        release.set()
    done = finished(events)["slow"]
    assert "outcome unknown" in done.content and "DEADLINE_EXCEEDED" in done.content
    (row,) = [e for e in harness.sink.events if e.call_id == "slow"]
    assert row.status == audit_pb2.AUDIT_STATUS_UNKNOWN
    assert "outcome unknown" in row.output_preview


@dataclass
class DurableSink:
    """A sink whose events become durable only when the test says so."""

    events: list[audit_pb2.AuditEvent] = field(default_factory=list)
    durable: asyncio.Event = field(default_factory=asyncio.Event)
    blocked: str = ""

    def enqueue(self, event: audit_pb2.AuditEvent) -> None:
        self.events.append(event)

    async def wait_durable(self) -> None:
        await self.durable.wait()

    def blocked_reason(self) -> str:
        return self.blocked


async def test_a_result_is_released_only_once_its_audit_event_is_durable(
    harness: Harness,
) -> None:
    sink = DurableSink()
    provider = ListProvider([_turn(ModelToolCall("c1", "read_file", {"file_path": "a"}))])
    core = harness.core(provider, audit=sink)
    seen: list[str] = []

    async def consume() -> None:
        async for event in core.run_turn("s1", "go"):
            seen.append(str(event_to_pb(event).WhichOneof("event")))

    task = asyncio.create_task(consume())
    deadline = asyncio.get_running_loop().time() + 30
    while not any(e.call_id == "c1" for e in sink.events):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the turn is held at the durability wait, not racing it
    assert "tool_call_started" in seen and "tool_call_finished" not in seen
    sink.durable.set()
    await asyncio.wait_for(task, 30)
    assert "tool_call_finished" in seen


async def test_calls_are_refused_while_the_trail_cannot_be_written(harness: Harness) -> None:
    sink = DurableSink(blocked="the audit trail cannot be written (disk full)")
    sink.durable.set()
    provider = ListProvider([_turn(ModelToolCall("c1", "read_file", {"file_path": "a"}))])
    events = await run(harness.core(provider, audit=sink))
    done = finished(events)["c1"]
    assert done.verdict == c_pb2.VERDICT_DENY
    assert harness.executor.executed == []
    (row,) = [e for e in sink.events if e.call_id == "c1"]
    assert row.status == audit_pb2.AUDIT_STATUS_DENIED


def test_audit_arguments_cut_big_and_deep_values() -> None:
    from stockade.agent.builtin_hooks import audit_arguments

    big = audit_arguments({"content": "a" * 100_000})
    assert big.ByteSize() < 70_000 and big["$stockade_cut"]["bytes"] > 100_000
    deep = audit_arguments(_nested(3_000))
    assert "nested deeper" in deep["$stockade_cut"]["reason"]
    # A value too deep for a Struct on the wire (past MAX_STRUCT_DEPTH) is cut too, so the
    # event always decodes at the audit service.
    too_deep = audit_arguments(_nested(40))
    assert "nested deeper" in too_deep["$stockade_cut"]["reason"]
    event = audit_pb2.AuditEvent(arguments=too_deep)
    assert audit_pb2.AuditEvent.FromString(event.SerializeToString()) == event
    assert dict(audit_arguments({"b": 1, "a": "x"})) == {"a": "x", "b": 1}


def test_openai_tool_call_with_too_deep_arguments_fails_alone() -> None:
    from stockade.llm.openai import _tool_call

    deep = "[" * 100_000 + "]" * 100_000  # json.loads alone: RecursionError
    call = _tool_call(0, "c1", "read_file", '{"x":' + deep + "}")
    assert call.arguments == {} and "nested deeper" in call.invalid
    flat = _tool_call(1, "c2", "read_file", '{"file_path": "a [{ b"}')
    assert flat.arguments == {"file_path": "a [{ b"} and not flat.invalid


async def test_a_remote_tool_the_agent_gave_up_on_is_outcome_unknown() -> None:
    import grpc

    from stockade.agent.remote_tools import ToolProviderClient
    from stockade.v1 import tool_provider_pb2 as tp_pb2
    from stockade.v1 import tool_provider_pb2_grpc as tp_grpc

    release = asyncio.Event()

    class Hanging(tp_grpc.ToolProviderServicer):
        async def CallTool(
            self, request: tp_pb2.CallToolRequest, context: Any
        ) -> tp_pb2.CallToolResponse:
            await release.wait()
            return tp_pb2.CallToolResponse(content="late")

    server = grpc.aio.server()
    tp_grpc.add_ToolProviderServicer_to_server(Hanging(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        client = ToolProviderClient(f"127.0.0.1:{port}")
        result = await client.call_tool(
            session_id="s1", call_id="c1", tool_name="slow", arguments={}, timeout=0.3
        )
        assert result.is_error and result.outcome_unknown
        assert "outcome unknown" in result.content
    finally:
        release.set()
        await server.stop(None)
