"""The agent's default tools: the executor's six and the six built into the agent.

Each built-in tool is one module here exporting ``TOOL`` (its spec and handler together):
``ask_user``, ``compress_context``, ``load_skill``, ``save_memory``, ``subagent``,
``todo_write``. Product tools (a paper catalogue, ``save_note`` …) are not defaults:
whatever composes a product agent registers them — from configuration
(``AgentSettings.tools``) or from a ToolProvider's ListTools answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from stockade.agent.registry import ToolRegistry, ToolSpec
from stockade.agent.tools import (
    ask_user,
    compress_context,
    load_skill,
    save_memory,
    subagent,
    todo_write,
)
from stockade.agent.tools.base import BuiltinTool
from stockade.agent.tools.executor import EXECUTOR_SPECS
from stockade.contract.tools import SEED_TOOLS

__all__ = ["BUILTINS", "BuiltinTool", "builtin_handlers", "default_registry", "default_specs"]

BUILTINS: tuple[BuiltinTool, ...] = (
    ask_user.TOOL,
    compress_context.TOOL,
    load_skill.TOOL,
    save_memory.TOOL,
    subagent.TOOL,
    todo_write.TOOL,
)
"""Every built-in tool."""


def builtin_handlers() -> Mapping[str, BuiltinTool]:
    """The built-in tools by name (what the loop dispatches to)."""
    return MappingProxyType({tool.spec.name: tool for tool in BUILTINS})


def default_specs() -> list[ToolSpec]:
    """The default tools' specs, in the order of the contract's seed table."""
    by_name = {spec.name: spec for spec in (*EXECUTOR_SPECS, *(t.spec for t in BUILTINS))}
    return [by_name[name] for name in SEED_TOOLS if name in by_name]


def default_registry() -> ToolRegistry:
    """A registry of the default tools (no product tools)."""
    return ToolRegistry(default_specs())
