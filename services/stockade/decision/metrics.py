"""OpenTelemetry metrics of the decision service (X-1): decisions by verdict, latency."""

from __future__ import annotations

from opentelemetry import metrics


class DecisionMetrics:
    """Counts decisions by verdict and step and records how long each took."""

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        meter = meter or metrics.get_meter("stockade.decision")
        self._decisions = meter.create_counter(
            "stockade.decision.decisions",
            unit="{decision}",
            description="Decisions by verdict and the step that settled them",
        )
        self._latency = meter.create_histogram(
            "stockade.decision.latency", unit="ms", description="Time to decide one call"
        )
        self._halts = meter.create_counter(
            "stockade.decision.halts", unit="{decision}", description="Decisions carrying halt"
        )

    def record(self, verdict: str, step: str, seconds: float, *, halt: bool = False) -> None:
        """Record one decision."""
        self._decisions.add(1, {"verdict": verdict, "step": step})
        self._latency.record(seconds * 1000.0, {"verdict": verdict})
        if halt:
            self._halts.add(1)
