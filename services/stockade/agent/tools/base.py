"""What a built-in tool is: its spec and its handler, declared together.

A built-in tool runs inside the agent (not in the executor, not behind a ToolProvider).
Each lives in its own module of this package and exports one ``BuiltinTool``; the loop
dispatches a call to the handler by name and passes a ``ToolContext`` with the turn, the
calling agent's scope, its history and the loop's services (``LoopRuntime``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from stockade.agent.compaction import CompactionResult
from stockade.agent.hooks import HookPipeline
from stockade.agent.limits import LimitSettings
from stockade.agent.memory import MemoryStore
from stockade.agent.outcome import Outcome
from stockade.agent.registry import InterruptBehavior, Location, ToolSpec
from stockade.agent.skills import SkillLibrary
from stockade.agent.subagent import AgentScope
from stockade.agent.turn import LoopResult, TurnState
from stockade.contract.tools import SEED_TOOLS
from stockade.llm.base import Message

__all__ = [
    "MAX_SESSIONS",
    "MAX_SESSION_MEMORY_ENTRIES",
    "MAX_TODOS",
    "BuiltinHandler",
    "BuiltinTool",
    "LoopRuntime",
    "SessionState",
    "ToolContext",
    "obj",
    "seed_spec",
]


MAX_SESSIONS = 1_024
"""Sessions whose built-in state is kept; the least recently used is dropped past it."""
MAX_TODOS = 200
"""Items in one todo list."""
MAX_SESSION_MEMORY_ENTRIES = 100
"""Entries kept for one session when there is no memory folder."""


@dataclass
class _Session:
    todos: list[dict[str, Any]] = field(default_factory=list)
    memory: list[str] = field(default_factory=list)


class SessionState:
    """What built-in tools keep per session while the agent runs (not persisted).

    Bounded: at most ``MAX_SESSIONS`` sessions (least recently used dropped), each with
    at most ``MAX_TODOS`` todos and ``MAX_SESSION_MEMORY_ENTRIES`` unsaved memory entries;
    a call past a per-session bound is refused with a result naming the limit.
    """

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._max_sessions = max_sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = _Session()
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(session_id)
        return session

    def todos(self, session_id: str) -> list[dict[str, Any]]:
        """The session's latest todo list (a copy; empty when none)."""
        session = self._sessions.get(session_id)
        return list(session.todos) if session is not None else []

    def set_todos(self, session_id: str, todos: list[dict[str, Any]]) -> None:
        """Replace the session's todo list; ``ValueError`` past ``MAX_TODOS``."""
        if len(todos) > MAX_TODOS:
            raise ValueError(f"a todo list holds at most {MAX_TODOS} items")
        self._get(session_id).todos = list(todos)

    def memory(self, session_id: str) -> list[str]:
        """The session's unsaved memory entries (a copy)."""
        session = self._sessions.get(session_id)
        return list(session.memory) if session is not None else []

    def add_memory(self, session_id: str, content: str) -> int:
        """Keep one entry for the session; the number kept. ``ValueError`` when full."""
        entries = self._get(session_id).memory
        if len(entries) >= MAX_SESSION_MEMORY_ENTRIES:
            raise ValueError(
                f"this session's memory is full ({MAX_SESSION_MEMORY_ENTRIES} entries)"
            )
        entries.append(content)
        return len(entries)


class LoopRuntime(Protocol):
    """The loop's services a built-in tool may use (``stockade.agent.loop.AgentLoop``)."""

    @property
    def limits(self) -> LimitSettings:
        """The loop's limits (subagent depth, budgets)."""
        ...

    @property
    def hooks(self) -> HookPipeline:
        """The hook pipeline (lifecycle events)."""
        ...

    @property
    def skills(self) -> SkillLibrary | None:
        """The skills folder, when configured."""
        ...

    @property
    def memory(self) -> MemoryStore | None:
        """The durable memory, when configured."""
        ...

    @property
    def sessions(self) -> SessionState:
        """Per-session state of the built-in tools."""
        ...

    async def run(self, turn: TurnState, scope: AgentScope, messages: list[Message]) -> LoopResult:
        """Run an agent loop (a subagent's) to its end."""
        ...

    def apply_compaction(
        self, turn: TurnState, scope: AgentScope, messages: list[Message], result: CompactionResult
    ) -> None:
        """Replace the history by its compacted form and tell the stream."""
        ...


@dataclass(frozen=True)
class ToolContext:
    """One built-in call, with everything its handler may need."""

    turn: TurnState
    """The running turn (model, stream, cancellation)."""
    scope: AgentScope
    """The calling agent (lead or subagent)."""
    messages: list[Message]
    """The calling agent's history (compress_context rewrites it)."""
    arguments: Mapping[str, Any]
    """The call's arguments, already checked against the spec's schema."""
    loop: LoopRuntime
    """The loop's services."""


BuiltinHandler = Callable[[ToolContext], Awaitable[Outcome]]
"""Runs one call of a built-in tool."""


@dataclass(frozen=True)
class BuiltinTool:
    """A built-in tool: what the model sees and what runs, in one value."""

    spec: ToolSpec
    """Name, description, schema and traits (location BUILTIN)."""
    run: BuiltinHandler
    """The handler."""

    def __post_init__(self) -> None:
        if self.spec.location is not Location.BUILTIN:
            raise ValueError(f"built-in tool {self.spec.name} must be located BUILTIN")


def obj(required: Iterable[str] = (), **properties: Mapping[str, Any]) -> dict[str, Any]:
    """An object schema with ``properties`` and the ``required`` names."""
    return {"type": "object", "properties": dict(properties), "required": list(required)}


def seed_spec(name: str, description: str, parameters: dict[str, Any]) -> ToolSpec:
    """A seed tool's spec: description and schema from the caller, traits from the
    contract's table (``stockade.contract.tools``, shared with the decision service)."""
    t = SEED_TOOLS[name]
    return ToolSpec(
        name=name,
        description=description,
        parameters=parameters,
        interrupt_behavior=InterruptBehavior(t.interrupt.value),
        concurrency_safe=t.concurrency_safe,
        causes_sibling_abort=t.sibling_abort,
        read_only=t.read_only,
        location=Location(t.location.value),
        primary_content_field=t.primary_field,
    )
