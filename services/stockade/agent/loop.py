"""The ReAct loop of one agent (the lead or a subagent): model step → tool calls through
the execution pipeline → results.

Each step is planned by the limits (max steps with one forced final answer, the shared
tree budget, diminishing returns, token soft/hard limits with compaction and its circuit
breaker, cancellation, denial halt); the calls of a step go through ``ExecutionPipeline``.
Built-in tools (subagent, ask_user, todo_write, compress_context, load_skill, save_memory)
run here; ``load_skill`` is offered only with a skills folder, and ``save_memory`` persists
only with a memory folder, whose entries then open every later turn's system prompt.
Everything the loop reports goes out as typed events (``stockade.agent.events``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stockade.agent.builtin_hooks import CancelToken
from stockade.agent.compaction import CompactionError, CompactionResult, Compactor, estimate_tokens
from stockade.agent.events import (
    Compaction,
    Emit,
    Error,
    FinalAnswer,
    StepComplete,
    SubagentStarted,
    SubagentStopped,
    Text,
)
from stockade.agent.hooks import HookPipeline, LifecycleEvent, LifecycleKind
from stockade.agent.limits import (
    DIMINISHING_REMINDER,
    FORCED_ANSWER_REMINDER,
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
from stockade.agent.memory import MemoryRefused, MemoryStore, check_content
from stockade.agent.outcome import (
    ExecutionStatus,
    Outcome,
    Verdict,
    denied_outcome,
    error_outcome,
    ok_outcome,
)
from stockade.agent.pipeline import ExecutionPipeline, PendingCall
from stockade.agent.registry import BUILTIN_TOOLS
from stockade.agent.skills import SkillError, SkillLibrary
from stockade.agent.subagent import AgentScope, initial_messages, parse_request, spawn_scope
from stockade.errors import StockadeError
from stockade.llm.base import Message, ModelTurn, Provider, ProviderError, checked_turn

__all__ = ["AgentLoop", "LoopResult", "TurnCancelled", "TurnState"]


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
class TurnState:
    """State shared by the loops of one turn (the lead and its subagents)."""

    session_id: str
    """The turn's session."""
    provider: Provider
    """The model."""
    emit: Emit
    """Puts an event on the turn's stream."""
    cancel: CancelToken
    """Set when the user cancels the turn."""
    tokens_used: int = 0
    """Tokens the model used in this turn so far (all agents)."""


class AgentLoop:
    """Runs one agent's ReAct loop; subagents run the same loop, nested."""

    def __init__(
        self,
        *,
        limits: LimitSettings,
        hooks: HookPipeline,
        pipeline: ExecutionPipeline,
        skills: SkillLibrary | None = None,
        memory: MemoryStore | None = None,
    ) -> None:
        self.limits = limits
        self.hooks = hooks
        self.pipeline = pipeline
        self.skills = skills
        self.memory = memory
        self._todos: dict[str, list[dict[str, Any]]] = {}
        self._memory: dict[str, list[str]] = {}

    async def run(self, turn: TurnState, scope: AgentScope, messages: list[Message]) -> LoopResult:
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
                turn.emit(scope.name, Error(f"provider error: {exc}"))
                return LoopResult(Termination.ERROR, f"provider error: {exc}", "", limiter.step)
            model_turn = checked_turn(model_turn)  # a too-deep call fails alone, later
            used = model_turn.prompt_tokens + model_turn.completion_tokens
            scope.budget.spend_tokens(used)
            turn.tokens_used += used
            if model_turn.prompt_tokens:
                ratio = max(1.0, model_turn.prompt_tokens / max(1, estimate_tokens(messages)))
            if model_turn.text and not scope.silent:
                turn.emit(scope.name, Text(model_turn.text))
            if not model_turn.tool_calls:
                if not scope.silent:
                    turn.emit(scope.name, FinalAnswer(model_turn.text))
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
            turn.emit(scope.name, StepComplete(limiter.step, turn.tokens_used))
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
                turn.emit(scope.name, FinalAnswer(asked.content))
                return LoopResult(
                    Termination.COMPLETED, "waiting for the user", asked.content, limiter.step
                )
            if diminishing.observe(
                [o.content for o in outcomes],
                errors=[o.status is not ExecutionStatus.OK for o in outcomes],
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
        self, turn: TurnState, messages: list[Message], tools: Sequence[Any], *, allow_tools: bool
    ) -> ModelTurn:
        """Ask the model, giving up at once if the turn is cancelled meanwhile."""
        task = asyncio.ensure_future(
            turn.provider.complete(list(messages), list(tools), allow_tools=allow_tools)
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
        turn: TurnState,
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
            turn.emit(scope.name, Error(f"provider error: {exc}"))
            return LoopResult(reason, f"{detail}; the final answer failed: {exc}", "", steps)
        used = model_turn.prompt_tokens + model_turn.completion_tokens
        scope.budget.spend_tokens(used)
        turn.tokens_used += used
        if not scope.silent:
            turn.emit(scope.name, FinalAnswer(model_turn.text))
        return LoopResult(reason, detail, model_turn.text, steps)

    async def _manage_tokens(
        self,
        turn: TurnState,
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
        self.apply_compaction(turn, scope, messages, result)
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

    @staticmethod
    def apply_compaction(
        turn: TurnState, scope: AgentScope, messages: list[Message], result: CompactionResult
    ) -> None:
        """Replace the history by its compacted form and tell the stream."""
        messages[:] = result.messages
        turn.emit(scope.name, Compaction(result.kind, result.tokens_before, result.tokens_after))

    # ------------------------------------------------------------ built-in tools

    async def _builtin(
        self, turn: TurnState, scope: AgentScope, messages: list[Message], item: PendingCall
    ) -> Outcome:
        name, args = item.call.name, item.arguments
        if name == "subagent":
            return await self._subagent(turn, scope, item)
        if name == "ask_user":
            question = str(args.get("question", ""))
            return Outcome(
                ExecutionStatus.OK,
                Verdict.ALLOW,
                question,
                "question for the user",
                ends_turn=True,
            )
        if name == "todo_write":
            todos = list(args.get("todos", []))
            self._todos[scope.session_id] = todos
            done = sum(1 for t in todos if t.get("status") == "completed")
            return ok_outcome(f"Todo list updated: {len(todos)} items, {done} completed.")
        if name == "save_memory":
            return await self._save_memory(scope, str(args.get("content", "")))
        if name == "load_skill" and self.skills is not None:
            try:
                text = await asyncio.to_thread(self.skills.load, str(args.get("name", "")))
            except SkillError as exc:
                return error_outcome(exc.message, "skill not loaded")
            return ok_outcome(text)
        if name == "compress_context":
            await self.hooks.emit(
                LifecycleEvent(LifecycleKind.PRE_COMPACT, scope.session_id, scope.name)
            )
            compactor = Compactor(turn.provider)
            try:
                result = await compactor.manual(messages)
            except CompactionError as exc:
                return error_outcome(f"Error: {exc}", str(exc))
            self.apply_compaction(turn, scope, messages, result)
            await self.hooks.emit(
                LifecycleEvent(
                    LifecycleKind.POST_COMPACT, scope.session_id, scope.name, {"kind": "manual"}
                )
            )
            return ok_outcome(
                f"Context compacted from about {result.tokens_before} to "
                f"{result.tokens_after} tokens."
            )
        if name in BUILTIN_TOOLS:
            return error_outcome(f"Error: {name} is not available in this agent", "not available")
        return error_outcome(f"Error: {name} is not a built-in tool", "not built in")

    async def _save_memory(self, scope: AgentScope, content: str) -> Outcome:
        try:
            if self.memory is None:
                entries = self._memory.setdefault(scope.session_id, [])
                entries.append(check_content(content))
                return ok_outcome(
                    f"Saved to this session's memory ({len(entries)} entries) "
                    "(not persisted: no memory_dir configured)."
                )
            saved = await asyncio.to_thread(
                self.memory.append, session_id=scope.session_id, agent=scope.name, content=content
            )
        except MemoryRefused as exc:
            return error_outcome(exc.message, "memory not saved")
        masked = " Secrets in it were masked." if saved.masked else ""
        return ok_outcome(
            f"Saved to memory ({saved.bytes_used} of {self.memory.max_file_bytes} bytes used); "
            f"later sessions will see it.{masked}"
        )

    async def _subagent(self, turn: TurnState, parent: AgentScope, item: PendingCall) -> Outcome:
        try:
            request = parse_request(item.arguments)
            child = spawn_scope(parent, request, max_depth=self.limits.max_subagent_depth)
        except StockadeError as exc:
            return denied_outcome(exc.message)
        turn.emit(parent.name, SubagentStarted(child.name, child.profile, request.task))
        details = {"profile": child.profile, "task": request.task}
        await self.hooks.emit(
            LifecycleEvent(LifecycleKind.SUBAGENT_START, child.session_id, child.name, details)
        )
        result = await self.run(turn, child, initial_messages(child, request))
        turn.emit(parent.name, SubagentStopped(child.name, result.reason, result.answer))
        await self.hooks.emit(
            LifecycleEvent(
                LifecycleKind.SUBAGENT_STOP,
                child.session_id,
                child.name,
                {"reason": result.reason.value, "detail": result.detail},
            )
        )
        if result.reason is Termination.COMPLETED:
            return ok_outcome(result.answer)
        outcome = Outcome(
            ExecutionStatus.ERROR,
            Verdict.ALLOW,
            f"Subagent {child.name} stopped ({result.reason.value}: {result.detail})."
            + (f" Partial answer: {result.answer}" if result.answer else ""),
            result.detail,
        )
        if result.reason is Termination.DENIAL_HALT:
            outcome.halt, outcome.halt_reason = True, result.detail
        return outcome
