"""The built-in tools: one module per tool, spec and handler together; no product tools
among the defaults."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import stockade.agent.tools as tools_pkg
from stockade.agent.registry import BUILTIN_TOOLS, Location, ToolSpec
from stockade.agent.tools import BUILTINS, builtin_handlers, default_registry
from stockade.agent.tools.base import (
    MAX_SESSION_MEMORY_ENTRIES,
    MAX_TODOS,
    BuiltinTool,
    SessionState,
)
from stockade.contract.tools import EXECUTOR_TOOLS, SEED_TOOLS
from stockade.contract.tools import Location as ContractLocation
from stockade.llm.base import ModelToolCall, ModelTurn
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.unit.agent.conftest import Harness, ListProvider, finished, run

#: Modules of the package that are not a built-in tool.
_NOT_TOOLS = {"base", "executor"}
TOOL_MODULES = sorted(
    m.name for m in pkgutil.iter_modules(tools_pkg.__path__) if m.name not in _NOT_TOOLS
)


def test_there_is_one_module_per_built_in_tool() -> None:
    assert set(TOOL_MODULES) == set(BUILTIN_TOOLS)
    assert len(BUILTINS) == len(BUILTIN_TOOLS) == 6


@pytest.mark.parametrize("module_name", TOOL_MODULES)
def test_each_module_declares_its_spec_and_handler_together(module_name: str) -> None:
    module = importlib.import_module(f"stockade.agent.tools.{module_name}")
    tool = module.TOOL
    assert isinstance(tool, BuiltinTool)
    assert tool.spec.name == module_name
    assert tool.spec.location is Location.BUILTIN
    assert inspect.iscoroutinefunction(tool.run)
    assert tool in BUILTINS and builtin_handlers()[module_name] is tool
    # Traits come from the contract's table (the decision service reads the same one).
    traits = SEED_TOOLS[module_name]
    assert tool.spec.read_only is traits.read_only
    assert tool.spec.interrupt_behavior.value == traits.interrupt.value
    assert tool.spec.is_concurrency_safe({}) is traits.concurrency_safe
    assert tool.spec.parameters["type"] == "object"


def test_a_built_in_tool_must_be_located_in_the_agent() -> None:
    with pytest.raises(ValueError, match="BUILTIN"):
        BuiltinTool(ToolSpec(name="x", description="", location=Location.EXECUTOR), BUILTINS[0].run)


def test_the_handler_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        builtin_handlers()["run_bash"] = BUILTINS[0]  # type: ignore[index]


def test_the_default_registry_holds_no_product_tools() -> None:
    registry = default_registry()
    assert set(registry.names()) == set(EXECUTOR_TOOLS) | set(BUILTIN_TOOLS)
    assert not [spec.name for spec in registry if spec.location is Location.REMOTE]
    products = [t.name for t in SEED_TOOLS.values() if t.location is ContractLocation.REMOTE]
    assert products  # the contract still declares their traits for the decision service
    assert not set(products) & set(registry.names())
    for name in EXECUTOR_TOOLS:
        assert registry.get(name).location is Location.EXECUTOR


def _turn(*calls: ModelToolCall) -> ModelTurn:
    return ModelTurn(tool_calls=calls, prompt_tokens=10, completion_tokens=5)


async def test_a_built_in_location_without_a_handler_is_an_error_result(
    harness: Harness,
) -> None:
    registry = default_registry()
    registry.register(ToolSpec(name="homemade", description="", location=Location.BUILTIN))
    provider = ListProvider([_turn(ModelToolCall("c1", "homemade", {}))])
    events = await run(harness.core(provider, registry=registry))
    done = finished(events)["c1"]
    assert done.status == x_pb2.EXECUTION_STATUS_ERROR
    assert done.content == "Error: homemade is not a built-in tool"
    assert harness.executor.executed == []


async def test_built_ins_dispatch_through_their_module(harness: Harness) -> None:
    provider = ListProvider(
        [
            _turn(
                ModelToolCall(
                    "t1",
                    "todo_write",
                    {
                        "todos": [
                            {"content": "a", "status": "completed"},
                            {"content": "b", "status": "pending"},
                        ]
                    },
                )
            ),
            _turn(ModelToolCall("m1", "save_memory", {"content": "the sky is blue"})),
            _turn(ModelToolCall("q1", "ask_user", {"question": "Which file?"})),
        ]
    )
    core = harness.core(provider)
    events = await run(core)
    done = finished(events)
    assert done["t1"].content == "Todo list updated: 2 items, 1 completed."
    assert core.loop.sessions.todos("s1")[0]["content"] == "a"
    assert done["m1"].content.startswith("Saved to this session's memory (1 entries)")
    assert core.loop.sessions.memory("s1") == ["the sky is blue"]
    assert done["q1"].content == "Which file?"
    assert events[-2].final_answer.text == "Which file?"  # ask_user ends the turn


async def test_a_loop_without_a_built_in_reports_it_unavailable(harness: Harness) -> None:
    provider = ListProvider([_turn(ModelToolCall("t1", "todo_write", {"todos": []}))])
    core = harness.core(provider)
    core.loop.builtins = {}
    events = await run(core)
    done = finished(events)["t1"]
    assert done.status == x_pb2.EXECUTION_STATUS_ERROR
    assert done.content == "Error: todo_write is not available in this agent"


def test_session_state_is_bounded() -> None:
    state = SessionState(max_sessions=3)
    for n in range(5):
        state.set_todos(f"s{n}", [{"content": str(n), "status": "pending"}])
    assert len(state) == 3
    assert state.todos("s0") == [] and state.todos("s4")[0]["content"] == "4"
    state.todos("s2")  # reading does not count as use
    state.add_memory("s2", "kept")  # using s2 makes s3 the oldest
    state.set_todos("s5", [])
    assert state.memory("s2") == ["kept"] and state.todos("s3") == []
    with pytest.raises(ValueError, match=f"at most {MAX_TODOS}"):
        state.set_todos("s5", [{"content": "x", "status": "pending"}] * (MAX_TODOS + 1))
    for n in range(MAX_SESSION_MEMORY_ENTRIES - 1):
        state.add_memory("s2", str(n))
    with pytest.raises(ValueError, match="memory is full"):
        state.add_memory("s2", "one too many")
    assert len(state.memory("s2")) == MAX_SESSION_MEMORY_ENTRIES


async def test_bounds_are_results_the_model_reads(harness: Harness) -> None:
    too_many = [{"content": "x", "status": "pending"}] * (MAX_TODOS + 1)
    provider = ListProvider([_turn(ModelToolCall("t1", "todo_write", {"todos": too_many}))])
    done = finished(await run(harness.core(provider)))["t1"]
    assert done.status == x_pb2.EXECUTION_STATUS_ERROR
    assert done.content == f"Error: a todo list holds at most {MAX_TODOS} items"
