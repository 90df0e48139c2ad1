"""OpenTelemetry set-up from the standard ``OTEL_*`` variables, and structured logs.

Exporters are chosen the standard way: ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``
(``otlp``, ``console`` or ``none``); when unset, OTLP is used if
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, otherwise nothing is exported (a laptop run has
no collector). ``OTEL_SDK_DISABLED=true`` turns everything off. Log lines are JSON with
the current trace id, span id and request id, so logs and traces join up.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

_state: dict[str, Any] = {}


@dataclass
class Telemetry:
    """Handles to flush and shut down what ``setup_telemetry`` installed."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    processors: list[SpanProcessor] = field(default_factory=list)
    logger_provider: LoggerProvider | None = None

    def shutdown(self) -> None:
        """Flush and stop exporters (idempotent)."""
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()
        if self.logger_provider is not None:
            self.logger_provider.shutdown()


def _choices(var: str) -> set[str]:
    """The exporters ``var`` names (a comma-separated list, as the OTel spec allows).

    Values other than otlp, console and none are refused at start-up
    (``stockade.server.envcheck``) rather than ignored here.
    """
    value = os.environ.get(var, "").strip().lower()
    if value:
        return {part.strip() for part in value.split(",") if part.strip()}
    return {"otlp"} if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") else {"none"}


def setup_telemetry(
    service_name: str,
    *,
    extra_span_processors: Sequence[SpanProcessor] = (),
    extra_metric_readers: Sequence[MetricReader] = (),
) -> Telemetry:
    """Install tracer and meter providers once per process and return their handles."""
    if "telemetry" in _state:
        tel: Telemetry = _state["telemetry"]
        return tel
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        tel = Telemetry()
        _state["telemetry"] = tel
        return tel
    resource = Resource.create(
        {"service.name": os.environ.get("OTEL_SERVICE_NAME", f"stockade-{service_name}")}
    )
    tracer_provider = TracerProvider(resource=resource)
    processors: list[SpanProcessor] = list(extra_span_processors)
    traces = _choices("OTEL_TRACES_EXPORTER")
    if "otlp" in traces:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        processors.append(BatchSpanProcessor(OTLPSpanExporter()))
    if "console" in traces:
        processors.append(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    for p in processors:
        tracer_provider.add_span_processor(p)
    trace.set_tracer_provider(tracer_provider)

    readers: list[MetricReader] = list(extra_metric_readers)
    metrics_choice = _choices("OTEL_METRICS_EXPORTER")
    if "otlp" in metrics_choice:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    if "console" in metrics_choice:
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stderr)))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    metrics.set_meter_provider(meter_provider)
    tel = Telemetry(tracer_provider, meter_provider, processors, _logger_provider(resource))
    _state["telemetry"] = tel
    return tel


def _logger_provider(resource: Resource) -> LoggerProvider | None:
    """The OTel logs signal, when ``OTEL_LOGS_EXPORTER`` names an exporter. Only records
    emitted through the OTel logs API travel there (the audit service's signed chain
    heads); the process's own log lines stay on stderr."""
    choice = _choices("OTEL_LOGS_EXPORTER")
    if not choice - {"none"}:
        return None
    provider = LoggerProvider(resource=resource)
    if "otlp" in choice:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    if "console" in choice:
        provider.add_log_record_processor(
            BatchLogRecordProcessor(ConsoleLogRecordExporter(out=sys.stderr))
        )
    set_logger_provider(provider)
    return provider


class JsonFormatter(logging.Formatter):
    """One JSON object per line with trace, span and request ids."""

    def format(self, record: logging.LogRecord) -> str:
        from stockade.server.interceptors import request_id_var

        ctx = trace.get_current_span().get_span_context()
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if ctx.is_valid:
            out["trace_id"] = format(ctx.trace_id, "032x")
            out["span_id"] = format(ctx.span_id, "016x")
        rid = request_id_var.get()
        if rid:
            out["request_id"] = rid
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup_logging(level: str) -> None:
    """Send JSON log lines to stderr at ``level`` (idempotent)."""
    root = logging.getLogger()
    if not any(getattr(h, "_stockade", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        handler._stockade = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)
