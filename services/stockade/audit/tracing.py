"""The audit hop of each tool call's trace (X-1), with events that travel in batches.

A batch carries events of many calls, so its RPC cannot belong to each call's trace.
Instead every event names its call's span (``trace_id``, ``span_id``), and the audit
service records one ``audit.receive`` span per event as a child of that remote span:
the audit service shows up in the trace of every tool call it logged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from stockade.tracing import tracing_enabled
from stockade.v1 import audit_service_pb2 as a_pb2

_TRACE = re.compile(r"[0-9a-f]{32}")
_SPAN = re.compile(r"[0-9a-f]{16}")

tracer = trace.get_tracer("stockade.audit")


def record_receipt_spans(events: Iterable[a_pb2.AuditEvent]) -> None:
    """One ``audit.receive`` span per event that names a valid span of its call."""
    if not tracing_enabled():
        return
    for event in events:
        if not (_TRACE.fullmatch(event.trace_id) and _SPAN.fullmatch(event.span_id)):
            continue
        parent = SpanContext(
            trace_id=int(event.trace_id, 16),
            span_id=int(event.span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        if not parent.is_valid:
            continue
        span = tracer.start_span(
            "audit.receive",
            context=trace.set_span_in_context(NonRecordingSpan(parent)),
            kind=SpanKind.CONSUMER,
            attributes={
                "stockade.event_id": event.event_id,
                "stockade.call_id": event.call_id,
                "stockade.tool": event.tool_name,
            },
        )
        span.end()
