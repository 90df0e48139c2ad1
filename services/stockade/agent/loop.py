"""The ReAct loop (first cut): model step → tool calls through the four services → results.

Each tool call goes agent → executor.Inspect → decision.Decide → executor.Execute (only
on ALLOW) → audit (fire-and-forget), and every step is streamed as RunTurn events. Any
failure to inspect or decide denies the call (fail closed). Hooks, approvals, parallel
batches, subagents and the full limit matrix come with the agent issue.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
from google.protobuf import struct_pb2, timestamp_pb2
from opentelemetry import trace

from stockade.agent.auditsink import AuditSink
from stockade.agent.events import EventFactory
from stockade.agent.providers.base import Message, ModelToolCall, Provider, ToolSchema
from stockade.client.decision import DecisionClient
from stockade.client.executor import ExecutorClient
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

tracer = trace.get_tracer("stockade.agent")

SYSTEM_PROMPT = "You are a careful assistant. Use tools only when needed."
PREVIEW = 200
EXECUTOR_TOOLS = {
    "read_file": ToolSchema(
        "read_file",
        "Read a text file inside the workspace.",
        {
            "type": "object",
            "properties": {"file_path": {"type": "string"}},
            "required": ["file_path"],
        },
    )
}

_STATUS_TO_AUDIT: dict[int, au_pb2.AuditStatus.ValueType] = {
    x_pb2.EXECUTION_STATUS_OK: au_pb2.AUDIT_STATUS_OK,
    x_pb2.EXECUTION_STATUS_ERROR: au_pb2.AUDIT_STATUS_FAIL,
    x_pb2.EXECUTION_STATUS_TIMEOUT: au_pb2.AUDIT_STATUS_FAIL,
    x_pb2.EXECUTION_STATUS_CANCELLED: au_pb2.AUDIT_STATUS_CANCELLED,
    x_pb2.EXECUTION_STATUS_REFUSED: au_pb2.AUDIT_STATUS_DENIED,
}


@dataclass
class CallOutcome:
    """What one tool call ended with."""

    status: int
    verdict: int
    content: str
    rule: c_pb2.Rule
    reason: str
    policy_version: str
    conflicts: str
    elapsed_ms: int


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
    ) -> None:
        self.decision = decision
        self.executor = executor
        self.audit = audit
        self.provider_for = provider_for
        self.max_steps = max_steps
        self._cancelled: set[str] = set()

    def cancel(self, session_id: str) -> bool:
        """Mark the session's turn cancelled (checked at every step)."""
        self._cancelled.add(session_id)
        return True

    async def run_turn(
        self, session_id: str, message: str, script: str = ""
    ) -> AsyncIterator[a_pb2.RunTurnResponse]:
        """Run one turn and yield its events; the last is always ``terminated``."""
        events = EventFactory(session_id)
        self._cancelled.discard(session_id)
        provider = self.provider_for(script)
        messages = [Message("system", SYSTEM_PROMPT), Message("user", message)]
        tools = list(EXECUTOR_TOOLS.values())
        reason, detail = a_pb2.TERMINATION_REASON_MAX_STEPS, "the step limit was reached"
        tokens = 0
        for step in range(1, self.max_steps + 1):
            if session_id in self._cancelled:
                reason, detail = a_pb2.TERMINATION_REASON_CANCELLED, "cancelled by the user"
                break
            turn = await provider.complete(messages, tools)
            tokens += turn.prompt_tokens + turn.completion_tokens
            if turn.text:
                yield events.make(text=a_pb2.TextEvent(text=turn.text))
            if not turn.tool_calls:
                yield events.make(final_answer=a_pb2.FinalAnswerEvent(text=turn.text))
                reason, detail = a_pb2.TERMINATION_REASON_COMPLETED, "final answer"
                break
            messages.append(Message("assistant", turn.text, tool_calls=turn.tool_calls))
            for call in turn.tool_calls:
                pb_call = _to_pb_call(call, session_id)
                yield events.make(tool_call_started=a_pb2.ToolCallStartedEvent(call=pb_call))
                # One tool call is one trace: Inspect, Decide, Execute and the audit
                # event all happen inside this span.
                with tracer.start_as_current_span(
                    f"tool_call {call.name}",
                    attributes={"stockade.call_id": call.id, "stockade.session_id": session_id},
                ):
                    outcome = await self._run_call(pb_call)
                    self._record(pb_call, step, outcome)
                yield events.make(
                    tool_call_finished=a_pb2.ToolCallFinishedEvent(
                        call_id=call.id,
                        tool_name=call.name,
                        status=outcome.status,  # type: ignore[arg-type]
                        verdict=outcome.verdict,  # type: ignore[arg-type]
                        content=outcome.content,
                        winning_rule=outcome.rule,
                        reason=outcome.reason,
                        elapsed_ms=outcome.elapsed_ms,
                    )
                )
                messages.append(Message("tool", outcome.content, tool_call_id=call.id))
            yield events.make(step_complete=a_pb2.StepCompleteEvent(step=step, tokens_used=tokens))
        self._record_stop(session_id, a_pb2.TerminationReason.Name(reason))
        yield events.make(terminated=a_pb2.TerminatedEvent(reason=reason, detail=detail))

    async def _run_call(self, call: c_pb2.ToolCall) -> CallOutcome:
        start = time.monotonic()

        def ms() -> int:
            return int((time.monotonic() - start) * 1000)

        try:
            inspection = await self.executor.inspect(x_pb2.InspectRequest(call=call))
        except grpc.aio.AioRpcError as err:
            return _denied(f"executor could not inspect the call: {err.details()}", ms())
        decision = await self.decision.decide(d_pb2.DecideRequest(call=call, inspection=inspection))
        conflicts = json.dumps(
            [
                {
                    "pattern": c.rule.pattern,
                    "effect": c_pb2.RuleEffect.Name(c.rule.effect),
                    "note": c.note,
                }
                for c in decision.conflicts
            ]
        )
        if decision.verdict != c_pb2.VERDICT_ALLOW:
            reason = decision.reason
            if decision.verdict == c_pb2.VERDICT_ASK:
                reason = (
                    f"needs approval ({decision.reason}); approvals are not built yet, so denied"
                )
            return CallOutcome(
                x_pb2.EXECUTION_STATUS_REFUSED,
                c_pb2.VERDICT_DENY,
                f"Denied: {reason}",
                decision.winning_rule,
                reason,
                decision.policy_version,
                conflicts,
                ms(),
            )
        result = x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_ERROR, error="no result")
        try:
            async for msg in self.executor.execute(
                x_pb2.ExecuteRequest(call=call, grant=decision.grant), timeout_s=130.0
            ):
                if msg.HasField("result"):
                    result = msg.result
        except grpc.aio.AioRpcError as err:
            result = x_pb2.ExecuteResult(
                status=x_pb2.EXECUTION_STATUS_ERROR, error=f"executor: {err.details()}"
            )
        content = (
            result.content
            if result.status == x_pb2.EXECUTION_STATUS_OK
            else (f"Error: {result.error or result.content}")
        )
        return CallOutcome(
            result.status,
            c_pb2.VERDICT_ALLOW,
            content,
            decision.winning_rule,
            decision.reason if result.status == x_pb2.EXECUTION_STATUS_OK else result.error,
            decision.policy_version,
            conflicts,
            ms(),
        )

    def _record(self, call: c_pb2.ToolCall, step: int, outcome: CallOutcome) -> None:
        self.audit.enqueue(
            au_pb2.AuditEvent(
                event_id=uuid.uuid4().hex,
                session_id=call.session_id,
                step=step,
                tool_name=call.tool_name,
                status=_STATUS_TO_AUDIT.get(outcome.status, au_pb2.AUDIT_STATUS_FAIL),
                elapsed_ms=outcome.elapsed_ms,
                output_preview=outcome.content[:PREVIEW],
                agent_name=call.agent_name or "lead",
                time=_now(),
                call_id=call.call_id,
                verdict=outcome.verdict,  # type: ignore[arg-type]
                matched_rule=outcome.rule.pattern,
                rule_source=outcome.rule.source,
                trace_id=_trace_id(),
                conflict_log=outcome.conflicts,
                policy_version=outcome.policy_version,
            )
        )

    def _record_stop(self, session_id: str, reason: str) -> None:
        self.audit.enqueue(
            au_pb2.AuditEvent(
                event_id=uuid.uuid4().hex,
                session_id=session_id,
                tool_name="session",
                status=au_pb2.AUDIT_STATUS_SESSION_STOP,
                agent_name="lead",
                time=_now(),
                termination_reason=reason,
            )
        )


def _trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def _now() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


def _denied(reason: str, elapsed_ms: int) -> CallOutcome:
    rule = c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, pattern="*", source=c_pb2.RULE_SOURCE_DEFAULT)
    return CallOutcome(
        x_pb2.EXECUTION_STATUS_REFUSED,
        c_pb2.VERDICT_DENY,
        f"Denied: {reason}",
        rule,
        reason,
        "",
        "[]",
        elapsed_ms,
    )


def _to_pb_call(call: ModelToolCall, session_id: str) -> c_pb2.ToolCall:
    args = struct_pb2.Struct()
    args.update(call.arguments)
    return c_pb2.ToolCall(
        call_id=call.id,
        tool_name=call.name,
        arguments=args,
        session_id=session_id,
        agent_name="lead",
    )
