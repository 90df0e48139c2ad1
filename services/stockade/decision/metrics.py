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
        self._classified = meter.create_counter(
            "stockade.decision.classifier.verdicts",
            unit="{verdict}",
            description="auto mode classifier verdicts by outcome (allow, block, unsure, or "
            "the failure that made it unsure: timeout, rate_limited, unreachable, malformed, "
            "budget) and whether the cache answered",
        )
        self._classifier_latency = meter.create_histogram(
            "stockade.decision.classifier.latency",
            unit="ms",
            description="Time the classifier's model took to answer (cache hits excluded)",
        )

        # Attribute sets are few (verdict × step): built once and reused, never mutated,
        # so a decision does not allocate two dicts for its metrics.
        self._step_attrs: dict[tuple[str, str], dict[str, str]] = {}
        self._verdict_attrs: dict[str, dict[str, str]] = {}

    def record(self, verdict: str, step: str, seconds: float, *, halt: bool = False) -> None:
        """Record one decision."""
        key = (verdict, step)
        attrs = self._step_attrs.get(key)
        if attrs is None:
            attrs = {"verdict": verdict, "step": step}
            if len(self._step_attrs) < 256:  # values come from the engine; bound anyway
                self._step_attrs[key] = attrs
        self._decisions.add(1, attrs)
        lat_attrs = self._verdict_attrs.get(verdict)
        if lat_attrs is None:
            lat_attrs = {"verdict": verdict}
            if len(self._verdict_attrs) < 16:
                self._verdict_attrs[verdict] = lat_attrs
        self._latency.record(seconds * 1000.0, lat_attrs)
        if halt:
            self._halts.add(1)

    def record_classifier(self, outcome: str, latency_s: float, *, cached: bool) -> None:
        """Record one auto mode classification (DEC-17)."""
        self._classified.add(1, {"outcome": outcome, "cached": cached})
        if not cached:
            self._classifier_latency.record(latency_s * 1000.0, {"outcome": outcome})
