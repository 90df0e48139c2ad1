"""The agent's core: the only object the servicer calls, one method per RPC.

``AgentCore.run_turn`` streams one turn's events (typed, ``stockade.agent.events``). The
turn runs in a task that puts events on a queue, so that events of parallel calls,
approvals and subagents reach the stream as they happen; the last event is always
``Terminated`` with the reason (AGT-6), and the SESSION_STOP audit row (through the
AuditLog hook) names the same reason. ``cancel`` marks a running turn cancelled;
``resolve_approval`` passes an answer to the decision service with the caller's own
credentials. The loop itself is ``stockade.agent.loop.AgentLoop``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

from opentelemetry import trace

from stockade.agent.builtin_hooks import AuditSink, CancelRegistry, standard_hooks
from stockade.agent.events import AgentEvent, Error, EventFactory, Terminated, TurnEvent
from stockade.agent.hooks import Hook, HookPipeline
from stockade.agent.lifecycle import LifecycleEvent, SessionStartDetails, SessionStopDetails
from stockade.agent.limits import Budget, LimitSettings, Termination
from stockade.agent.loop import AgentLoop
from stockade.agent.memory import MemoryStore, prompt_section
from stockade.agent.pipeline import ExecutionPipeline
from stockade.agent.ports import DecisionPort, ExecutorPort, ToolProviderPort, discover
from stockade.agent.registry import (
    UNAVAILABLE_BUILTINS,
    Location,
    ToolRegistry,
    offered_registry,
)
from stockade.agent.skills import SkillLibrary
from stockade.agent.subagent import AgentScope
from stockade.agent.tools import default_registry
from stockade.agent.turn import LoopResult, TurnState
from stockade.client.errors import ServiceError
from stockade.errors import FailedPrecondition
from stockade.llm.base import Message, Provider
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

log = logging.getLogger(__name__)

SYSTEM_PROMPT = "You are a careful assistant. Use tools only when needed."


class AgentCore:
    """Runs turns against a provider and the three other services."""

    def __init__(
        self,
        *,
        decision: DecisionPort,
        executor: ExecutorPort,
        audit: AuditSink,
        provider_for: Callable[[str], Provider],
        max_steps: int = 8,
        registry: ToolRegistry | None = None,
        hooks: Sequence[Hook] = (),
        tool_providers: Mapping[str, ToolProviderPort] | None = None,
        limits: LimitSettings | None = None,
        approval_wait_s: float = 130.0,
        tool_timeout_s: float = 130.0,
        max_output_chars: int = 16_000,
        persist_dir: Path | None = None,
        tracer: trace.Tracer | None = None,
        skills: SkillLibrary | None = None,
        memory: MemoryStore | None = None,
    ) -> None:
        self.decision = decision
        self.executor = executor
        self.audit = audit
        self.provider_for = provider_for
        self.limits = limits or LimitSettings(max_steps=max_steps)
        self.max_steps = self.limits.max_steps
        self.registry = registry or default_registry()
        self.skills = skills
        self.memory = memory
        self._unavailable = UNAVAILABLE_BUILTINS
        if skills is not None:
            self._unavailable = frozenset()
            if "load_skill" in self.registry:
                spec = self.registry.get("load_skill")
                if spec.location is Location.BUILTIN:
                    described = dataclasses.replace(spec, description=skills.description())
                    self.registry.register(described, replace=True)
        self.tool_providers = dict(tool_providers or {})
        self._discovered: set[str] = set()
        self.cancels = CancelRegistry()
        self.hooks = HookPipeline(
            standard_hooks(
                self.cancels,
                audit,
                extra=list(hooks),
                max_output_chars=max_output_chars,
                persist_dir=persist_dir,
            )
        )
        self.pipeline = ExecutionPipeline(
            decision=decision,
            executor=executor,
            providers=self.tool_providers,
            approval_wait_s=approval_wait_s,
            tool_timeout_s=tool_timeout_s,
            tracer=tracer,
        )
        self.loop = AgentLoop(
            limits=self.limits,
            hooks=self.hooks,
            pipeline=self.pipeline,
            skills=skills,
            memory=memory,
        )
        self._running: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ RPCs

    def cancel(self, session_id: str) -> bool:
        """Cancel the session's running turn; False when none is running."""
        return self.cancels.cancel(session_id)

    async def resolve_approval(
        self, request: d_pb2.ResolveApprovalRequest, *, authorization: str = ""
    ) -> d_pb2.ResolveApprovalResponse:
        """Pass an approval answer to the decision service with the caller's credentials
        (they replace the client's own for this call; the client's deadline applies)."""
        metadata = (("authorization", authorization),) if authorization else None
        return await self.decision.resolve_approval(request, metadata=metadata)

    async def run_turn(
        self,
        session_id: str,
        message: str,
        script: str = "",
        mode: c_pb2.PermissionMode.ValueType = c_pb2.PERMISSION_MODE_UNSPECIFIED,
    ) -> AsyncIterator[TurnEvent]:
        """Run one turn and yield its events; the last is always ``Terminated``."""
        if session_id in self._running:
            raise FailedPrecondition(f"a turn is already running for session {session_id!r}")
        provider = self.provider_for(script)  # bad script names fail before streaming
        self._running.add(session_id)
        queue: asyncio.Queue[TurnEvent | None] = asyncio.Queue()
        events = EventFactory(session_id)

        def emit(agent_name: str, event: AgentEvent) -> None:
            queue.put_nowait(events.make(agent_name, event))

        cancel = self.cancels.begin(session_id)
        turn = TurnState(session_id, provider, emit, cancel)
        task = asyncio.create_task(self._turn(turn, message, mode))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                yield item
        finally:
            if not task.done():
                # The caller went away: cancel like a user would; BLOCK tools still finish.
                cancel.set()
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------ the turn

    async def _turn(self, turn: TurnState, message: str, mode: int) -> None:
        result = LoopResult(Termination.ERROR, "the turn did not start")
        try:
            await self._prepare_session(turn.session_id, mode)
            await self._discover_tools()
            scope = AgentScope(
                name="lead",
                session_id=turn.session_id,
                registry=offered_registry(self.registry, self._unavailable),
                hooks=self.hooks,
                budget=Budget(
                    max_steps=self.limits.tree_max_steps, max_tokens=self.limits.tree_max_tokens
                ),
                max_steps=self.limits.max_steps,
            )
            await self.hooks.emit(LifecycleEvent(turn.session_id, SessionStartDetails()))
            messages = [Message("system", await self._system_prompt()), Message("user", message)]
            result = await self.loop.run(turn, scope, messages)
        except Exception as exc:  # the stream must always end with `terminated`
            log.exception("turn of %s failed", turn.session_id)
            turn.emit("lead", Error(f"internal error: {type(exc).__name__}"))
            result = LoopResult(Termination.ERROR, f"internal error: {type(exc).__name__}")
        finally:
            await self.hooks.emit(
                LifecycleEvent(
                    turn.session_id,
                    SessionStopDetails(result.reason, result.detail, result.steps),
                )
            )
            turn.emit("lead", Terminated(result.reason, result.detail))
            self.cancels.end(turn.session_id)
            self._running.discard(turn.session_id)

    async def _system_prompt(self) -> str:
        """The lead's system prompt, with the saved memory (newest that fits) appended."""
        if self.memory is None:
            return SYSTEM_PROMPT
        try:
            entries = await asyncio.to_thread(self.memory.load)
        except OSError as exc:  # the turn still runs, only without memory
            log.warning("saved memory could not be read: %s", exc.strerror)
            return SYSTEM_PROMPT
        section = prompt_section(entries)
        return f"{SYSTEM_PROMPT}\n\n{section}" if section else SYSTEM_PROMPT

    async def _prepare_session(self, session_id: str, mode: int) -> None:
        """Create the decision session with the requested mode (best effort: Decide
        creates unknown sessions itself, and fails closed if the service is down)."""
        if mode == c_pb2.PERMISSION_MODE_UNSPECIFIED:
            return
        try:
            await self.decision.create_session(session_id, mode)
        except ServiceError as err:
            log.warning("could not create session %s: %s", session_id, err.code)

    async def _discover_tools(self) -> None:
        pending = [c for a, c in self.tool_providers.items() if a not in self._discovered]
        if pending:
            found = await discover(self.registry, pending)
            self._discovered.update(found)
