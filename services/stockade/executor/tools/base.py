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

from stockade.executor.paths import PathSandbox
from stockade.executor.readstate import ReadLedger, ReadState


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


@dataclass(frozen=True)
class ToolLimits:
    """The executor settings the tools read (the app builds it from ``ExecutorSettings``;
    the defaults are the settings' defaults)."""

    max_output_chars: int = 4000
    """Output the model sees; the rest is cut (head and tail kept) and persisted."""
    max_file_write_bytes: int = 10 * 1024 * 1024
    """Largest file a tool may write; also the file-size rlimit of commands."""
    library_dir: str | None = None
    """Where large outputs are persisted (``tool-results/``), if anywhere."""
    workspace: str | None = None
    """The working directory a relative ``library_dir`` is taken from."""
    network_enabled: bool = False
    """Whether commands may use the network."""
    memory_limit_mb: int = 0
    """Memory of one command and all it starts (0: the tool's own default)."""
    default_timeout_s: float = 60.0
    """Time limit of a call that names none."""
    max_timeout_s: float = 120.0
    """The largest time limit a call may ask for."""
    denied_read_globs: tuple[str, ...] = ()
    """Paths nothing may read (added to the sandbox's own)."""
    masked_dirs: tuple[str, ...] = ()
    """Directories hidden from every command (Stockade's own unix sockets)."""


@dataclass
class ExecContext:
    """What a tool may use while it runs one call: typed collaborators, no lookup by name."""

    session_id: str
    call_id: str
    working_dir: str
    sandbox: PathSandbox
    """The executor's path sandbox (every path a tool touches goes through it)."""
    read_state: ReadLedger = field(default_factory=ReadState)
    """What each session has read (stale-write protection, EXE-11)."""
    limits: ToolLimits = field(default_factory=ToolLimits)
    """The settings the tools read."""
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the caller cancels a CANCEL-behaviour call."""
    timeout_s: float = 60.0


class Tool(Protocol):
    """An executor tool."""

    name: str

    def run(self, args: Mapping[str, Any], ctx: ExecContext) -> AsyncIterator[Chunk | ToolResult]:
        """Run one call: yield chunks, then one ``ToolResult`` (always last)."""
        ...
