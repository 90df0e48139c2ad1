"""OpenTelemetry instruments of the audit client: its spool and send queue (X-1, AUD-3).

The client counts its own work, so these live with the client (the audit service's
instruments are in ``stockade.audit.metrics``). Instruments come from the global meter
provider; without an exporter installed they cost next to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from opentelemetry import metrics


@dataclass(frozen=True)
class ClientInstruments:
    """Instruments recorded by the audit client."""

    #: Events held in memory (the spool could not be written), not yet sent.
    queue_depth: metrics.UpDownCounter
    #: Events in the local spool file, not yet acknowledged.
    spool_size: metrics.UpDownCounter
    #: Events acknowledged by the service.
    events_sent: metrics.Counter
    #: Events refused as malformed or too big (kept in the dead-letter file).
    events_refused: metrics.Counter


def client_instruments(meter: metrics.Meter | None = None) -> ClientInstruments:
    """The client's instruments on ``meter`` (default: the global one, created once)."""
    return _default_client_instruments() if meter is None else _client_instruments(meter)


@cache
def _default_client_instruments() -> ClientInstruments:
    return _client_instruments(metrics.get_meter("stockade.audit.client"))


def _client_instruments(meter: metrics.Meter) -> ClientInstruments:
    return ClientInstruments(
        queue_depth=meter.create_up_down_counter(
            "stockade.audit.client.queue_depth",
            unit="{event}",
            description="Audit events held in memory because the spool cannot be written",
        ),
        spool_size=meter.create_up_down_counter(
            "stockade.audit.client.spool_size",
            unit="{event}",
            description="Audit events in the client's spool, not yet acknowledged",
        ),
        events_sent=meter.create_counter(
            "stockade.audit.client.events_sent",
            unit="{event}",
            description="Audit events acknowledged by the service",
        ),
        events_refused=meter.create_counter(
            "stockade.audit.client.events_refused",
            unit="{event}",
            description="Audit events refused as malformed or too big (dead-lettered)",
        ),
    )
