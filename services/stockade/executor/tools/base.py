"""The interface every executor tool implements.

A tool receives already-validated JSON arguments and an ``ExecContext`` (the sandbox and
settings of this executor, the session's read-state, a cancel event) and yields output
chunks, then exactly one ``ToolResult``. The servicer maps these to the Execute stream.
Tools re-check every path and command themselves: the executor never trusts that the
decision service or the agent checked before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol


class Status(Enum):
    """How an execution ended (mirrors ``ExecutionStatus``)."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    REFUSED = "refused"


@dataclass(frozen=True)
class Chunk:
    """A piece of output while the tool runs."""

    data: str
    stderr: bool = False


@dataclass(frozen=True)
class ToolResult:
    """The final result of a tool call."""

    status: Status
    content: str
    exit_code: int = 0
    error: str = ""
    truncated: bool = False
    persisted_path: str = ""


@dataclass
class ExecContext:
    """What a tool may use while it runs one call."""

    session_id: str
    call_id: str
    working_dir: str
    services: Mapping[str, Any]
    """Executor-wide collaborators by name (``"sandbox"``, ``"settings"``, ``"read_state"`` ...)."""
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the caller cancels a CANCEL-behaviour call."""
    timeout_s: float = 60.0


class Tool(Protocol):
    """An executor tool."""

    name: str

    def run(self, args: Mapping[str, Any], ctx: ExecContext) -> AsyncIterator[Chunk | ToolResult]:
        """Run one call: yield chunks, then one ``ToolResult`` (always last)."""
        ...
