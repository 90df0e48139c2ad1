"""OpenTelemetry instruments of the audit service (X-1, AUD-3); the client's own are in
``stockade.client.audit_metrics``.

Instruments come from the global meter provider; the server plumbing installs the
exporter, so without one they cost next to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from opentelemetry import metrics


@dataclass(frozen=True)
class StoreInstruments:
    """Instruments recorded by ``AuditStore``."""

    #: Events handled, attribute ``outcome`` = ``accepted`` | ``duplicate``.
    events_ingested: metrics.Counter
    #: Milliseconds from a batch arriving to its commit.
    ingest_latency: metrics.Histogram
    #: Batches waiting for the single writer.
    queue_depth: metrics.UpDownCounter


def store_instruments(meter: metrics.Meter | None = None) -> StoreInstruments:
    """The store's instruments on ``meter`` (default: the global one, created once)."""
    return _default_store_instruments() if meter is None else _store_instruments(meter)


@cache
def _default_store_instruments() -> StoreInstruments:
    return _store_instruments(metrics.get_meter("stockade.audit"))


def _store_instruments(meter: metrics.Meter) -> StoreInstruments:
    return StoreInstruments(
        events_ingested=meter.create_counter(
            "stockade.audit.events_ingested", unit="{event}", description="Audit events handled"
        ),
        ingest_latency=meter.create_histogram(
            "stockade.audit.ingest_latency",
            unit="ms",
            description="Time from a batch arriving to its commit",
        ),
        queue_depth=meter.create_up_down_counter(
            "stockade.audit.queue_depth",
            unit="{batch}",
            description="Batches waiting for the audit writer",
        ),
    )
