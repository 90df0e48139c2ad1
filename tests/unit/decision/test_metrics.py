"""Decision metrics (X-1) through a real OpenTelemetry SDK reader."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from stockade.decision.metrics import DecisionMetrics


def test_decisions_are_counted_by_verdict_and_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # the suite disables the SDK
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    m = DecisionMetrics(provider.get_meter("test"))
    m.record("allow", "P7", 0.001)
    m.record("deny", "P0", 0.002, halt=True)
    m.record("deny", "P0", 0.003)
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        metric.name: list(metric.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    counts: dict[tuple[object, object], object] = {}
    for p in points["stockade.decision.decisions"]:
        attrs: Any = getattr(p, "attributes", {})
        counts[(attrs["verdict"], attrs["step"])] = getattr(p, "value", None)
    assert counts == {("allow", "P7"): 1, ("deny", "P0"): 2}
    assert sum(getattr(p, "value", 0) for p in points["stockade.decision.halts"]) == 1
    assert sum(getattr(p, "count", 0) for p in points["stockade.decision.latency"]) == 3
    provider.shutdown()
