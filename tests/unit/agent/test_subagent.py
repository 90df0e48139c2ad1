"""Subagent scope construction: least privilege, silence, depth and shared budgets."""

from __future__ import annotations

import pytest

from stockade.agent.hooks import HookPipeline
from stockade.agent.limits import Budget
from stockade.agent.registry import Location, ToolSpec
from stockade.agent.subagent import (
    SILENT_ASK_USER_ERROR,
    AgentScope,
    initial_messages,
    parse_request,
    silent_refusal,
    spawn_scope,
)
from stockade.agent.tools import default_registry
from stockade.errors import InvalidArgument, PermissionDenied, ResourceExhausted


def lead(tools: list[str] | None = None, steps: int = 20) -> AgentScope:
    registry = default_registry()
    if tools is not None:
        registry = registry.restrict(tools)
    return AgentScope(
        name="lead",
        session_id="s1",
        registry=registry,
        hooks=HookPipeline(),
        budget=Budget(max_steps=steps, max_tokens=10_000),
    )


def test_explore_profile_gets_only_read_only_tools() -> None:
    parent = lead()
    # A product's read-only tool, registered by whatever composed the agent.
    parent.registry.register(
        ToolSpec(
            name="search_papers",
            description="",
            read_only=True,
            concurrency_safe=True,
            location=Location.REMOTE,
            provider="p:1",
        )
    )
    child = spawn_scope(parent, parse_request({"task": "look around"}), max_depth=2)
    assert set(child.registry.names()) == set(parent.registry.read_only().names())
    assert set(child.registry.names()) == {
        "read_file",
        "grep_files",
        "glob_files",
        "load_skill",
        "search_papers",
    }
    assert {"read_file", "grep_files", "glob_files", "search_papers"} <= set(child.registry.names())
    assert all(spec.read_only for spec in child.registry)
    assert child.silent and child.from_subagent and child.depth == 1
    assert child.session_id == "s1"
    assert child.name.startswith("sub-explore-")


def test_inherits_parent_hooks() -> None:
    parent = lead()
    child = spawn_scope(parent, parse_request({"task": "t", "profile": "general"}), max_depth=2)
    assert child.hooks is parent.hooks


def test_never_more_than_the_parent() -> None:
    parent = lead(["read_file", "run_bash", "subagent"])
    general = spawn_scope(parent, parse_request({"task": "t", "profile": "general"}), max_depth=3)
    assert set(general.registry.names()) <= {"read_file", "run_bash", "subagent"}
    explore = spawn_scope(parent, parse_request({"task": "t"}), max_depth=3)
    assert explore.registry.names() == ["read_file"]  # profile ∩ parent


@pytest.mark.parametrize(
    ("profile", "tools"),
    [("explore", ["run_bash"]), ("explore", ["file_write"]), ("general", ["file_write"])],
)
def test_requesting_a_tool_outside_profile_or_parent_is_refused(
    profile: str, tools: list[str]
) -> None:
    parent = lead(["read_file", "run_bash"])
    request = parse_request({"task": "t", "profile": profile, "tools": tools})
    with pytest.raises(PermissionDenied, match="cannot use"):
        spawn_scope(parent, request, max_depth=2)


def test_explicit_tools_narrow_further() -> None:
    request = parse_request({"task": "t", "tools": ["grep_files"], "name": "grepper"})
    child = spawn_scope(lead(), request, max_depth=2)
    assert child.registry.names() == ["grep_files"] and child.name == "grepper"


def test_depth_is_bounded_and_the_last_level_cannot_nest() -> None:
    general = parse_request({"task": "t", "profile": "general"})
    level1 = spawn_scope(lead(), general, max_depth=2)
    assert "subagent" in level1.registry
    level2 = spawn_scope(level1, general, max_depth=2)
    assert "subagent" not in level2.registry and level2.depth == 2
    with pytest.raises(PermissionDenied, match="depth limit"):
        spawn_scope(level2, general, max_depth=2)
    with pytest.raises(PermissionDenied):
        spawn_scope(level1, parse_request({"task": "t", "tools": ["subagent"]}), max_depth=2)


def test_budget_is_carved_from_the_parent() -> None:
    parent = lead(steps=3)
    assert parent.budget.try_spend_step()
    child = spawn_scope(parent, parse_request({"task": "t"}), max_depth=2)
    assert child.max_steps == 2 and child.budget.remaining_steps == 2
    assert child.budget.try_spend_step() and child.budget.try_spend_step()
    assert not child.budget.try_spend_step()
    assert parent.budget.remaining_steps == 0
    with pytest.raises(ResourceExhausted):
        spawn_scope(parent, parse_request({"task": "again"}), max_depth=2)


def test_fresh_messages_and_silent_ask_user() -> None:
    child = spawn_scope(lead(), parse_request({"task": "find X"}), max_depth=2)
    messages = initial_messages(child, parse_request({"task": "find X"}))
    assert [m.role for m in messages] == ["system", "user"]
    assert messages[1].content == "find X"
    assert silent_refusal(child, "ask_user") == SILENT_ASK_USER_ERROR
    assert silent_refusal(child, "read_file") is None
    assert silent_refusal(lead(), "ask_user") is None


@pytest.mark.parametrize(
    "arguments",
    [{}, {"task": "  "}, {"task": "t", "profile": "root"}, {"task": "t", "tools": "read_file"}],
)
def test_bad_requests(arguments: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        parse_request(arguments)
