"""Subagents inside a real turn: silence, least privilege, ASK → DENY, shared budgets."""

from __future__ import annotations

from typing import Any

from stockade.agent.hooks import Hook
from stockade.agent.lifecycle import LifecycleEvent
from stockade.agent.limits import LimitSettings
from stockade.llm.base import ModelToolCall, ModelTurn
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.unit.agent.conftest import Harness, ListProvider, finished, kinds, run


def call(call_id: str, tool: str, /, **arguments: Any) -> ModelToolCall:
    return ModelToolCall(call_id, tool, arguments)


def turn(*calls: ModelToolCall, text: str = "") -> ModelTurn:
    return ModelTurn(text=text, tool_calls=calls, prompt_tokens=10, completion_tokens=5)


async def test_explore_subagent_is_silent_and_restricted(harness: Harness) -> None:
    harness.decision.verdicts["grep_files"] = c_pb2.VERDICT_ASK
    provider = ListProvider(
        [
            turn(call("s1", "subagent", task="find the notes", profile="explore", name="scout")),
            turn(
                call("k1", "read_file", file_path="notes.md"),
                call("k2", "file_write", file_path="x", content="y"),
                call("k3", "grep_files", pattern="TODO"),
                text="child thinking",
            ),
            ModelTurn(text="child answer"),
            ModelTurn(text="lead done"),
        ]
    )
    events = await run(harness.core(provider))
    names = kinds(events)
    assert "permission_requested" not in names  # subagents never ask
    started = next(e for e in events if e.WhichOneof("event") == "subagent_started")
    assert started.subagent_started.agent_name == "scout"
    assert started.subagent_started.profile == "explore"
    stopped = next(e for e in events if e.WhichOneof("event") == "subagent_stopped")
    assert stopped.subagent_stopped.reason == a_pb2.TERMINATION_REASON_COMPLETED
    assert stopped.subagent_stopped.answer == "child answer"
    # The child's own text and answer are not streamed to the user; its calls are tagged.
    assert all(e.text.text != "child thinking" for e in events if e.WhichOneof("event") == "text")
    child_calls = [e for e in events if e.agent_name == "scout"]
    assert {e.WhichOneof("event") for e in child_calls} >= {
        "tool_call_started",
        "tool_call_finished",
    }
    done = finished(events)
    assert done["k1"].status == x_pb2.EXECUTION_STATUS_OK
    assert "unknown tool 'file_write'" in done["k2"].content  # outside the explore profile
    assert done["k3"].verdict == c_pb2.VERDICT_DENY  # ASK became DENY
    assert done["s1"].content == "child answer"
    child_decides = [r for r in harness.decision.requests if r.call.agent_name == "scout"]
    assert child_decides and all(r.call.from_subagent for r in child_decides)
    assert all(r.call.session_id == "s1" for r in child_decides)  # inherited session
    # Fresh context: the child's first request held only its system prompt and the task.
    child_first, _ = provider.requests[1]
    assert [m.role for m in child_first] == ["system", "user"]
    assert child_first[1].content == "find the notes"
    audit_agents = {e.agent_name for e in harness.sink.events if e.tool_name != "session"}
    assert audit_agents == {"lead", "scout"}


async def test_silent_subagent_cannot_ask_the_user(harness: Harness) -> None:
    provider = ListProvider(
        [
            turn(call("s1", "subagent", task="t", profile="general", name="helper")),
            turn(call("k1", "ask_user", question="may I?")),
            ModelTurn(text="gave up asking"),
            ModelTurn(text="lead done"),
        ]
    )
    events = await run(harness.core(provider))
    assert "not available to subagents" in finished(events)["k1"].content
    assert "permission_requested" not in kinds(events)
    assert events[-1].terminated.reason == a_pb2.TERMINATION_REASON_COMPLETED


async def test_subagent_depth_is_bounded(harness: Harness) -> None:
    provider = ListProvider(
        [
            turn(call("s1", "subagent", task="t", profile="general", name="one")),
            turn(call("s2", "subagent", task="deeper", profile="general", name="two")),
            ModelTurn(text="child done"),
            ModelTurn(text="lead done"),
        ]
    )
    events = await run(harness.core(provider, limits=LimitSettings(max_subagent_depth=1)))
    assert "unknown tool 'subagent'" in finished(events)["s2"].content
    starts = [e for e in events if e.WhichOneof("event") == "subagent_started"]
    assert len(starts) == 1


async def test_subagent_requesting_tools_beyond_its_profile_is_refused(harness: Harness) -> None:
    provider = ListProvider(
        [
            turn(call("s1", "subagent", task="t", profile="explore", tools=["run_bash"])),
            ModelTurn(text="lead done"),
        ]
    )
    events = await run(harness.core(provider))
    done = finished(events)["s1"]
    assert done.verdict == c_pb2.VERDICT_DENY and "cannot use: run_bash" in done.content
    assert "subagent_started" not in kinds(events)


async def test_subagent_spends_from_the_tree_budget(harness: Harness) -> None:
    provider = ListProvider(
        [
            turn(call("s1", "subagent", task="t", profile="explore", name="greedy")),
            *[turn(call(f"k{i}", "read_file", file_path=f"f{i}")) for i in range(5)],
        ]
    )
    limits = LimitSettings(tree_max_steps=3)
    events = await run(harness.core(provider, limits=limits))
    child_reads = [r for r in harness.executor.executed if r.call.agent_name == "greedy"]
    assert len(child_reads) == 2  # the lead used 1 of 3 steps; the child got the other 2
    stopped = next(e for e in events if e.WhichOneof("event") == "subagent_stopped")
    assert stopped.subagent_stopped.reason == a_pb2.TERMINATION_REASON_MAX_STEPS
    assert "MAX_STEPS" in finished(events)["s1"].content
    # Nothing is left for the lead: one forced final answer, then the turn ends.
    assert events[-1].terminated.reason == a_pb2.TERMINATION_REASON_MAX_STEPS
    assert "step budget" in events[-1].terminated.detail
    assert events[-2].final_answer.text == "forced final answer"


class Lifecycle(Hook):
    def __init__(self) -> None:
        self.name = "lifecycle"
        self.seen: list[tuple[str, str]] = []

    async def on_event(self, event: LifecycleEvent) -> None:
        self.seen.append((event.kind.value, event.agent_name))


async def test_child_denial_halt_ends_the_parent_and_hooks_see_every_event(
    harness: Harness,
) -> None:
    harness.decision.verdicts["grep_files"] = c_pb2.VERDICT_DENY
    harness.decision.halt_after = 2
    provider = ListProvider(
        [
            turn(call("s1", "subagent", task="t", profile="explore", name="kid")),
            turn(call("k1", "grep_files", pattern="a")),
            turn(call("k2", "grep_files", pattern="b")),
            turn(call("k3", "grep_files", pattern="c")),
            ModelTurn(text="never"),
        ]
    )
    hook = Lifecycle()
    events = await run(harness.core(provider, hooks=[hook]))
    stopped = next(e for e in events if e.WhichOneof("event") == "subagent_stopped")
    assert stopped.subagent_stopped.reason == a_pb2.TERMINATION_REASON_DENIAL_HALT
    assert events[-1].terminated.reason == a_pb2.TERMINATION_REASON_DENIAL_HALT
    assert len(harness.decision.requests) == 3  # s1, k1, k2: nothing after the halt
    assert hook.seen[0] == ("session_start", "lead")
    assert ("subagent_start", "kid") in hook.seen and ("subagent_stop", "kid") in hook.seen
    assert ("step_complete", "kid") in hook.seen and ("step_complete", "lead") in hook.seen
    assert hook.seen[-1] == ("session_stop", "lead")
