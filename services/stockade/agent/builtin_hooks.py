"""The built-in hooks (AGT-4): Cancellation, Redaction, Truncation, Metrics and AuditLog.

``standard_hooks`` returns them in the order that makes their guarantees hold: Cancellation
first (a cancelled turn runs nothing else), Redaction before everything that stores or
counts output (neither the model, a persisted file nor the log sees a secret), AuditLog
last (it records the final output).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from google.protobuf import struct_pb2, timestamp_pb2
from opentelemetry import metrics

from stockade.agent.convert import termination_to_pb
from stockade.agent.hooks import (
    CONTINUE,
    Block,
    CallStatus,
    Hook,
    MutateOutput,
    PostAction,
    PreAction,
    ToolCallContext,
    ToolResultContext,
)
from stockade.agent.lifecycle import LifecycleEvent, LifecycleKind, SessionStopDetails
from stockade.contract.audit_bounds import (
    MAX_STRUCT_DEPTH,
    bounded_json,
    cut_marker,
    is_cut,
    value_depth_exceeds,
)
from stockade.contract.redaction import redact, redact_value
from stockade.v1 import audit_service_pb2 as audit_pb2
from stockade.v1 import common_pb2

log = logging.getLogger(__name__)


class CancelToken:
    """A turn's cancel flag that also cancels the tasks registered with ``watch``.

    Cancelling registered tasks directly (instead of racing each against a waiter task)
    keeps the per-call overhead of interruptibility to a set insertion.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._tasks: set[asyncio.Future[Any]] = set()

    def is_set(self) -> bool:
        """True once the turn was cancelled."""
        return self._event.is_set()

    def set(self) -> None:
        """Cancel the turn: wake waiters and cancel every watched task."""
        self._event.set()
        for task in list(self._tasks):
            task.cancel()

    async def wait(self) -> None:
        """Wait until the turn is cancelled."""
        await self._event.wait()

    @contextmanager
    def watch(self, task: asyncio.Future[Any]) -> Iterator[None]:
        """Cancel ``task`` if the turn is (or gets) cancelled while inside the block."""
        if self.is_set():
            task.cancel()
        self._tasks.add(task)
        try:
            yield
        finally:
            self._tasks.discard(task)


class CancelRegistry:
    """Which sessions' running turns were cancelled (the seed's ``cancelled_runs``)."""

    def __init__(self) -> None:
        self._tokens: dict[str, CancelToken] = {}

    def begin(self, session_id: str) -> CancelToken:
        """Register a running turn; returns its cancel token."""
        token = CancelToken()
        self._tokens[session_id] = token
        return token

    def cancel(self, session_id: str) -> bool:
        """Cancel the running turn of ``session_id``; False when none is running."""
        token = self._tokens.get(session_id)
        if token is None:
            return False
        token.set()
        return True

    def is_cancelled(self, session_id: str) -> bool:
        """True when the session's running turn was cancelled."""
        token = self._tokens.get(session_id)
        return token is not None and token.is_set()

    def token(self, session_id: str) -> CancelToken | None:
        """The running turn's cancel token, if any."""
        return self._tokens.get(session_id)

    def end(self, session_id: str) -> None:
        """Forget the session's turn (called on session stop)."""
        self._tokens.pop(session_id, None)


class CancellationHook(Hook):
    """Blocks every tool call of a cancelled turn; clears the state when the turn stops."""

    name = "cancellation"

    def __init__(self, registry: CancelRegistry) -> None:
        self._registry = registry

    async def pre_tool_use(self, call: ToolCallContext) -> PreAction:
        """Block when the session's turn was cancelled."""
        if self._registry.is_cancelled(call.session_id):
            return Block("the turn was cancelled by the user")
        return CONTINUE

    async def on_event(self, event: LifecycleEvent) -> None:
        """Forget the cancellation when the lead's session stops."""
        if event.kind is LifecycleKind.SESSION_STOP and event.agent_name == "lead":
            self._registry.end(event.session_id)


class RedactionHook(Hook):
    """Masks secrets in every tool output before the model or the log sees it."""

    name = "redaction"

    async def post_tool_use(self, result: ToolResultContext) -> PostAction:
        """Replace the output when it holds a secret."""
        redacted = redact(result.content)
        if redacted.kinds:
            log.info("redacted %s in %s output", ",".join(redacted.kinds), result.call.tool_name)
            return MutateOutput(redacted.text)
        return CONTINUE


class TruncationHook(Hook):
    """Keeps huge outputs (remote and built-in tools) out of the context (the seed's
    large-result persistence): the head and tail stay, the middle is cut, and the whole
    output is saved under ``persist_dir`` when one is configured.

    Executor tools arrive already shaped by the executor; this guards everything else.
    Placed after Redaction, so a persisted file never holds an unmasked secret.
    """

    name = "truncation"

    def __init__(self, max_chars: int = 16_000, persist_dir: Path | None = None) -> None:
        if max_chars < 200:
            raise ValueError("max_chars must be at least 200")
        self.max_chars = max_chars
        self.persist_dir = persist_dir

    def _persist(self, result: ToolResultContext) -> str:
        if self.persist_dir is None:
            return ""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in result.call.call_id)
        session = "".join(c if c.isalnum() or c in "-_." else "_" for c in result.call.session_id)
        folder = self.persist_dir / session
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{safe or 'call'}.txt"
        path.write_text(result.content, encoding="utf-8")
        return str(path)

    async def post_tool_use(self, result: ToolResultContext) -> PostAction:
        """Cut the middle of an output longer than ``max_chars``."""
        content = result.content
        if len(content) <= self.max_chars:
            return CONTINUE
        saved = self._persist(result)
        head = content[: self.max_chars // 2]
        tail = content[-(self.max_chars // 4) :]
        cut = len(content) - len(head) - len(tail)
        note = f"\n[... {cut} characters cut"
        note += f"; full output saved to {saved}]\n" if saved else "]\n"
        return MutateOutput(head + note + tail)


@dataclass
class SessionMetrics:
    """A local per-session snapshot (the seed's ``MetricsData``)."""

    calls: int = 0
    """Tool calls that ended."""
    errors: int = 0
    """Calls that did not end OK."""
    per_tool: Counter[str] = field(default_factory=Counter)
    """Calls per tool."""
    denials: int = 0
    """Denied calls."""
    steps: int = 0
    """Completed steps."""
    termination_reason: str = ""
    """Why the session stopped."""


class MetricsHook(Hook):
    """OpenTelemetry counters and histograms for tool calls, steps and endings."""

    name = "metrics"
    fail_closed = False  # metrics must never block or hide a call

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        meter = meter or metrics.get_meter("stockade.agent")
        self._calls = meter.create_counter(
            "stockade.agent.tool_calls", unit="{call}", description="Tool calls by tool and status"
        )
        self._duration = meter.create_histogram(
            "stockade.agent.tool_duration", unit="ms", description="Tool call wall time"
        )
        self._steps = meter.create_counter(
            "stockade.agent.steps", unit="{step}", description="Completed model steps"
        )
        self._stops = meter.create_counter(
            "stockade.agent.sessions_stopped", unit="{turn}", description="Turn endings by reason"
        )
        self._sessions: dict[str, SessionMetrics] = {}

    def snapshot(self, session_id: str) -> SessionMetrics:
        """The local metrics of one session."""
        return self._sessions.setdefault(session_id, SessionMetrics())

    async def post_tool_use(self, result: ToolResultContext) -> PostAction:
        """Count the call and record its duration."""
        attributes = {"tool": result.call.tool_name, "status": result.status.value}
        self._calls.add(1, attributes)
        self._duration.record(result.elapsed_ms, attributes)
        data = self.snapshot(result.call.session_id)
        data.calls += 1
        data.per_tool[result.call.tool_name] += 1
        data.errors += result.is_error
        data.denials += result.status is CallStatus.DENIED
        return CONTINUE

    async def on_event(self, event: LifecycleEvent) -> None:
        """Count steps and endings."""
        if event.kind is LifecycleKind.STEP_COMPLETE:
            self._steps.add(1, {"agent": event.agent_name})
            self.snapshot(event.session_id).steps += 1
        elif isinstance(event.details, SessionStopDetails):
            reason = event.details.reason.value
            self._stops.add(1, {"reason": reason, "agent": event.agent_name})
            self.snapshot(event.session_id).termination_reason = reason


class AuditSink(Protocol):
    """The audit client's non-blocking side: queue an event and return at once.

    A sink may also offer ``async wait_durable()`` (return once what was queued survives
    a crash) and ``blocked_reason() -> str`` (why calls must be refused now, "" when
    they may run), as ``stockade.client.audit.AuditRecorder`` does; the hook uses them
    when present.
    """

    def enqueue(self, event: audit_pb2.AuditEvent) -> None:
        """Queue ``event`` for delivery (spooled if the audit service is down)."""
        ...


_STATUS = {
    CallStatus.OK: audit_pb2.AUDIT_STATUS_OK,
    CallStatus.FAIL: audit_pb2.AUDIT_STATUS_FAIL,
    CallStatus.DENIED: audit_pb2.AUDIT_STATUS_DENIED,
    CallStatus.CANCELLED: audit_pb2.AUDIT_STATUS_CANCELLED,
    CallStatus.UNKNOWN: audit_pb2.AUDIT_STATUS_UNKNOWN,
}
PREVIEW_CHARS = 200


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(time.time_ns())
    return stamp


def _verdict(name: str) -> common_pb2.Verdict.ValueType:
    try:
        return common_pb2.Verdict.Value(f"VERDICT_{name.upper()}")
    except ValueError:
        return common_pb2.VERDICT_UNSPECIFIED


def audit_arguments(arguments: Any) -> struct_pb2.Struct:
    """The arguments as the audit event carries them: redacted, or a cut marker object
    (with the SHA-256 and size of the full text) when too long or too deep to keep."""
    if value_depth_exceeds(arguments, MAX_STRUCT_DEPTH):
        # redact_value and json.dumps recurse: a value this deep is measured, not walked.
        value: Any = json.loads(cut_marker(None, f"nested deeper than {MAX_STRUCT_DEPTH} levels"))
    else:
        value = redact_value(arguments)
        text = bounded_json(value)
        if is_cut(text):
            value = json.loads(text)
    struct = struct_pb2.Struct()
    try:
        struct.update(value)
    except (TypeError, ValueError):  # a value JSON can hold only as text (bounded_json's str)
        struct.update(json.loads(bounded_json(value)))
    return struct


class AuditLogHook(Hook):
    """Sends one audit row per finished call and a SESSION_STOP row per ending (AUD-1).

    The sink's ``enqueue`` never waits on the network (AUD-2); it writes the event ahead
    to the local spool, and when the sink can also make it durable (``wait_durable``:
    a group fsync) the hook waits for that, so a call's result is released only once its
    audit row survives a crash. When the sink says the trail cannot be written
    (``blocked_reason``, e.g. a full disk), further calls are refused (fail closed).
    Other exceptions from the sink are logged and swallowed so that the audit path can
    never break a turn.
    """

    name = "audit_log"
    fail_closed = False

    def __init__(self, sink: AuditSink) -> None:
        self._sink = sink
        self._wait_durable = getattr(sink, "wait_durable", None)
        self._blocked_reason = getattr(sink, "blocked_reason", None)

    def _send(self, event: audit_pb2.AuditEvent) -> None:
        try:
            self._sink.enqueue(event)
        except Exception as exc:
            log.error("audit enqueue failed for %s: %s", event.event_id, exc)

    async def _durable(self) -> None:
        if self._wait_durable is None:
            return
        try:
            await self._wait_durable()
        except Exception as exc:
            log.error("audit: waiting for a durable spool failed: %s", exc)

    async def pre_tool_use(self, call: ToolCallContext) -> PreAction:
        """Refuse the call while the audit trail cannot be written (fail closed)."""
        if self._blocked_reason is not None:
            reason = self._blocked_reason()
            if reason:
                return Block(f"refused: {reason}")
        return CONTINUE

    async def post_tool_use(self, result: ToolResultContext) -> PostAction:
        """Record the call (arguments and preview redacted) and wait until it is durable."""
        call, decision = result.call, result.decision
        self._send(
            audit_pb2.AuditEvent(
                event_id=str(uuid.uuid4()),
                session_id=call.session_id,
                step=call.step,
                tool_name=call.tool_name,
                status=_STATUS[result.status],
                elapsed_ms=result.elapsed_ms,
                output_preview=redact(result.content).text[:PREVIEW_CHARS],
                agent_name=call.agent_name,
                time=_now(),
                call_id=call.call_id,
                verdict=_verdict(decision.verdict),
                winning_rule=decision.winning_rule,
                conflicts=decision.conflicts,
                decision_reason=decision.reason,
                trace_id=result.trace_id,
                span_id=result.span_id,
                policy_version=decision.policy_version,
                arguments=audit_arguments(dict(call.arguments)),
            )
        )
        await self._durable()
        return CONTINUE

    async def on_event(self, event: LifecycleEvent) -> None:
        """Write the SESSION_STOP summary row with the termination reason."""
        if not isinstance(event.details, SessionStopDetails):
            return
        self._send(session_stop_row(event, event.details))
        await self._durable()


def session_stop_row(event: LifecycleEvent, details: SessionStopDetails) -> audit_pb2.AuditEvent:
    """The audit row that closes a session's trail: the termination reason as its enum,
    the steps taken, and the reason in words (redacted, cut to the preview's length)."""
    return audit_pb2.AuditEvent(
        event_id=str(uuid.uuid4()),
        session_id=event.session_id,
        step=details.step,
        tool_name="session",
        status=audit_pb2.AUDIT_STATUS_SESSION_STOP,
        agent_name=event.agent_name,
        time=_now(),
        output_preview=redact(details.detail).text[:PREVIEW_CHARS],
        termination=termination_to_pb(details.reason),
    )


def standard_hooks(
    cancel_registry: CancelRegistry,
    audit_sink: AuditSink | None = None,
    *,
    meter: metrics.Meter | None = None,
    extra: list[Hook] | None = None,
    max_output_chars: int = 16_000,
    persist_dir: Path | None = None,
) -> list[Hook]:
    """The built-in hooks in their safe order, with embedder hooks between Redaction and
    the recorders (so recorders see what embedders changed)."""
    hooks: list[Hook] = [
        CancellationHook(cancel_registry),
        RedactionHook(),
        TruncationHook(max_output_chars, persist_dir),
    ]
    hooks.extend(extra or [])
    hooks.append(MetricsHook(meter))
    if audit_sink is not None:
        hooks.append(AuditLogHook(audit_sink))
    return hooks
