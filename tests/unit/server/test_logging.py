"""Log lines are JSON and carry the trace id, span id and request id (X-1, X-2)."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider

from stockade.server.interceptors import request_id_var
from stockade.server.telemetry import JsonFormatter


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("stockade.test", logging.INFO, __file__, 1, msg, (), None)


def test_a_line_inside_a_span_names_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    tracer = TracerProvider().get_tracer("test")
    token = request_id_var.set("req-9")
    try:
        with tracer.start_as_current_span("call") as span:
            line = JsonFormatter().format(_record("decided"))
            ctx = span.get_span_context()
    finally:
        request_id_var.reset(token)
    out = json.loads(line)
    assert out["msg"] == "decided" and out["level"] == "INFO"
    assert out["trace_id"] == format(ctx.trace_id, "032x")
    assert out["span_id"] == format(ctx.span_id, "016x")
    assert out["request_id"] == "req-9"


def test_a_line_outside_a_span_has_no_trace_fields() -> None:
    out = json.loads(JsonFormatter().format(_record("idle")))
    assert "trace_id" not in out and "request_id" not in out
