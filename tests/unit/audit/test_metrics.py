"""X-1: the store reports events ingested (accepted / duplicate), ingestion latency and
queue depth through OpenTelemetry."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from stockade.audit.store.sqlite import AuditStore

from .conftest import EventFactory


def _points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, object], object]]]:
    out: dict[str, list[tuple[dict[str, object], object]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = getattr(point, "count", None)
                    out.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return out


async def test_store_metrics(
    db_path: Path, make_event: EventFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    store = await AuditStore.open(db_path, meter=provider.get_meter("test"))
    try:
        await store.append([make_event(i) for i in range(5)])
        await store.append([make_event(i) for i in range(3, 8)])
    finally:
        await store.close()
    points = _points(reader)
    ingested = {
        str(attrs["outcome"]): value for attrs, value in points["stockade.audit.events_ingested"]
    }
    assert ingested == {"accepted": 8, "duplicate": 2}
    assert points["stockade.audit.ingest_latency"][0][1] == 2  # two batches recorded
    assert [value for _, value in points["stockade.audit.queue_depth"]] == [0]
    provider.shutdown()
