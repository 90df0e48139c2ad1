"""The audit service as a runnable service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from stockade.audit.servicer import AuditServicer
from stockade.audit.settings import AuditSettings
from stockade.audit.store import AuditStore
from stockade.server import Registration
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc

SERVICE_NAME = a_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name


@dataclass
class AuditApp:
    """ServiceApp for the audit service."""

    settings: AuditSettings
    name: str = "audit"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Open the SQLite store; close it after the server drained."""
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        store = await AuditStore.open(self.settings.db_path)
        try:
            servicer = AuditServicer(store)  # type: ignore[abstract]  # first cut
            yield [Registration(a_grpc.add_AuditServiceServicer_to_server, servicer, SERVICE_NAME)]
        finally:
            await store.close()
