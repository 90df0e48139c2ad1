"""The audit service as a runnable service."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from stockade.audit.backend import AuditBackend, parse_store_dsn, redact_dsn
from stockade.audit.pg_store import PostgresAuditStore
from stockade.audit.servicer import AuditServicer
from stockade.audit.settings import AuditSettings
from stockade.audit.store import AuditStore
from stockade.server import Registration
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc

SERVICE_NAME = a_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name

log = logging.getLogger("stockade.audit")


async def retention_loop(store: AuditBackend, days: float, interval_s: float) -> None:
    """Apply retention now and every ``interval_s`` seconds until cancelled."""
    while True:
        try:
            deleted = await store.apply_retention(days)
            if deleted:
                log.info("retention: deleted %d rows older than %s days", deleted, days)
        except Exception:  # a failed sweep must not stop the service; the next one retries
            log.exception("retention sweep failed")
        await asyncio.sleep(interval_s)


@dataclass
class AuditApp:
    """ServiceApp for the audit service."""

    settings: AuditSettings
    name: str = "audit"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Open the store the DSN names (and the retention sweep); close them after the
        drain."""
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        retention = (
            f"{self.settings.retention_days:g} days" if self.settings.retention_days else "off"
        )
        kind, target = parse_store_dsn(self.settings.store_dsn, self.settings.db_path)
        store: AuditBackend
        if kind == "postgresql":
            store = await PostgresAuditStore.open(target, chain_id=self.settings.replica_id)
            log.info(
                "audit store %s (PostgreSQL, chain %r, retention %s)",
                redact_dsn(target),
                self.settings.replica_id,
                retention,
            )
        else:
            store = await AuditStore.open(target, synchronous=self.settings.synchronous)
            log.info(
                "audit store %s (synchronous=%s, retention %s)",
                target,
                self.settings.synchronous,
                retention,
            )
        sweeper: asyncio.Task[None] | None = None
        if self.settings.retention_days > 0:
            sweeper = asyncio.create_task(
                retention_loop(
                    store, self.settings.retention_days, self.settings.retention_interval_s
                )
            )
        try:
            yield [
                Registration(
                    a_grpc.add_AuditServiceServicer_to_server, AuditServicer(store), SERVICE_NAME
                )
            ]
        finally:
            if sweeper is not None:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
            await store.close()
