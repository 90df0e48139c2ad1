"""Hook pipeline semantics (AGT-3) and the built-in hooks (AGT-4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from stockade.agent.builtin_hooks import (
    AuditLogHook,
    CancellationHook,
    CancelRegistry,
    MetricsHook,
    RedactionHook,
    TruncationHook,
    standard_hooks,
)
from stockade.agent.hooks import (
    CONTINUE,
    Block,
    CallStatus,
    DecisionInfo,
    Hook,
    HookPipeline,
    MutateInput,
    MutateOutput,
    PermissionRequired,
    PostAction,
    PreAction,
    ToolCallContext,
    ToolResultContext,
)
from stockade.agent.lifecycle import (
    LifecycleEvent,
    SessionStartDetails,
    SessionStopDetails,
    StepCompleteDetails,
)
from stockade.agent.limits import Termination
from stockade.v1 import agent_service_pb2 as agent_pb2
from stockade.v1 import audit_service_pb2 as audit_pb2
from stockade.v1 import common_pb2
from stockade.v1 import decision_service_pb2 as decision_pb2

CALL = ToolCallContext(session_id="s1", call_id="c1", tool_name="read_file", arguments={"a": 1})
AWS = "AKIAIOSFODNN7EXAMPLE"


class Fixed(Hook):
    """Answers a fixed action and records what it saw."""

    def __init__(self, name: str, pre: PreAction = CONTINUE, post: PostAction = CONTINUE) -> None:
        self.name = name
        self.pre = pre
        self.post = post
        self.seen_args: list[dict[str, Any]] = []
        self.seen_content: list[str] = []

    async def pre_tool_use(self, call: ToolCallContext) -> PreAction:
        self.seen_args.append(dict(call.arguments))
        return self.pre

    async def post_tool_use(self, result: ToolResultContext) -> PostAction:
        self.seen_content.append(result.content)
        return self.post


class Raising(Hook):
    def __init__(self, fail_closed: bool) -> None:
        self.name = "raising"
        self.fail_closed = fail_closed

    async def pre_tool_use(self, call: ToolCallContext) -> PreAction:
        raise RuntimeError("boom")

    async def post_tool_use(self, result: ToolResultContext) -> PostAction:
        raise RuntimeError("boom")

    async def on_event(self, event: LifecycleEvent) -> None:
        raise RuntimeError("boom")


async def test_first_block_short_circuits() -> None:
    after = Fixed("after")
    pipeline = HookPipeline(
        [Fixed("a", Block("first")), Fixed("b", Block("second")), after],
    )
    result = await pipeline.run_pre_tool_use(CALL)
    assert result.blocked and result.block_reason == "first" and result.blocked_by == "a"
    assert after.seen_args == []


async def test_contexts_accumulate_and_last_mutation_wins() -> None:
    late = Fixed("late")
    pipeline = HookPipeline(
        [
            Fixed("m1", MutateInput({"a": 2}, "ctx one")),
            Fixed("only_ctx", MutateInput(None, "ctx two")),
            Fixed("m2", MutateInput({"a": 3}, "")),
            late,
        ]
    )
    result = await pipeline.run_pre_tool_use(CALL)
    assert not result.blocked
    assert result.arguments == {"a": 3}
    assert result.additional_context == ("ctx one", "ctx two")
    assert result.mutated_by == ("m1", "m2")
    assert late.seen_args == [{"a": 3}]  # later hooks see the mutated arguments


async def test_permission_required_survives_a_later_continue_and_mutation() -> None:
    pipeline = HookPipeline(
        [
            Fixed("p", PermissionRequired("needs a human")),
            Fixed("c"),
            Fixed("m", MutateInput({"a": 9})),
            Fixed("c2"),
        ]
    )
    result = await pipeline.run_pre_tool_use(CALL)
    assert result.permission_required == ("needs a human",)
    assert result.arguments == {"a": 9}
    assert not result.blocked


async def test_block_after_permission_required_still_blocks() -> None:
    pipeline = HookPipeline([Fixed("p", PermissionRequired("x")), Fixed("b", Block("no"))])
    result = await pipeline.run_pre_tool_use(CALL)
    assert result.blocked and result.permission_required == ("x",)


async def test_failing_hooks_follow_their_policy() -> None:
    closed = await HookPipeline([Raising(True)]).run_pre_tool_use(CALL)
    assert closed.blocked and "raising failed" in closed.block_reason
    opened = await HookPipeline([Raising(False)]).run_pre_tool_use(CALL)
    assert not opened.blocked
    post = await HookPipeline([Raising(True)]).run_post_tool_use(
        ToolResultContext(call=CALL, content="secret stuff")
    )
    assert "secret stuff" not in post.content and "withheld" in post.content
    post_open = await HookPipeline([Raising(False)]).run_post_tool_use(
        ToolResultContext(call=CALL, content="keep")
    )
    assert post_open.content == "keep"
    await HookPipeline([Raising(True)]).emit(LifecycleEvent("s1", SessionStartDetails()))


async def test_mutate_output_chains() -> None:
    second = Fixed("second", post=MutateOutput("two"))
    third = Fixed("third")
    pipeline = HookPipeline([Fixed("first", post=MutateOutput("one")), second, third])
    result = await pipeline.run_post_tool_use(ToolResultContext(call=CALL, content="zero"))
    assert result.content == "two"
    assert second.seen_content == ["one"] and third.seen_content == ["two"]
    assert result.mutated_by == ("first", "second")


async def test_cancellation_hook_blocks_a_cancelled_turn_and_clears_on_stop() -> None:
    registry = CancelRegistry()
    hook = CancellationHook(registry)
    pipeline = HookPipeline([hook])
    assert not registry.cancel("s1")  # nothing running yet
    registry.begin("s1")
    assert not (await pipeline.run_pre_tool_use(CALL)).blocked
    assert registry.cancel("s1")
    result = await pipeline.run_pre_tool_use(CALL)
    assert result.blocked and "cancelled" in result.block_reason
    # A subagent stopping does not clear the lead's cancellation.
    stop = SessionStopDetails(Termination.CANCELLED)
    await pipeline.emit(LifecycleEvent("s1", stop, agent_name="sub-1"))
    assert registry.is_cancelled("s1")
    await pipeline.emit(LifecycleEvent("s1", stop))
    assert not registry.is_cancelled("s1")
    assert not (await pipeline.run_pre_tool_use(CALL)).blocked


class Sink:
    def __init__(self, fail: bool = False) -> None:
        self.events: list[audit_pb2.AuditEvent] = []
        self.fail = fail

    def enqueue(self, event: audit_pb2.AuditEvent) -> None:
        if self.fail:
            raise ConnectionError("down")
        self.events.append(event)


async def test_redaction_runs_before_the_audit_log_sees_output_and_arguments() -> None:
    sink = Sink()
    pipeline = HookPipeline(standard_hooks(CancelRegistry(), sink))
    call = ToolCallContext(
        session_id="s1",
        call_id="c9",
        tool_name="run_bash",
        arguments={"command": f"echo {AWS}"},
        agent_name="lead",
        step=2,
    )
    rule = common_pb2.Rule(
        effect=common_pb2.RULE_EFFECT_ALLOW,
        pattern="run_bash(echo *)",
        source=common_pb2.RULE_SOURCE_ENV,
        rule_id="echo",
    )
    conflict = decision_pb2.Conflict(
        rule=common_pb2.Rule(effect=common_pb2.RULE_EFFECT_ASK, source=common_pb2.RULE_SOURCE_TOOL),
        note="an explicit ALLOW settles the tool's ASK",
    )
    decision = DecisionInfo(
        verdict="ALLOW", winning_rule=rule, conflicts=(conflict,), reason="allowed by rule"
    )
    result = await pipeline.run_post_tool_use(
        ToolResultContext(call=call, content=f"key={AWS}", elapsed_ms=7, decision=decision)
    )
    assert AWS not in result.content and "[REDACTED:aws_access_key]" in result.content
    (event,) = sink.events
    assert AWS not in event.output_preview and AWS not in str(event.arguments)
    assert event.arguments["command"].startswith("echo [REDACTED")
    assert event.status == audit_pb2.AUDIT_STATUS_OK
    assert event.verdict == common_pb2.VERDICT_ALLOW
    # The decision travels typed, as the decision service returned it; no strings.
    assert event.winning_rule == rule and list(event.conflicts) == [conflict]
    assert event.decision_reason == "allowed by rule"
    assert not (event.matched_rule or event.rule_source or event.conflict_log)
    assert not event.arguments_json
    assert (event.step, event.call_id, event.elapsed_ms) == (2, "c9", 7)


async def test_audit_log_rows_for_denials_and_session_stop() -> None:
    sink = Sink()
    hook = AuditLogHook(sink)
    await hook.post_tool_use(
        ToolResultContext(
            call=CALL, content="x" * 500, status=CallStatus.DENIED, decision=DecisionInfo("DENY")
        )
    )
    await hook.on_event(
        LifecycleEvent("s1", SessionStopDetails(Termination.MAX_STEPS, "8 steps", 8))
    )
    await hook.on_event(LifecycleEvent("s1", StepCompleteDetails(1, 10)))
    denied, stop = sink.events
    assert denied.status == audit_pb2.AUDIT_STATUS_DENIED and len(denied.output_preview) == 200
    assert stop.tool_name == "session" and stop.status == audit_pb2.AUDIT_STATUS_SESSION_STOP
    assert stop.termination == agent_pb2.TERMINATION_REASON_MAX_STEPS
    assert not stop.termination_reason
    assert denied.event_id != stop.event_id


async def test_audit_failure_never_breaks_the_call() -> None:
    pipeline = HookPipeline([AuditLogHook(Sink(fail=True))])
    result = await pipeline.run_post_tool_use(ToolResultContext(call=CALL, content="ok"))
    assert result.content == "ok"


async def test_metrics_hook_exports_through_opentelemetry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The suite disables the SDK globally; this test installs its own in-memory reader.
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    hook = MetricsHook(provider.get_meter("test"))
    pipeline = HookPipeline([hook])
    await pipeline.run_post_tool_use(ToolResultContext(call=CALL, content="", elapsed_ms=3))
    await pipeline.run_post_tool_use(
        ToolResultContext(call=CALL, content="", status=CallStatus.DENIED)
    )
    await pipeline.emit(LifecycleEvent("s1", StepCompleteDetails(1, 10)))
    await pipeline.emit(LifecycleEvent("s1", SessionStopDetails(Termination.DENIAL_HALT)))
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
    calls = {p.attributes["status"]: p.value for p in points["stockade.agent.tool_calls"]}
    assert calls == {"OK": 1, "DENIED": 1}
    assert points["stockade.agent.steps"][0].value == 1
    assert points["stockade.agent.sessions_stopped"][0].attributes["reason"] == "DENIAL_HALT"
    snap = hook.snapshot("s1")
    assert (snap.calls, snap.errors, snap.denials, snap.steps) == (2, 1, 1, 1)
    assert snap.termination_reason == "DENIAL_HALT"
    provider.shutdown()


async def test_redaction_hook_leaves_clean_output_alone() -> None:
    result = await HookPipeline([RedactionHook()]).run_post_tool_use(
        ToolResultContext(call=CALL, content="hello world")
    )
    assert result.content == "hello world" and result.mutated_by == ()


async def test_truncation_keeps_head_and_tail_and_persists_redacted_output(
    tmp_path: Path,
) -> None:
    pipeline = HookPipeline([RedactionHook(), TruncationHook(400, tmp_path)])
    content = "HEAD" + f" key={AWS} " + "m" * 2000 + "TAIL"
    call = ToolCallContext(session_id="s/../x", call_id="c/1", tool_name="t", arguments={})
    result = await pipeline.run_post_tool_use(ToolResultContext(call=call, content=content))
    assert result.content.startswith("HEAD") and result.content.endswith("TAIL")
    assert len(result.content) < 500 and "characters cut" in result.content
    (saved,) = list(tmp_path.rglob("*.txt"))
    assert saved.is_relative_to(tmp_path) and ".." not in saved.parts
    text = saved.read_text()
    assert len(text) > 2000 and AWS not in text and str(saved) in result.content
    short = await pipeline.run_post_tool_use(ToolResultContext(call=call, content="small"))
    assert short.content == "small"
    with pytest.raises(ValueError):
        TruncationHook(10)
