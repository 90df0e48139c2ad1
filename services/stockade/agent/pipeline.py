"""The execution pipeline of one model step (AGT-7).

validate and prepare (known tool, schema, duplicates, silent context) → PreToolUse hooks →
permission (executor Inspect, decision Decide, approval round trip) → partition
(consecutive concurrency-safe calls in parallel, the rest one by one) → execute (interrupt
behaviour, sibling abort) → PostToolUse hooks → results in the model's order.

Fail closed throughout: a failed Inspect, an unreachable or late decision service, an
approval that times out — each is a denial whose reason says why, and nothing runs. The
services are reached through ``stockade.agent.ports`` and fail with the clients' typed
``ServiceError`` (no gRPC here).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from stockade.agent.builtin_hooks import CancelToken
from stockade.agent.convert import call_to_pb, status_from_pb, verdict_from_pb
from stockade.agent.events import (
    CallInfo,
    Emit,
    PermissionRequested,
    PermissionResolved,
    ToolCallFinished,
    ToolCallStarted,
)
from stockade.agent.hooks import CallStatus, DecisionInfo, ToolCallContext, ToolResultContext
from stockade.agent.limits import DuplicateDetector
from stockade.agent.outcome import (
    ExecutionStatus,
    Outcome,
    Verdict,
    cancelled_outcome,
    denied_outcome,
    error_outcome,
)
from stockade.agent.ports import DecisionPort, ExecutorPort, ToolProviderPort
from stockade.agent.registry import InterruptBehavior, Location, ToolSpec
from stockade.agent.subagent import AgentScope, silent_refusal
from stockade.client.errors import DeadlineExceededError, PermissionDeniedError, ServiceError
from stockade.contract.audit_bounds import value_depth_exceeds
from stockade.errors import InvalidArgument, UnknownTool
from stockade.llm.base import MAX_ARGUMENT_DEPTH, ModelToolCall
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

log = logging.getLogger(__name__)

#: Statuses that end a call as failed or possibly failed (they abort siblings).
_FAILED = frozenset({CallStatus.FAIL, CallStatus.UNKNOWN})
#: Status codes (names) of a stream that broke mid-call (the call had been sent and
#: acknowledged).
_BROKEN_STREAM = frozenset({"UNAVAILABLE", "CANCELLED", "UNKNOWN"})


def _unusable_arguments(call: ModelToolCall) -> str:
    """Why the call's arguments cannot be used ("" when they can)."""
    if call.invalid:
        return call.invalid
    if value_depth_exceeds(call.arguments, MAX_ARGUMENT_DEPTH):
        return f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    return ""


def _usable(call: ModelToolCall) -> dict[str, Any]:
    """The call's arguments, or {} when they cannot be used (they could not be sent on:
    the stream event and the hooks see the call without them)."""
    return {} if _unusable_arguments(call) else dict(call.arguments)


@dataclass
class PendingCall:
    """One call moving through the pipeline."""

    call: ModelToolCall
    """As the model asked."""
    started: float
    """Monotonic start time."""
    spec: ToolSpec | None = None
    """Its registry entry (None for unknown tools)."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """Final arguments (after MutateInput)."""
    outcome: Outcome | None = None
    """Set as soon as the call is settled (refused early or executed)."""
    grant: d_pb2.Grant | None = None
    """The decision's grant, for executor tools."""
    decision: d_pb2.DecideResponse | None = None
    """The decision."""
    context: tuple[str, ...] = ()
    """Hook contexts appended to the result for the model."""
    announced: bool = False
    """True once ``tool_call_started`` was emitted."""
    span: trace.Span = trace.INVALID_SPAN
    """The call's tracing span (ended when the call finishes)."""

    def elapsed_ms(self) -> int:
        """Milliseconds since the call's checks started."""
        return int((time.monotonic() - self.started) * 1000)


BuiltinRunner = Callable[[PendingCall], Awaitable[Outcome]]


def _cancellable(item: PendingCall) -> bool:
    return item.spec is not None and item.spec.interrupt_behavior is InterruptBehavior.CANCEL


def current_trace_id() -> str:
    """The active OpenTelemetry trace id (32 hex), or empty."""
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else ""


def current_span_id() -> str:
    """The active OpenTelemetry span id (16 hex), or empty."""
    context = trace.get_current_span().get_span_context()
    return f"{context.span_id:016x}" if context.is_valid else ""


def _name(enum: Any, value: int, prefix: str) -> str:
    try:
        name: str = enum.Name(value)
    except ValueError:
        return ""
    return "" if name.endswith("UNSPECIFIED") else name.removeprefix(prefix)


class ExecutionPipeline:
    """Runs the tool calls of one model step through every check, in the model's order."""

    def __init__(
        self,
        *,
        decision: DecisionPort,
        executor: ExecutorPort,
        providers: Mapping[str, ToolProviderPort] | None = None,
        approval_wait_s: float = 130.0,
        tool_timeout_s: float = 130.0,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.tracer = tracer or trace.get_tracer("stockade.agent")
        self.decision = decision
        self.executor = executor
        self.providers = dict(providers or {})
        self.approval_wait_s = approval_wait_s
        self.tool_timeout_s = tool_timeout_s

    # ------------------------------------------------------------ the step

    async def run_step(
        self,
        scope: AgentScope,
        step: int,
        calls: Sequence[ModelToolCall],
        *,
        duplicates: DuplicateDetector,
        cancel: CancelToken,
        emit: Emit,
        builtin: BuiltinRunner,
    ) -> list[Outcome]:
        """Check and run ``calls``; return one outcome per call, in the model's order."""
        pending: list[PendingCall] = []
        for call in calls:
            item = PendingCall(call=call, started=time.monotonic())
            # One span per call, parent of its Inspect/Decide/Execute RPC spans.
            item.span = self.tracer.start_span(
                f"tool_call {call.name}",
                attributes={
                    "stockade.call_id": call.id,
                    "stockade.tool": call.name,
                    "stockade.agent": scope.name,
                    "stockade.session_id": scope.session_id,
                },
            )
            pending.append(item)
            with trace.use_span(item.span, end_on_exit=False):
                await self._check(scope, step, item, duplicates, cancel, emit)
        for batch in self._partition(pending):
            for item in batch:
                self._announce(scope, item, emit)
            await self._execute_batch(scope, batch, cancel, builtin)
            for item in batch:
                await self._finish(scope, step, item, emit)
        return [item.outcome for item in pending if item.outcome is not None]

    def _announce(self, scope: AgentScope, item: PendingCall, emit: Emit) -> None:
        """Emit ``tool_call_started`` once, right before the call's first other event.

        So every call's events are contiguous in a simple stream reader's eyes: a call
        settled by the checks shows started/finished together, a parallel batch shows its
        starts then its results, an ASK shows started before its permission request.
        """
        if not item.announced:
            item.announced = True
            emit(scope.name, ToolCallStarted(self._call(scope, item.call, _usable(item.call))))

    # ------------------------------------------------------------ checks

    async def _check(
        self,
        scope: AgentScope,
        step: int,
        item: PendingCall,
        duplicates: DuplicateDetector,
        cancel: CancelToken,
        emit: Emit,
    ) -> None:
        call = item.call
        if cancel.is_set():
            item.outcome = cancelled_outcome()
            return
        invalid = _unusable_arguments(call)
        if invalid:
            item.outcome = error_outcome(f"Error: {call.name}: {invalid}", invalid)
            return
        try:
            item.spec = scope.registry.get(call.name)
            item.arguments = item.spec.validate(dict(call.arguments))
        except (UnknownTool, InvalidArgument) as exc:
            item.outcome = error_outcome(f"Error: {exc.message}", exc.message)
            return
        if duplicates.observe(call.name, item.arguments):
            item.outcome = error_outcome(DuplicateDetector.message(call.name), "duplicate call")
            return
        refusal = silent_refusal(scope, call.name)
        if refusal is not None:
            item.outcome = error_outcome(refusal, "subagents cannot ask the user")
            return
        hooks = await scope.hooks.run_pre_tool_use(self._hook_call(scope, step, item))
        item.context = hooks.additional_context
        if hooks.blocked and hooks.blocked_by == "cancellation":
            item.outcome = cancelled_outcome(hooks.block_reason)
            return
        if hooks.mutated_by and not hooks.blocked:
            try:
                item.arguments = item.spec.validate(dict(hooks.arguments))
            except InvalidArgument as exc:
                item.outcome = error_outcome(
                    f"Error: hook {', '.join(hooks.mutated_by)} produced invalid arguments: "
                    f"{exc.message}",
                    exc.message,
                )
                return
        signals = [
            d_pb2.HookSignal(
                kind=d_pb2.HookSignal.KIND_PERMISSION_REQUIRED, hook_name="hooks", message=message
            )
            for message in hooks.permission_required
        ]
        if hooks.blocked:
            signals.append(
                d_pb2.HookSignal(
                    kind=d_pb2.HookSignal.KIND_BLOCK,
                    hook_name=hooks.blocked_by,
                    message=hooks.block_reason,
                )
            )
        await self._permission(scope, item, signals, cancel, emit)

    async def _permission(
        self,
        scope: AgentScope,
        item: PendingCall,
        signals: list[d_pb2.HookSignal],
        cancel: CancelToken,
        emit: Emit,
    ) -> None:
        assert item.spec is not None
        call = self._call(scope, item.call, item.arguments)
        pb_call = call_to_pb(call)
        if item.spec.location is Location.EXECUTOR:
            try:
                inspection = await self.executor.inspect(x_pb2.InspectRequest(call=pb_call))
            except ServiceError as err:
                item.outcome = denied_outcome(
                    f"the executor could not inspect the call ({err.code}: "
                    f"{err.details}); denied (fail closed)"
                )
                return
        else:
            inspection = d_pb2.ToolInspection(read_only=item.spec.read_only)
        decision = await self.decision.decide(
            d_pb2.DecideRequest(call=pb_call, inspection=inspection, hook_signals=signals)
        )
        item.decision = decision
        if decision.verdict == c_pb2.VERDICT_ASK:
            decision = await self._approval(scope, item, call, decision, cancel, emit)
            if item.outcome is not None:
                return
        if decision.verdict != c_pb2.VERDICT_ALLOW:
            outcome = denied_outcome(decision.reason or "denied", decision.winning_rule)
            self._attach(outcome, item.decision)
            outcome.halt, outcome.halt_reason = decision.halt, decision.halt_reason
            item.outcome = outcome
            return
        item.grant = decision.grant

    async def _approval(
        self,
        scope: AgentScope,
        item: PendingCall,
        call: CallInfo,
        decision: d_pb2.DecideResponse,
        cancel: CancelToken,
        emit: Emit,
    ) -> d_pb2.DecideResponse:
        """Surface the ASK, wait for its answer (or a cancel) and fold it into a decision."""
        if not decision.approval_id:
            return d_pb2.DecideResponse(
                verdict=c_pb2.VERDICT_DENY,
                reason=f"needs approval but no approval was opened ({decision.reason}); denied",
                winning_rule=decision.winning_rule,
            )
        self._announce(scope, item, emit)
        emit(
            scope.name,
            PermissionRequested(
                decision.approval_id,
                call,
                decision.reason,
                decision.explanation,
                decision.always_allow_applies,
            ),
        )
        waiter = asyncio.ensure_future(
            self.decision.await_approval(decision.approval_id, timeout=self.approval_wait_s)
        )
        with cancel.watch(waiter):
            try:
                answer = await waiter
            except asyncio.CancelledError:
                if not (cancel.is_set() and waiter.cancelled()):
                    raise
                emit(
                    scope.name,
                    PermissionResolved(
                        decision.approval_id,
                        Verdict.DENY,
                        "the turn was cancelled while waiting for the approval",
                    ),
                )
                item.outcome = cancelled_outcome("cancelled while waiting for an approval")
                return decision
        emit(
            scope.name,
            PermissionResolved(
                decision.approval_id, verdict_from_pb(answer.verdict), answer.reason
            ),
        )
        resolved = d_pb2.DecideResponse()
        resolved.CopyFrom(decision)
        resolved.verdict = answer.verdict
        resolved.reason = answer.reason or decision.reason
        resolved.ClearField("grant")
        if answer.verdict == c_pb2.VERDICT_ALLOW:
            resolved.grant.CopyFrom(answer.grant)
        item.decision = resolved
        return resolved

    # ------------------------------------------------------------ partition & execute

    @staticmethod
    def _partition(pending: list[PendingCall]) -> list[list[PendingCall]]:
        """Consecutive ready concurrency-safe calls form one batch; others run alone."""
        batches: list[list[PendingCall]] = []
        parallel: list[PendingCall] = []
        for item in pending:
            ready = item.outcome is None and item.spec is not None
            if ready and item.spec is not None and item.spec.is_concurrency_safe(item.arguments):
                parallel.append(item)
                continue
            if parallel:
                batches.append(parallel)
                parallel = []
            batches.append([item])
        if parallel:
            batches.append(parallel)
        return batches

    async def _execute_batch(
        self,
        scope: AgentScope,
        batch: list[PendingCall],
        cancel: CancelToken,
        builtin: BuiltinRunner,
    ) -> None:
        ready = [item for item in batch if item.outcome is None]
        if not ready:
            return
        tasks: dict[int, asyncio.Future[Outcome]] = {}
        for item in ready:
            with trace.use_span(item.span, end_on_exit=False):  # the task copies the context
                tasks[id(item)] = asyncio.ensure_future(self._run(scope, item, builtin))
        aborted: set[int] = set()

        def abort_siblings(failed: PendingCall) -> None:
            for other in ready:
                task = tasks[id(other)]
                if other is failed or task.done() or not _cancellable(other):
                    continue
                aborted.add(id(other))
                task.cancel()

        async def finish(item: PendingCall) -> None:
            task = tasks[id(item)]
            item.outcome = await self._interruptible(scope, item, task, cancel)
            if id(item) in aborted and item.outcome.status is ExecutionStatus.CANCELLED:
                item.outcome.reason = "aborted: a sibling call in the same batch failed"
                item.outcome.content = f"Cancelled: {item.outcome.reason}."
            self._attach(item.outcome, item.decision)
            assert item.spec is not None
            if item.spec.causes_sibling_abort and item.outcome.call_status in _FAILED:
                abort_siblings(item)

        await asyncio.gather(*(finish(item) for item in ready))

    async def _interruptible(
        self,
        scope: AgentScope,
        item: PendingCall,
        task: asyncio.Future[Outcome],
        cancel: CancelToken,
    ) -> Outcome:
        """Await one call; CANCEL tools stop when the turn is cancelled, BLOCK tools finish."""
        if not _cancellable(item):
            return await asyncio.shield(task)  # BLOCK: even our own cancel must not cut it
        with cancel.watch(task):
            try:
                return await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # this coroutine itself was cancelled, not the call
        if item.spec is not None and item.spec.location is Location.EXECUTOR:
            try:
                await self.executor.cancel(scope.session_id, item.call.id)
            except ServiceError as err:
                log.warning("executor cancel of %s failed: %s", item.call.id, err.code)
        return cancelled_outcome()

    async def _run(self, scope: AgentScope, item: PendingCall, builtin: BuiltinRunner) -> Outcome:
        assert item.spec is not None
        try:
            if item.spec.location is Location.EXECUTOR:
                return await self._run_executor(scope, item)
            if item.spec.location is Location.REMOTE:
                return await self._run_remote(scope, item)
            return await builtin(item)
        except Exception as exc:  # one broken tool must not end the whole turn
            log.exception("tool %s (%s) failed", item.call.name, item.call.id)
            return error_outcome(
                f"Error: {item.call.name} failed unexpectedly ({type(exc).__name__})",
                type(exc).__name__,
            )

    async def _run_executor(self, scope: AgentScope, item: PendingCall) -> Outcome:
        assert item.spec is not None
        behaviour = (
            c_pb2.INTERRUPT_BEHAVIOR_CANCEL
            if item.spec.interrupt_behavior is InterruptBehavior.CANCEL
            else c_pb2.INTERRUPT_BEHAVIOR_BLOCK
        )
        request = x_pb2.ExecuteRequest(
            call=call_to_pb(self._call(scope, item.call, item.arguments)),
            grant=item.grant,
            interrupt_behavior=behaviour,
        )
        result = x_pb2.ExecuteResult(
            status=x_pb2.EXECUTION_STATUS_ERROR, error="the executor sent no result"
        )
        unknown = False
        started = False
        try:
            async for message in self.executor.execute(request, timeout=self.tool_timeout_s):
                started = True
                if message.HasField("result"):
                    result = message.result
        except ServiceError as err:
            status = (
                x_pb2.EXECUTION_STATUS_REFUSED
                if isinstance(err, PermissionDeniedError)
                else x_pb2.EXECUTION_STATUS_ERROR
            )
            # Gave up waiting, or lost the stream of a call that had begun: whether the
            # tool ran (and how far) is not known here.
            unknown = isinstance(err, DeadlineExceededError) or (
                started and err.code in _BROKEN_STREAM
            )
            error = f"executor {err.code}: {err.details}"
            if unknown:
                error = f"outcome unknown: {error} (the tool may have run)"
            result = x_pb2.ExecuteResult(status=status, error=error)
        ok = result.status == x_pb2.EXECUTION_STATUS_OK
        content = result.content if ok else f"Error: {result.error or result.content}"
        return Outcome(
            status_from_pb(result.status),
            Verdict.ALLOW,
            content,
            "" if ok else result.error,
            outcome_unknown=unknown,
        )

    async def _run_remote(self, scope: AgentScope, item: PendingCall) -> Outcome:
        assert item.spec is not None
        client = self.providers.get(item.spec.provider)
        if client is None:
            return error_outcome(
                f"Error: no tool provider is connected for {item.spec.name}", "no provider"
            )
        answer = await client.call_tool(
            session_id=scope.session_id,
            call_id=item.call.id,
            tool_name=item.spec.name,
            arguments=item.arguments,
            agent_name=scope.name,
            from_subagent=scope.from_subagent,
            timeout=self.tool_timeout_s,
        )
        status = ExecutionStatus.ERROR if answer.is_error else ExecutionStatus.OK
        return Outcome(
            status,
            Verdict.ALLOW,
            answer.content,
            answer.content if answer.is_error else "",
            outcome_unknown=answer.outcome_unknown,
        )

    # ------------------------------------------------------------ finish

    async def _finish(self, scope: AgentScope, step: int, item: PendingCall, emit: Emit) -> None:
        with trace.use_span(item.span, end_on_exit=True):
            await self._finish_in_span(scope, step, item, emit)

    async def _finish_in_span(
        self, scope: AgentScope, step: int, item: PendingCall, emit: Emit
    ) -> None:
        outcome = item.outcome
        assert outcome is not None
        outcome.elapsed_ms = item.elapsed_ms()
        decision = DecisionInfo(
            verdict="" if outcome.verdict is Verdict.UNSPECIFIED else outcome.verdict.value,
            winning_rule=outcome.rule if outcome.rule.ByteSize() else None,
            conflicts=outcome.conflicts,
            reason=outcome.decision_reason,
            policy_version=outcome.policy_version,
        )
        post = await scope.hooks.run_post_tool_use(
            ToolResultContext(
                call=self._hook_call(scope, step, item),
                content=outcome.content,
                status=outcome.call_status,
                elapsed_ms=outcome.elapsed_ms,
                decision=decision,
                trace_id=current_trace_id(),
                span_id=current_span_id(),
            )
        )
        outcome.content = post.content
        if item.context:
            outcome.content += "\n\n" + "\n".join(f"[hook context] {c}" for c in item.context)
        item.span.set_attribute("stockade.status", outcome.call_status.value)
        item.span.set_attribute("stockade.verdict", decision.verdict)
        emit(
            scope.name,
            ToolCallFinished(
                call_id=item.call.id,
                tool_name=item.call.name,
                status=outcome.status,
                verdict=outcome.verdict,
                content=outcome.content,
                winning_rule=outcome.rule,
                reason=outcome.reason,
                elapsed_ms=outcome.elapsed_ms,
            ),
        )

    # ------------------------------------------------------------ helpers

    @staticmethod
    def _attach(outcome: Outcome, decision: d_pb2.DecideResponse | None) -> None:
        if decision is None:
            return
        decided = verdict_from_pb(decision.verdict)
        if outcome.verdict is Verdict.UNSPECIFIED or outcome.verdict is decided:
            outcome.verdict = decided
        outcome.rule = decision.winning_rule
        outcome.policy_version = decision.policy_version
        outcome.conflicts = tuple(decision.conflicts)
        outcome.decision_reason = decision.reason

    @staticmethod
    def _call(scope: AgentScope, call: ModelToolCall, arguments: Mapping[str, Any]) -> CallInfo:
        return CallInfo(
            call_id=call.id,
            tool_name=call.name,
            arguments=arguments,
            session_id=scope.session_id,
            agent_name=scope.name,
            from_subagent=scope.from_subagent,
        )

    @staticmethod
    def _hook_call(scope: AgentScope, step: int, item: PendingCall) -> ToolCallContext:
        return ToolCallContext(
            session_id=scope.session_id,
            call_id=item.call.id,
            tool_name=item.call.name,
            arguments=item.arguments or _usable(item.call),
            agent_name=scope.name,
            step=step,
            from_subagent=scope.from_subagent,
        )
