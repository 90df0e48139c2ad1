"""``python -m stockade.audit``: run the audit service until SIGTERM."""

from __future__ import annotations

import gc

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.server import load_settings, serve

#: Allocations between young-generation collections (CPython's default is 700).
GC_YOUNG_THRESHOLD = 10_000


def main() -> int:
    """Load settings and serve."""
    settings = load_settings(AuditSettings)
    # Ingestion makes tens of thousands of short-lived containers a second (rows, the
    # values of each insert, the arguments' dicts), so the cycle collector runs often, and
    # each full collection walked every object of the loaded libraries (gRPC, protobuf,
    # OpenTelemetry, asyncpg) holding the GIL: measured, 2-3 µs of CPU per ingested event
    # and pauses that stall the writer. Objects alive now (the imported modules) are moved
    # out of the collector's reach for good, and young collections run less often; cycles
    # made later are still collected.
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    return serve([AuditApp(settings)], log_level=settings.log_level)


if __name__ == "__main__":
    raise SystemExit(main())
