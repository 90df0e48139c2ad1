"""The ReAct loop and execution pipeline over real gRPC against scriptable services."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stockade.agent.convert import event_to_pb
from stockade.agent.hooks import (
    Block,
    Hook,
    MutateInput,
    PermissionRequired,
    PreAction,
    ToolCallContext,
)
from stockade.agent.limits import LimitSettings
from stockade.agent.registry import InterruptBehavior, Location, ToolSpec
from stockade.agent.tools import default_registry
from stockade.llm.base import ModelToolCall, ModelTurn
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2 as audit_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.unit.agent.conftest import Harness, ListProvider, finished, kinds, run


def call(call_id: str, name: str, **arguments: Any) -> ModelToolCall:
    return ModelToolCall(call_id, name, arguments)


def turn(*calls: ModelToolCall, text: str = "") -> ModelTurn:
    return ModelTurn(text=text, tool_calls=calls, prompt_tokens=10, completion_tokens=5)


def terminated(events: list[a_pb2.RunTurnResponse]) -> a_pb2.TerminatedEvent:
    assert events[-1].WhichOneof("event") == "terminated"
    return events[-1].terminated


async def test_allowed_call_runs_and_is_audited(harness: Harness) -> None:
    provider = ListProvider([turn(call("c1", "read_file", file_path="a.txt"), text="reading")])
    events = await run(harness.core(provider))
    assert kinds(events) == [
        "text",
        "tool_call_started",
        "tool_call_finished",
        "step_complete",
        "text",
        "final_answer",
        "terminated",
    ]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    done = finished(events)["c1"]
    assert done.status == x_pb2.EXECUTION_STATUS_OK and done.verdict == c_pb2.VERDICT_ALLOW
    assert "a.txt" in done.content and done.winning_rule.pattern == "read_file(*)"
    (request,) = harness.executor.executed
    assert request.grant.payload == b"grant:c1"
    assert request.interrupt_behavior == c_pb2.INTERRUPT_BEHAVIOR_CANCEL
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_COMPLETED
    row, stop = harness.sink.events
    assert (row.tool_name, row.status, row.winning_rule.pattern) == (
        "read_file",
        audit_pb2.AUDIT_STATUS_OK,
        "read_file(*)",
    )
    assert row.verdict == c_pb2.VERDICT_ALLOW and row.policy_version == "v-test"
    assert stop.status == audit_pb2.AUDIT_STATUS_SESSION_STOP
    assert stop.termination == a_pb2.TERMINATION_REASON_COMPLETED
    # The model saw the tool result after its own call.
    messages, _ = provider.requests[1]
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool"]


async def test_read_only_calls_run_in_parallel_and_writes_serially(harness: Harness) -> None:
    async def slow(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        # Wait (bounded) for a sibling to be in flight too: serial execution never sees 2.
        for _ in range(100):
            if ex.in_flight >= 2:
                break
            await asyncio.sleep(0.01)
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content=tool_call.call_id)

    harness.executor.behaviours = {"read_file": slow, "file_write": slow}
    provider = ListProvider(
        [
            turn(
                call("r1", "read_file", file_path="a"),
                call("r2", "read_file", file_path="b"),
                call("w1", "file_write", file_path="c", content="x"),
                call("w2", "file_write", file_path="d", content="y"),
            )
        ]
    )
    events = await run(harness.core(provider))
    assert harness.executor.max_in_flight == 2
    assert harness.executor.finished[2:] == ["w1", "w2"]
    calls = [
        (e.WhichOneof("event"), e.tool_call_started.call.call_id or e.tool_call_finished.call_id)
        for e in events[:8]
    ]
    # The parallel batch starts together; each serial write starts after the previous ended.
    assert calls == [
        ("tool_call_started", "r1"),
        ("tool_call_started", "r2"),
        ("tool_call_finished", "r1"),
        ("tool_call_finished", "r2"),
        ("tool_call_started", "w1"),
        ("tool_call_finished", "w1"),
        ("tool_call_started", "w2"),
        ("tool_call_finished", "w2"),
    ]
    tool_messages = [m for m in provider.requests[1][0] if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["r1", "r2", "w1", "w2"]


async def test_policy_denial_never_reaches_the_executor(harness: Harness) -> None:
    harness.decision.verdicts["run_bash"] = c_pb2.VERDICT_DENY
    provider = ListProvider([turn(call("c1", "run_bash", command="rm -rf /"))])
    events = await run(harness.core(provider))
    done = finished(events)["c1"]
    assert done.verdict == c_pb2.VERDICT_DENY and done.status == x_pb2.EXECUTION_STATUS_REFUSED
    assert done.content.startswith("Denied:") and done.winning_rule.pattern == "run_bash(*)"
    assert harness.executor.executed == []
    assert harness.sink.events[0].status == audit_pb2.AUDIT_STATUS_DENIED


async def test_ask_is_surfaced_and_resolved_through_the_agent(harness: Harness) -> None:
    harness.decision.verdicts["file_write"] = c_pb2.VERDICT_ASK
    harness.decision.always_allow_applies.add("file_write")
    provider = ListProvider([turn(call("c1", "file_write", file_path="n.md", content="hi"))])
    core = harness.core(provider)
    stream = core.run_turn("s1", "write")
    events: list[a_pb2.RunTurnResponse] = []
    async for item in stream:
        event = event_to_pb(item)
        events.append(event)
        if event.WhichOneof("event") == "permission_requested":
            requested = event.permission_requested
            assert requested.approval_id == "ap-c1" and requested.call.tool_name == "file_write"
            assert requested.explanation.summary == "does things"
            assert requested.always_allow_applies  # the decision's word, passed on
            answer = await core.resolve_approval(
                d_pb2.ResolveApprovalRequest(
                    approval_id="ap-c1", resolution=d_pb2.RESOLUTION_ALLOW_ONCE, resolver="bot"
                ),
                authorization="Bearer admin",
            )
            assert answer.approval.state == d_pb2.APPROVAL_STATE_ALLOWED
    assert kinds(events)[1:4] == [
        "permission_requested",
        "permission_resolved",
        "tool_call_finished",
    ]
    assert events[2].permission_resolved.verdict == c_pb2.VERDICT_ALLOW
    assert finished(events)["c1"].status == x_pb2.EXECUTION_STATUS_OK
    assert harness.executor.executed[0].grant.payload == b"grant:approved"


async def test_approval_timeout_is_a_denial(harness: Harness) -> None:
    harness.decision.verdicts["file_write"] = c_pb2.VERDICT_ASK
    provider = ListProvider([turn(call("c1", "file_write", file_path="n.md", content="hi"))])
    task = asyncio.ensure_future(run(harness.core(provider)))
    await asyncio.wait_for(harness.decision.approval_created.wait(), 10)
    harness.decision.approvals["ap-c1"].set_result(c_pb2.VERDICT_DENY)  # the service's timeout
    events = await task
    assert events[2].permission_resolved.verdict == c_pb2.VERDICT_DENY
    done = finished(events)["c1"]
    assert done.verdict == c_pb2.VERDICT_DENY and "timed out" in done.content
    assert harness.executor.executed == []


async def test_decision_service_unreachable_fails_closed(harness: Harness) -> None:
    provider = ListProvider([turn(call("c1", "read_file", file_path="a"))])
    events = await run(harness.core(provider, decision_address="127.0.0.1:1"))
    done = finished(events)["c1"]
    assert done.verdict == c_pb2.VERDICT_DENY and "fail closed" in done.content
    assert "UNAVAILABLE" in done.reason
    assert harness.executor.executed == []


async def test_late_decision_fails_closed(harness: Harness) -> None:
    harness.decision.delay_s = 1.0
    provider = ListProvider([turn(call("c1", "read_file", file_path="a"))])
    events = await run(harness.core(provider, decide_deadline_s=0.2))
    assert "DEADLINE_EXCEEDED" in finished(events)["c1"].reason
    assert harness.executor.executed == []


async def test_failed_inspect_fails_closed(harness: Harness) -> None:
    harness.executor.inspect_fails = True
    provider = ListProvider([turn(call("c1", "read_file", file_path="a"))])
    events = await run(harness.core(provider))
    assert "could not inspect" in finished(events)["c1"].content
    assert harness.decision.requests == [] and harness.executor.executed == []


async def test_invalid_and_unknown_calls_are_errors_without_a_decision(harness: Harness) -> None:
    provider = ListProvider(
        [turn(call("c1", "read_file", path="a"), call("c2", "launch_rockets", n=1))]
    )
    events = await run(harness.core(provider))
    done = finished(events)
    assert "missing required field 'file_path'" in done["c1"].content
    assert "unknown tool 'launch_rockets'" in done["c2"].content
    assert done["c1"].status == x_pb2.EXECUTION_STATUS_ERROR
    assert harness.decision.requests == []


async def test_max_steps_then_one_forced_answer(harness: Harness) -> None:
    provider = ListProvider(
        [turn(call(f"c{i}", "read_file", file_path=f"f{i}")) for i in range(10)]
    )
    events = await run(harness.core(provider, limits=LimitSettings(max_steps=3)))
    assert len(harness.executor.executed) == 3
    assert kinds(events)[-2:] == ["final_answer", "terminated"]
    assert events[-2].final_answer.text == "forced final answer"
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_MAX_STEPS
    last_messages, allow_tools = provider.requests[-1]
    assert allow_tools is False and "maximum number of steps" in last_messages[-1].content
    assert harness.sink.events[-1].termination == a_pb2.TERMINATION_REASON_MAX_STEPS


async def test_third_identical_call_is_refused(harness: Harness) -> None:
    same = [turn(call(f"c{i}", "read_file", file_path="same")) for i in range(3)]
    events = await run(harness.core(ListProvider(same)))
    assert len(harness.executor.executed) == 2
    assert "identical arguments" in finished(events)["c2"].content


async def test_diminishing_returns_end_the_turn(harness: Harness) -> None:
    async def constant(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content="nothing new")

    harness.executor.behaviours["grep_files"] = constant
    provider = ListProvider([turn(call(f"c{i}", "grep_files", pattern=f"p{i}")) for i in range(8)])
    events = await run(harness.core(provider, limits=LimitSettings(diminishing_steps=2)))
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_DIMINISHING_RETURNS
    assert len(harness.executor.executed) == 3  # one new result, then two stale steps
    assert "no new information" in provider.requests[-1][0][-1].content


async def test_soft_limit_nudges_and_hard_limit_compacts(harness: Harness) -> None:
    async def big(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        return x_pb2.ExecuteResult(
            status=x_pb2.EXECUTION_STATUS_OK, content=tool_call.call_id + " " + "x" * 2000
        )

    harness.executor.behaviours["read_file"] = big
    provider = ListProvider(
        [turn(call(f"c{i}", "read_file", file_path=f"f{i}")) for i in range(6)],
        summary="files f0.. were read",
    )
    limits = LimitSettings(token_soft_limit=900, token_hard_limit=1500, diminishing_steps=99)
    events = await run(harness.core(provider, limits=limits))
    assert "compaction" in kinds(events)
    assert any(
        "Conclude soon" in m.content for m, _ in [(r[0][-1], r[1]) for r in provider.requests]
    )
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_COMPLETED


async def test_failing_compaction_opens_the_breaker(harness: Harness) -> None:
    async def big(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        content = tool_call.call_id + " " + "y" * 3000
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content=content)

    harness.executor.behaviours["read_file"] = big
    provider = ListProvider(
        [turn(call(f"c{i}", "read_file", file_path=f"f{i}")) for i in range(6)], summary=None
    )
    limits = LimitSettings(token_soft_limit=1000, token_hard_limit=2000, diminishing_steps=99)
    events = await run(harness.core(provider, limits=limits))
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_COMPACTION_FAILED
    assert "3 times" in terminated(events).detail
    summaries = [r for r in provider.requests if r[0][0].content.startswith("Summarise")]
    assert len(summaries) == limits.compaction_max_failures  # then the breaker stops trying
    assert harness.sink.events[-1].termination == a_pb2.TERMINATION_REASON_COMPACTION_FAILED


async def test_nothing_to_compact_is_a_compaction_failure(harness: Harness) -> None:
    async def big(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content="y" * 3000)

    harness.executor.behaviours["read_file"] = big
    provider = ListProvider([turn(call("c1", "read_file", file_path="a"))], summary="s")
    limits = LimitSettings(token_soft_limit=100, token_hard_limit=200)
    events = await run(harness.core(provider, limits=limits))
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_COMPACTION_FAILED


async def test_denial_halt_ends_the_turn(harness: Harness) -> None:
    harness.decision.verdicts["run_bash"] = c_pb2.VERDICT_DENY
    harness.decision.halt_after = 2
    provider = ListProvider([turn(call(f"c{i}", "run_bash", command=f"x{i}")) for i in range(5)])
    events = await run(harness.core(provider))
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_DENIAL_HALT
    assert "2 consecutive denials" in terminated(events).detail
    assert len(harness.decision.requests) == 2


async def test_cancel_stops_a_cancel_tool_at_once(harness: Harness) -> None:
    started = asyncio.Event()

    async def hang(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        started.set()
        await asyncio.sleep(30)
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content="late")

    harness.executor.behaviours["read_file"] = hang
    core = harness.core(ListProvider([turn(call("c1", "read_file", file_path="a"))]))
    task = asyncio.ensure_future(run(core))
    await asyncio.wait_for(started.wait(), 10)
    assert core.cancel("s1")
    events = await asyncio.wait_for(task, 10)
    assert finished(events)["c1"].status == x_pb2.EXECUTION_STATUS_CANCELLED
    assert harness.executor.cancelled == ["c1"]
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_CANCELLED
    assert harness.sink.events[0].status == audit_pb2.AUDIT_STATUS_CANCELLED
    assert not core.cancel("s1")  # no turn running any more


async def test_cancel_lets_a_block_tool_finish(harness: Harness) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_bash(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        started.set()
        await release.wait()
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content="committed")

    harness.executor.behaviours["run_bash"] = slow_bash
    provider = ListProvider(
        [
            turn(call("c1", "run_bash", command="git commit")),
            turn(call("c2", "read_file", file_path="a")),
        ]
    )
    core = harness.core(provider)
    task = asyncio.ensure_future(run(core))
    await asyncio.wait_for(started.wait(), 10)
    core.cancel("s1")
    await asyncio.sleep(0.05)
    assert not task.done()  # BLOCK: the turn waits for the command
    release.set()
    events = await asyncio.wait_for(task, 10)
    done = finished(events)
    assert done["c1"].status == x_pb2.EXECUTION_STATUS_OK and done["c1"].content == "committed"
    assert "c2" not in done and harness.executor.cancelled == []
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_CANCELLED


async def test_cancel_while_waiting_for_the_model(harness: Harness) -> None:
    provider = ListProvider([], block=asyncio.Event())
    core = harness.core(provider)
    task = asyncio.ensure_future(run(core))
    for _ in range(200):
        if provider.requests:
            break
        await asyncio.sleep(0.01)
    core.cancel("s1")
    events = await asyncio.wait_for(task, 10)
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_CANCELLED


async def test_sibling_abort_cancels_the_rest_of_the_batch(harness: Harness) -> None:
    async def fail(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        await asyncio.sleep(0.05)
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_ERROR, error="download failed")

    async def hang(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        await asyncio.sleep(30)
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content="late")

    registry = default_registry()
    for name, abort in (("fetch", True), ("slow_read", False)):
        registry.register(
            ToolSpec(
                name=name,
                description=name,
                interrupt_behavior=InterruptBehavior.CANCEL,
                concurrency_safe=True,
                causes_sibling_abort=abort,
                read_only=True,
                location=Location.EXECUTOR,
            )
        )
    harness.executor.behaviours = {"fetch": fail, "slow_read": hang}
    provider = ListProvider([turn(call("a", "fetch"), call("b", "slow_read"))])
    events = await asyncio.wait_for(run(harness.core(provider, registry=registry)), 10)
    done = finished(events)
    assert done["a"].status == x_pb2.EXECUTION_STATUS_ERROR
    assert done["b"].status == x_pb2.EXECUTION_STATUS_CANCELLED
    assert "sibling" in done["b"].content
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_COMPLETED


class Recorder(Hook):
    def __init__(self, action: PreAction) -> None:
        self.name = "recorder"
        self.action = action

    async def pre_tool_use(self, call: ToolCallContext) -> PreAction:
        return self.action


async def test_hooks_feed_the_decision_and_mutate_arguments(harness: Harness) -> None:
    provider = ListProvider([turn(call("c1", "read_file", file_path="a"))])
    hook = Recorder(MutateInput({"file_path": "b"}, "look at b instead"))
    events = await run(harness.core(provider, hooks=[hook]))
    assert harness.executor.executed[0].call.arguments["file_path"] == "b"
    assert "[hook context] look at b instead" in finished(events)["c1"].content

    block = ListProvider([turn(call("c2", "read_file", file_path="a"))])
    events = await run(harness.core(block, hooks=[Recorder(Block("not today"))]), session_id="s2")
    (signal,) = harness.decision.requests[-1].hook_signals
    assert signal.kind == d_pb2.HookSignal.KIND_BLOCK and signal.message == "not today"
    assert finished(events)["c2"].verdict == c_pb2.VERDICT_DENY

    ask = ListProvider([turn(call("c3", "read_file", file_path="a"))])
    task = asyncio.ensure_future(
        run(harness.core(ask, hooks=[Recorder(PermissionRequired("ops"))]), session_id="s3")
    )
    await asyncio.wait_for(harness.decision.approval_created.wait(), 10)
    (signal,) = harness.decision.requests[-1].hook_signals
    assert signal.kind == d_pb2.HookSignal.KIND_PERMISSION_REQUIRED and signal.message == "ops"
    harness.decision.approvals["ap-c3"].set_result(c_pb2.VERDICT_DENY)
    await task


async def test_secrets_are_redacted_before_the_model_and_the_log(harness: Harness) -> None:
    async def leak(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        return x_pb2.ExecuteResult(
            status=x_pb2.EXECUTION_STATUS_OK, content="aws=AKIAIOSFODNN7EXAMPLE"
        )

    harness.executor.behaviours["read_file"] = leak
    provider = ListProvider([turn(call("c1", "read_file", file_path=".aws/credentials"))])
    events = await run(harness.core(provider))
    assert "AKIA" not in finished(events)["c1"].content
    assert all("AKIAIOSFODNN7EXAMPLE" not in m.content for m in provider.requests[1][0])
    assert "AKIAIOSFODNN7EXAMPLE" not in harness.sink.events[0].output_preview


async def test_provider_error_ends_with_error(harness: Harness) -> None:
    class Broken:
        async def complete(self, *args: Any, **kw: Any) -> ModelTurn:
            from stockade.llm.base import ProviderError

            raise ProviderError("HTTP 500: boom")

    events = await run(harness.core(Broken()))
    assert kinds(events) == ["error", "terminated"]
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_ERROR
    assert "boom" in terminated(events).detail


async def test_a_second_concurrent_turn_is_refused(harness: Harness) -> None:
    from stockade.errors import FailedPrecondition

    provider = ListProvider([], block=asyncio.Event())
    core = harness.core(provider)
    first = asyncio.ensure_future(run(core))
    for _ in range(200):
        if provider.requests:
            break
        await asyncio.sleep(0.01)
    try:
        await run(core)
        raise AssertionError("second turn accepted")
    except FailedPrecondition as exc:
        assert "already running" in exc.message
    core.cancel("s1")
    await first


async def test_mode_creates_the_session(harness: Harness) -> None:
    provider = ListProvider([])
    await run(harness.core(provider), mode=c_pb2.PERMISSION_MODE_PLAN)
    assert harness.decision.sessions[0].mode == c_pb2.PERMISSION_MODE_PLAN


async def test_tree_token_budget_ends_the_turn(harness: Harness) -> None:
    provider = ListProvider([turn(call(f"c{i}", "read_file", file_path=f"f{i}")) for i in range(9)])
    events = await run(harness.core(provider, limits=LimitSettings(tree_max_tokens=40)))
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_TOKEN_BUDGET
    assert len(harness.executor.executed) == 3  # 15 tokens a step: the 3rd step spends it all
    assert harness.sink.events[-1].termination == a_pb2.TERMINATION_REASON_TOKEN_BUDGET


async def test_context_still_over_the_hard_limit_after_compaction(harness: Harness) -> None:
    async def sized(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        size = 20_000 if tool_call.call_id == "c3" else 3000
        return x_pb2.ExecuteResult(
            status=x_pb2.EXECUTION_STATUS_OK, content=tool_call.call_id + "z" * size
        )

    harness.executor.behaviours["read_file"] = sized
    provider = ListProvider(
        [turn(call(f"c{i}", "read_file", file_path=f"f{i}")) for i in range(6)], summary="sum"
    )
    limits = LimitSettings(token_soft_limit=2500, token_hard_limit=3000, diminishing_steps=99)
    events = await run(harness.core(provider, limits=limits))
    assert "compaction" in kinds(events)
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_TOKEN_BUDGET
    assert "still above the hard limit" in terminated(events).detail


async def test_each_call_is_a_span_and_the_audit_row_names_its_trace(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # the suite disables the SDK
    exporter = InMemorySpanExporter()
    provider_ = TracerProvider()
    provider_.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider_.get_tracer("test")
    harness.decision.verdicts["run_bash"] = c_pb2.VERDICT_DENY
    model = ListProvider(
        [turn(call("c1", "read_file", file_path="a"), call("c2", "run_bash", command="x"))]
    )
    await run(harness.core(model, tracer=tracer))
    spans = {
        str(dict(s.attributes or {})["stockade.call_id"]): s for s in exporter.get_finished_spans()
    }
    assert set(spans) == {"c1", "c2"}
    assert spans["c1"].name == "tool_call read_file"
    assert dict(spans["c1"].attributes or {})["stockade.status"] == "OK"
    assert dict(spans["c2"].attributes or {})["stockade.status"] == "DENIED"
    rows = {e.call_id: e for e in harness.sink.events if e.call_id}
    for call_id, span in spans.items():
        assert span.context is not None
        assert rows[call_id].trace_id == f"{span.context.trace_id:032x}"
    provider_.shutdown()


async def test_decision_service_stopped_mid_turn_fails_closed(harness: Harness) -> None:
    import grpc

    from stockade.v1 import decision_service_pb2_grpc as d_grpc
    from tests.unit.agent.conftest import FakeDecision

    decision_server = grpc.aio.server()
    d_grpc.add_DecisionServiceServicer_to_server(FakeDecision(), decision_server)  # type: ignore[abstract]
    port = decision_server.add_insecure_port("127.0.0.1:0")
    await decision_server.start()

    async def stop_decision_then_read(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        await decision_server.stop(None)  # the decision service dies while c1 runs
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content="first")

    harness.executor.behaviours["read_file"] = stop_decision_then_read
    provider = ListProvider(
        [
            turn(call("c1", "read_file", file_path="a")),
            turn(call("c2", "read_file", file_path="b"), call("c3", "run_bash", command="ls")),
        ]
    )
    core = harness.core(provider, decision_address=f"127.0.0.1:{port}")
    events = await run(core)
    done = finished(events)
    assert done["c1"].status == x_pb2.EXECUTION_STATUS_OK
    for call_id in ("c2", "c3"):
        assert done[call_id].verdict == c_pb2.VERDICT_DENY
        assert "fail closed" in done[call_id].content
    assert [r.call.call_id for r in harness.executor.executed] == ["c1"]


async def test_built_in_tools(harness: Harness) -> None:
    todos = [{"content": "read", "status": "completed"}, {"content": "write", "status": "pending"}]
    provider = ListProvider(
        [
            turn(call("t1", "todo_write", todos=todos), call("m1", "save_memory", content="x")),
            turn(call("q1", "ask_user", question="Which file should I edit?")),
            turn(call("never", "read_file", file_path="a")),
        ]
    )
    events = await run(harness.core(provider))
    done = finished(events)
    assert done["t1"].content == "Todo list updated: 2 items, 1 completed."
    assert "1 entries" in done["m1"].content
    # ask_user hands the question to the user and ends the turn.
    assert events[-2].final_answer.text == "Which file should I edit?"
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_COMPLETED
    assert "never" not in done and harness.executor.executed == []
    assert harness.executor.inspected == []  # built-ins never go to the executor


async def test_compress_context_tool(harness: Harness) -> None:
    async def big(tool_call: c_pb2.ToolCall, ex: Any) -> x_pb2.ExecuteResult:
        return x_pb2.ExecuteResult(
            status=x_pb2.EXECUTION_STATUS_OK, content=tool_call.call_id + "w" * 3000
        )

    harness.executor.behaviours["read_file"] = big
    provider = ListProvider(
        [
            *[turn(call(f"c{i}", "read_file", file_path=f"f{i}")) for i in range(4)],
            turn(call("z", "compress_context")),
        ],
        summary="read four files",
    )
    events = await run(harness.core(provider))
    compaction = next(e for e in events if e.WhichOneof("event") == "compaction")
    assert compaction.compaction.kind == "manual"
    assert compaction.compaction.tokens_after < compaction.compaction.tokens_before
    assert "Context compacted" in finished(events)["z"].content
    last_messages, _ = provider.requests[-1]
    assert any(m.content.endswith("read four files") for m in last_messages)
    assert last_messages[-1].role == "tool" and last_messages[-1].tool_call_id == "z"


async def test_a_broken_remote_tool_is_an_error_result_not_a_dead_turn(harness: Harness) -> None:
    class Exploding:
        address = "p:1"

        async def list_tools(self) -> list[ToolSpec]:
            raise ValueError("garbled ListTools")  # discovery survives this too

        async def call_tool(self, **kw: Any) -> Any:
            raise RuntimeError("provider client bug")

    registry = default_registry()
    registry.register(
        ToolSpec(name="lookup", description="", location=Location.REMOTE, provider="p:1")
    )
    provider = ListProvider([turn(call("c1", "lookup"))])
    core = harness.core(provider, registry=registry, tool_providers={"p:1": Exploding()})  # type: ignore[dict-item]
    events = await run(core)
    assert "failed unexpectedly (RuntimeError)" in finished(events)["c1"].content
    assert terminated(events).reason == a_pb2.TERMINATION_REASON_COMPLETED
