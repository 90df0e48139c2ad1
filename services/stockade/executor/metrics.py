"""OpenTelemetry metrics of the executor (X-1): executions by tool and status, duration."""

from __future__ import annotations

from opentelemetry import metrics


class ExecutorMetrics:
    """Counts finished executions and records how long each took."""

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        meter = meter or metrics.get_meter("stockade.executor")
        self._executions = meter.create_counter(
            "stockade.executor.executions",
            unit="{execution}",
            description="Finished executions by tool and status (ok, error, timeout, ...)",
        )
        self._duration = meter.create_histogram(
            "stockade.executor.duration", unit="ms", description="Wall time of one execution"
        )
        # Tool names come from the executor's own registry, so the set is small and fixed.
        self._attrs: dict[tuple[str, str], dict[str, str]] = {}

    def record(self, tool: str, status: str, seconds: float) -> None:
        """Record one finished execution."""
        key = (tool, status)
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = {"tool": tool, "status": status}
            if len(self._attrs) < 256:
                self._attrs[key] = attrs
        self._executions.add(1, attrs)
        self._duration.record(seconds * 1000.0, attrs)
