"""The ReAct loop: model step → tool calls through the execution pipeline → results.

``AgentCore.run_turn`` streams one turn's events. The turn runs in a task that puts events
on a queue, so that events of parallel calls, approvals and subagents reach the stream
as they happen; the last event is always ``terminated`` with the reason (AGT-6), and the
SESSION_STOP audit row (through the AuditLog hook) names the same reason.

Each step is planned by the limits (max steps with one forced final answer, the shared
tree budget, diminishing returns, token soft/hard limits with compaction and its circuit
breaker, cancellation, denial halt); the calls of a step go through ``ExecutionPipeline``.
Built-in tools (subagent, ask_user, todo_write, compress_context, load_skill, save_memory)
run here; ``load_skill`` is offered only with a skills folder, and ``save_memory`` persists
only with a memory folder, whose entries then open every later turn's system prompt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from opentelemetry import trace

from stockade.agent.builtin_hooks import AuditSink, CancelRegistry, CancelToken, standard_hooks
from stockade.agent.compaction import CompactionError, CompactionResult, Compactor, estimate_tokens
from stockade.agent.events import EventFactory
from stockade.agent.hooks import Hook, HookPipeline, LifecycleEvent, LifecycleKind
from stockade.agent.limits import (
    DIMINISHING_REMINDER,
    FORCED_ANSWER_REMINDER,
    Budget,
    CompactionCircuitBreaker,
    DiminishingReturns,
    DuplicateDetector,
    LimitSettings,
    StepLimiter,
    StepPlan,
    Termination,
    TokenBudget,
    TokenState,
)
from stockade.agent.memory import MemoryRefused, MemoryStore, check_content, prompt_section
from stockade.agent.pipeline import (
    Emit,
    ExecutionPipeline,
    Outcome,
    PendingCall,
    denied_outcome,
    error_outcome,
)
from stockade.agent.registry import BUILTIN_TOOLS, Location, ToolRegistry, default_registry
from stockade.agent.remote_tools import ToolProviderClient, discover
from stockade.agent.skills import SkillError, SkillLibrary
from stockade.agent.subagent import (
    AgentScope,
    initial_messages,
    parse_request,
    spawn_scope,
)
from stockade.client.decision import DecisionClient
from stockade.client.executor import ExecutorClient
from stockade.errors import FailedPrecondition, StockadeError
from stockade.llm.base import (
    Message,
    ModelTurn,
    Provider,
    ProviderError,
    checked_turn,
)
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

log = logging.getLogger(__name__)

SYSTEM_PROMPT = "You are a careful assistant. Use tools only when needed."
UNAVAILABLE_BUILTINS = frozenset({"load_skill"})
"""Built-ins that need configuration (load_skill: a skills folder); without it they are
never offered to the model."""


def offered_registry(
    registry: ToolRegistry, unavailable: frozenset[str] = UNAVAILABLE_BUILTINS
) -> ToolRegistry:
    """The tools worth offering: remote tools need a provider, built-ins an implementation."""
    drop = [
        spec.name
        for spec in registry
        if (spec.location is Location.REMOTE and not spec.provider) or spec.name in unavailable
    ]
    return registry.without(drop)


class TurnCancelled(Exception):
    """The user cancelled the turn while the model was answering."""


@dataclass
class LoopResult:
    """How one agent loop (lead or subagent) ended."""

    reason: Termination
    """Why."""
    detail: str
    """Details for the stream and the audit row."""
    answer: str = ""
    """The final answer, if any."""
    steps: int = 0
    """Steps run."""


@dataclass
class _Turn:
    """State shared by the loops of one turn (the lead and its subagents)."""

    session_id: str
    provider: Provider
    emit: Emit
    cancel: CancelToken
    tokens_used: int = 0


class AgentCore:
    """Runs turns against a provider and the three other services."""

    def __init__(
        self,
        *,
        decision: DecisionClient,
        executor: ExecutorClient,
        audit: AuditSink,
        provider_for: Callable[[str], Provider],
        max_steps: int = 8,
        registry: ToolRegistry | None = None,
        hooks: Sequence[Hook] = (),
        tool_providers: Mapping[str, ToolProviderClient] | None = None,
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
        self._running: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._todos: dict[str, list[dict[str, Any]]] = {}
        self._memory: dict[str, list[str]] = {}

    # ------------------------------------------------------------ public API

    def cancel(self, session_id: str) -> bool:
        """Cancel the session's running turn; False when none is running."""
        return self.cancels.cancel(session_id)

    async def resolve_approval(
        self, request: d_pb2.ResolveApprovalRequest, *, authorization: str = ""
    ) -> d_pb2.ResolveApprovalResponse:
        """Pass an approval answer to the decision service with the caller's credentials."""
        metadata = (("authorization", authorization),) if authorization else None
        if metadata is None:
            return await self.decision.resolve_approval(request)
        call = self.decision.stub.ResolveApproval(request, timeout=5.0, metadata=metadata)
        response: d_pb2.ResolveApprovalResponse = await call  # type: ignore[misc]
        return response

    async def run_turn(
        self,
        session_id: str,
        message: str,
        script: str = "",
        mode: c_pb2.PermissionMode.ValueType = c_pb2.PERMISSION_MODE_UNSPECIFIED,
    ) -> AsyncIterator[a_pb2.RunTurnResponse]:
        """Run one turn and yield its events; the last is always ``terminated``."""
        if session_id in self._running:
            raise FailedPrecondition(f"a turn is already running for session {session_id!r}")
        provider = self.provider_for(script)  # bad script names fail before streaming
        self._running.add(session_id)
        queue: asyncio.Queue[a_pb2.RunTurnResponse | None] = asyncio.Queue()
        events = EventFactory(session_id)

        def emit(agent_name: str, **event: Any) -> None:
            queue.put_nowait(events.make(agent_name, **event))

        cancel = self.cancels.begin(session_id)
        turn = _Turn(session_id, provider, emit, cancel)
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

    async def _turn(self, turn: _Turn, message: str, mode: int) -> None:
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
            await self.hooks.emit(LifecycleEvent(LifecycleKind.SESSION_START, turn.session_id))
            messages = [Message("system", await self._system_prompt()), Message("user", message)]
            result = await self._loop(turn, scope, messages)
        except Exception as exc:  # the stream must always end with `terminated`
            log.exception("turn of %s failed", turn.session_id)
            turn.emit("lead", error={"message": f"internal error: {type(exc).__name__}"})
            result = LoopResult(Termination.ERROR, f"internal error: {type(exc).__name__}")
        finally:
            await self.hooks.emit(
                LifecycleEvent(
                    LifecycleKind.SESSION_STOP,
                    turn.session_id,
                    details={
                        "reason": result.reason.value,
                        "detail": result.detail,
                        "step": result.steps,
                    },
                )
            )
            turn.emit(
                "lead",
                terminated={
                    "reason": a_pb2.TerminationReason.Value(
                        f"TERMINATION_REASON_{result.reason.value}"
                    ),
                    "detail": result.detail,
                },
            )
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
        except grpc.aio.AioRpcError as err:
            log.warning("could not create session %s: %s", session_id, err.code().name)

    async def _discover_tools(self) -> None:
        pending = [c for a, c in self.tool_providers.items() if a not in self._discovered]
        if pending:
            found = await discover(self.registry, pending)
            self._discovered.update(found)

    async def _loop(self, turn: _Turn, scope: AgentScope, messages: list[Message]) -> LoopResult:
        """One agent's ReAct loop (the lead or a subagent)."""
        limits = self.limits
        limiter = StepLimiter(scope.max_steps)
        duplicates = DuplicateDetector(limits.duplicate_threshold)
        tokens = TokenBudget(limits.token_soft_limit, limits.token_hard_limit)
        diminishing = DiminishingReturns(limits.diminishing_steps)
        compactor = Compactor(
            turn.provider, CompactionCircuitBreaker(limits.compaction_max_failures)
        )
        tools = scope.registry.schemas()
        forced: tuple[Termination, str, str] | None = None
        ratio = 1.0  # provider tokens per estimated token, learnt from usage
        while True:
            if turn.cancel.is_set():
                return LoopResult(Termination.CANCELLED, "cancelled by the user", "", limiter.step)
            if forced is None:
                plan = limiter.next_step(scope.budget)
                if plan is StepPlan.FORCED_FINAL:
                    detail = (
                        f"the step limit ({scope.max_steps}) was reached"
                        if limiter.step > scope.max_steps
                        else "the agent tree's step budget is spent"
                    )
                    forced = (Termination.MAX_STEPS, FORCED_ANSWER_REMINDER, detail)
                elif plan is StepPlan.STOP:
                    return LoopResult(Termination.MAX_STEPS, "step limit", "", limiter.step)
            if forced is not None:
                return await self._forced_answer(turn, scope, messages, forced, limiter.step)
            try:
                model_turn = await self._complete(turn, messages, tools, allow_tools=True)
            except TurnCancelled:
                return LoopResult(Termination.CANCELLED, "cancelled by the user", "", limiter.step)
            except ProviderError as exc:
                turn.emit(scope.name, error={"message": f"provider error: {exc}"})
                return LoopResult(Termination.ERROR, f"provider error: {exc}", "", limiter.step)
            model_turn = checked_turn(model_turn)  # a too-deep call fails alone, later
            used = model_turn.prompt_tokens + model_turn.completion_tokens
            scope.budget.spend_tokens(used)
            turn.tokens_used += used
            if model_turn.prompt_tokens:
                ratio = max(1.0, model_turn.prompt_tokens / max(1, estimate_tokens(messages)))
            if model_turn.text and not scope.silent:
                turn.emit(scope.name, text={"text": model_turn.text})
            if not model_turn.tool_calls:
                if not scope.silent:
                    turn.emit(scope.name, final_answer={"text": model_turn.text})
                return LoopResult(
                    Termination.COMPLETED, "final answer", model_turn.text, limiter.step
                )
            messages.append(Message("assistant", model_turn.text, tool_calls=model_turn.tool_calls))

            async def builtin(item: PendingCall) -> Outcome:
                return await self._builtin(turn, scope, messages, item)

            outcomes = await self.pipeline.run_step(
                scope,
                limiter.step,
                model_turn.tool_calls,
                duplicates=duplicates,
                cancel=turn.cancel,
                emit=turn.emit,
                builtin=builtin,
            )
            for call, outcome in zip(model_turn.tool_calls, outcomes, strict=True):
                messages.append(
                    Message("tool", outcome.content, tool_call_id=call.id, name=call.name)
                )
            turn.emit(
                scope.name,
                step_complete={"step": limiter.step, "tokens_used": turn.tokens_used},
            )
            await self.hooks.emit(
                LifecycleEvent(
                    LifecycleKind.STEP_COMPLETE,
                    scope.session_id,
                    scope.name,
                    {"step": limiter.step, "tokens_used": turn.tokens_used},
                )
            )
            halted = next((o for o in outcomes if o.halt), None)
            if halted is not None:
                detail = halted.halt_reason or "the denial limit was reached"
                return LoopResult(Termination.DENIAL_HALT, detail, "", limiter.step)
            if turn.cancel.is_set():
                return LoopResult(Termination.CANCELLED, "cancelled by the user", "", limiter.step)
            asked = next((o for o in outcomes if o.ends_turn), None)
            if asked is not None:
                turn.emit(scope.name, final_answer={"text": asked.content})
                return LoopResult(
                    Termination.COMPLETED, "waiting for the user", asked.content, limiter.step
                )
            if diminishing.observe(
                [o.content for o in outcomes],
                errors=[o.status != x_pb2.EXECUTION_STATUS_OK for o in outcomes],
            ):
                forced = (
                    Termination.DIMINISHING_RETURNS,
                    DIMINISHING_REMINDER,
                    f"{limits.diminishing_steps} steps in a row added no new information",
                )
                continue
            stop = await self._manage_tokens(turn, scope, messages, tokens, compactor, ratio)
            if stop is not None:
                stop.steps = limiter.step
                return stop

    async def _complete(
        self, turn: _Turn, messages: list[Message], tools: list[Any], *, allow_tools: bool
    ) -> ModelTurn:
        """Ask the model, giving up at once if the turn is cancelled meanwhile."""
        task = asyncio.ensure_future(
            turn.provider.complete(list(messages), tools, allow_tools=allow_tools)
        )
        with turn.cancel.watch(task):
            try:
                return await task
            except asyncio.CancelledError:
                if task.cancelled() and turn.cancel.is_set():
                    raise TurnCancelled from None
                raise

    async def _forced_answer(
        self,
        turn: _Turn,
        scope: AgentScope,
        messages: list[Message],
        forced: tuple[Termination, str, str],
        steps: int,
    ) -> LoopResult:
        """One last model call without tools, after a reminder; then the turn ends."""
        reason, reminder, detail = forced
        messages.append(Message("user", reminder))
        try:
            model_turn = await self._complete(turn, messages, [], allow_tools=False)
        except TurnCancelled:
            return LoopResult(Termination.CANCELLED, "cancelled by the user", "", steps)
        except ProviderError as exc:
            turn.emit(scope.name, error={"message": f"provider error: {exc}"})
            return LoopResult(reason, f"{detail}; the final answer failed: {exc}", "", steps)
        used = model_turn.prompt_tokens + model_turn.completion_tokens
        scope.budget.spend_tokens(used)
        turn.tokens_used += used
        if not scope.silent:
            turn.emit(scope.name, final_answer={"text": model_turn.text})
        return LoopResult(reason, detail, model_turn.text, steps)

    async def _manage_tokens(
        self,
        turn: _Turn,
        scope: AgentScope,
        messages: list[Message],
        tokens: TokenBudget,
        compactor: Compactor,
        ratio: float,
    ) -> LoopResult | None:
        """Nudge at the soft limit; compact (or end) at the hard limit."""
        if scope.budget.remaining_tokens <= 0:
            return LoopResult(Termination.TOKEN_BUDGET, "the agent tree's token budget is spent")
        context = int(estimate_tokens(messages) * ratio)
        state = tokens.state(context)
        if state is TokenState.SOFT:
            nudge = tokens.nudge(context)
            if nudge:
                messages.append(Message("user", nudge))
            return None
        if state is TokenState.OK:
            return None
        target = int(tokens.soft_limit / ratio)
        result: CompactionResult | None = None
        while result is None and not compactor.breaker.open:
            await self.hooks.emit(
                LifecycleEvent(LifecycleKind.PRE_COMPACT, scope.session_id, scope.name)
            )
            result = await compactor.auto(messages, target_tokens=target)
        if result is None:
            return LoopResult(
                Termination.COMPACTION_FAILED,
                f"compaction failed {compactor.breaker.failures} times in a row",
            )
        self._apply_compaction(turn, scope, messages, result)
        await self.hooks.emit(
            LifecycleEvent(
                LifecycleKind.POST_COMPACT,
                scope.session_id,
                scope.name,
                {
                    "kind": result.kind,
                    "tokens_before": result.tokens_before,
                    "tokens_after": result.tokens_after,
                },
            )
        )
        if tokens.state(int(result.tokens_after * ratio)) is TokenState.HARD:
            return LoopResult(
                Termination.TOKEN_BUDGET,
                f"the context is still above the hard limit ({tokens.hard_limit}) after compaction",
            )
        return None

    def _apply_compaction(
        self, turn: _Turn, scope: AgentScope, messages: list[Message], result: CompactionResult
    ) -> None:
        messages[:] = result.messages
        turn.emit(
            scope.name,
            compaction={
                "kind": result.kind,
                "tokens_before": result.tokens_before,
                "tokens_after": result.tokens_after,
            },
        )

    # ------------------------------------------------------------ built-in tools

    async def _builtin(
        self, turn: _Turn, scope: AgentScope, messages: list[Message], item: PendingCall
    ) -> Outcome:
        name, args = item.call.name, item.arguments
        ok = x_pb2.EXECUTION_STATUS_OK
        allow = c_pb2.VERDICT_ALLOW
        if name == "subagent":
            return await self._subagent(turn, scope, item)
        if name == "ask_user":
            question = str(args.get("question", ""))
            return Outcome(ok, allow, question, "question for the user", ends_turn=True)
        if name == "todo_write":
            todos = list(args.get("todos", []))
            self._todos[scope.session_id] = todos
            done = sum(1 for t in todos if t.get("status") == "completed")
            return Outcome(ok, allow, f"Todo list updated: {len(todos)} items, {done} completed.")
        if name == "save_memory":
            return await self._save_memory(scope, str(args.get("content", "")))
        if name == "load_skill" and self.skills is not None:
            try:
                text = await asyncio.to_thread(self.skills.load, str(args.get("name", "")))
            except SkillError as exc:
                return error_outcome(exc.message, "skill not loaded")
            return Outcome(ok, allow, text)
        if name == "compress_context":
            await self.hooks.emit(
                LifecycleEvent(LifecycleKind.PRE_COMPACT, scope.session_id, scope.name)
            )
            compactor = Compactor(turn.provider)
            try:
                result = await compactor.manual(messages)
            except CompactionError as exc:
                return error_outcome(f"Error: {exc}", str(exc))
            self._apply_compaction(turn, scope, messages, result)
            await self.hooks.emit(
                LifecycleEvent(
                    LifecycleKind.POST_COMPACT, scope.session_id, scope.name, {"kind": "manual"}
                )
            )
            return Outcome(
                ok,
                allow,
                f"Context compacted from about {result.tokens_before} to "
                f"{result.tokens_after} tokens.",
            )
        if name in BUILTIN_TOOLS:
            return error_outcome(f"Error: {name} is not available in this agent", "not available")
        return error_outcome(f"Error: {name} is not a built-in tool", "not built in")

    async def _save_memory(self, scope: AgentScope, content: str) -> Outcome:
        ok, allow = x_pb2.EXECUTION_STATUS_OK, c_pb2.VERDICT_ALLOW
        try:
            if self.memory is None:
                entries = self._memory.setdefault(scope.session_id, [])
                entries.append(check_content(content))
                return Outcome(
                    ok,
                    allow,
                    f"Saved to this session's memory ({len(entries)} entries) "
                    "(not persisted: no memory_dir configured).",
                )
            saved = await asyncio.to_thread(
                self.memory.append, session_id=scope.session_id, agent=scope.name, content=content
            )
        except MemoryRefused as exc:
            return error_outcome(exc.message, "memory not saved")
        masked = " Secrets in it were masked." if saved.masked else ""
        return Outcome(
            ok,
            allow,
            f"Saved to memory ({saved.bytes_used} of {self.memory.max_file_bytes} bytes used); "
            f"later sessions will see it.{masked}",
        )

    async def _subagent(self, turn: _Turn, parent: AgentScope, item: PendingCall) -> Outcome:
        try:
            request = parse_request(item.arguments)
            child = spawn_scope(parent, request, max_depth=self.limits.max_subagent_depth)
        except StockadeError as exc:
            return denied_outcome(exc.message)
        turn.emit(
            parent.name,
            subagent_started={
                "agent_name": child.name,
                "profile": child.profile,
                "task": request.task,
            },
        )
        details = {"profile": child.profile, "task": request.task}
        await self.hooks.emit(
            LifecycleEvent(LifecycleKind.SUBAGENT_START, child.session_id, child.name, details)
        )
        result = await self._loop(turn, child, initial_messages(child, request))
        reason = a_pb2.TerminationReason.Value(f"TERMINATION_REASON_{result.reason.value}")
        turn.emit(
            parent.name,
            subagent_stopped={"agent_name": child.name, "reason": reason, "answer": result.answer},
        )
        await self.hooks.emit(
            LifecycleEvent(
                LifecycleKind.SUBAGENT_STOP,
                child.session_id,
                child.name,
                {"reason": result.reason.value, "detail": result.detail},
            )
        )
        if result.reason is Termination.COMPLETED:
            return Outcome(x_pb2.EXECUTION_STATUS_OK, c_pb2.VERDICT_ALLOW, result.answer)
        outcome = Outcome(
            x_pb2.EXECUTION_STATUS_ERROR,
            c_pb2.VERDICT_ALLOW,
            f"Subagent {child.name} stopped ({result.reason.value}: {result.detail})."
            + (f" Partial answer: {result.answer}" if result.answer else ""),
            result.detail,
        )
        if result.reason is Termination.DENIAL_HALT:
            outcome.halt, outcome.halt_reason = True, result.detail
        return outcome
