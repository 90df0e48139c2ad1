"""The ReAct loop of one agent (the lead or a subagent): model step → tool calls through
the execution pipeline → results.

Each step is planned by the limits (max steps with one forced final answer, the shared
tree budget, diminishing returns, token soft/hard limits with compaction and its circuit
breaker, cancellation, denial halt); the calls of a step go through ``ExecutionPipeline``.
A call of a built-in tool goes to its handler (``stockade.agent.tools``: one module per
tool) with a ``ToolContext`` — the turn, the calling agent, its history and this loop.
Everything the loop reports goes out as typed events (``stockade.agent.events``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from stockade.agent.compaction import CompactionResult, Compactor, estimate_tokens
from stockade.agent.events import Compaction, Error, FinalAnswer, StepComplete, Text
from stockade.agent.hooks import HookPipeline
from stockade.agent.lifecycle import (
    LifecycleEvent,
    PostCompactDetails,
    PreCompactDetails,
    StepCompleteDetails,
)
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
from stockade.agent.memory import MemoryStore
from stockade.agent.outcome import ExecutionStatus, Outcome, error_outcome
from stockade.agent.pipeline import ExecutionPipeline, PendingCall
from stockade.agent.registry import BUILTIN_TOOLS
from stockade.agent.skills import SkillLibrary
from stockade.agent.subagent import AgentScope
from stockade.agent.tools import BuiltinTool, builtin_handlers
from stockade.agent.tools.base import SessionState, ToolContext
from stockade.agent.turn import LoopResult, TurnCancelled, TurnState
from stockade.llm.base import Message, ModelTurn, ProviderError, checked_turn

__all__ = ["AgentLoop"]


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
        builtins: Mapping[str, BuiltinTool] | None = None,
    ) -> None:
        self.limits = limits
        self.hooks = hooks
        self.pipeline = pipeline
        self.skills = skills
        self.memory = memory
        self.builtins = builtin_handlers() if builtins is None else builtins
        """The built-in tools this loop runs, by name."""
        self.sessions = SessionState()
        """Per-session state of the built-in tools."""

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
                    scope.session_id,
                    StepCompleteDetails(limiter.step, turn.tokens_used),
                    scope.name,
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
            await self.hooks.emit(LifecycleEvent(scope.session_id, PreCompactDetails(), scope.name))
            result = await compactor.auto(messages, target_tokens=target)
        if result is None:
            return LoopResult(
                Termination.COMPACTION_FAILED,
                f"compaction failed {compactor.breaker.failures} times in a row",
            )
        self.apply_compaction(turn, scope, messages, result)
        await self.hooks.emit(
            LifecycleEvent(
                scope.session_id,
                PostCompactDetails(result.kind, result.tokens_before, result.tokens_after),
                scope.name,
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
        name = item.call.name
        tool = self.builtins.get(name)
        if tool is None:
            if name in BUILTIN_TOOLS:
                return error_outcome(
                    f"Error: {name} is not available in this agent", "not available"
                )
            return error_outcome(f"Error: {name} is not a built-in tool", "not built in")
        return await tool.run(ToolContext(turn, scope, messages, item.arguments, self))
