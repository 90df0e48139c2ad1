"""The audit service's composition root: opens the store the DSN names, builds the core
and the servicer, and runs the background duties (retention, signed chain heads)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from stockade.audit.core import AuditCore
from stockade.audit.heads import otel_head_sink
from stockade.audit.servicer import AuditServicer
from stockade.audit.settings import AuditSettings
from stockade.audit.store.base import AuditBackend, parse_store_dsn, redact_dsn
from stockade.audit.store.postgres import PostgresAuditStore
from stockade.audit.store.sqlite import AuditStore
from stockade.errors import InvalidArgument
from stockade.server import Registration, ServingState
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc

SERVICE_NAME = a_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name

log = logging.getLogger("stockade.audit")


async def every(interval_s: float, duty: Callable[[], Awaitable[object]], what: str) -> None:
    """Run ``duty`` now and every ``interval_s`` seconds until cancelled; a failure is
    logged and the next round retries (a duty must never stop the service)."""
    while True:
        try:
            await duty()
        except Exception:
            log.exception("%s failed", what)
        await asyncio.sleep(interval_s)


def load_head_key(path: Path) -> Ed25519PrivateKey:
    """The head-signing key; refuses a file that is not an Ed25519 private key."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise InvalidArgument(
            f"STOCKADE_AUDIT_HEAD_SIGNING_KEY_FILE: cannot load {path}: {err}",
            field="head_signing_key_file",
        ) from err
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidArgument(
            "STOCKADE_AUDIT_HEAD_SIGNING_KEY_FILE must hold an Ed25519 private key",
            field="head_signing_key_file",
        )
    return key


async def open_store(settings: AuditSettings, serving: ServingState | None = None) -> AuditBackend:
    """The store ``STOCKADE_AUDIT_STORE_DSN`` names (SQLite by default), opened; a
    PostgreSQL store reports its writer connection to ``serving`` (health)."""
    retention = f"{settings.retention_days:g} days" if settings.retention_days else "off"
    kind, target = parse_store_dsn(settings.store_dsn, settings.db_path)
    if kind == "postgresql":
        store: AuditBackend = await PostgresAuditStore.open(
            target,
            chain_id=settings.replica_id,
            on_connection_change=serving.set if serving is not None else None,
        )
        log.info(
            "audit store %s (PostgreSQL, chain %r, retention %s)",
            redact_dsn(target),
            settings.replica_id,
            retention,
        )
        return store
    store = await AuditStore.open(target, synchronous=settings.synchronous)
    log.info(
        "audit store %s (synchronous=%s, retention %s)", target, settings.synchronous, retention
    )
    return store


@dataclass
class AuditApp:
    """ServiceApp for the audit service."""

    settings: AuditSettings
    name: str = "audit"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Open the store, the core and its duties; close them after the drain."""
        settings = self.settings
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        head_key = (
            load_head_key(settings.head_signing_key_file)
            if settings.head_signing_key_file is not None
            else None
        )
        serving = ServingState()
        store = await open_store(settings, serving)
        # Signed heads leave the database's reach twice: a log line and an OpenTelemetry
        # log record (sent wherever OTEL_LOGS_EXPORTER points; nowhere when it is none).
        core = AuditCore(store, head_key=head_key, head_sinks=[otel_head_sink()])
        tasks: list[asyncio.Task[None]] = []
        if settings.retention_days > 0:
            days = settings.retention_days
            tasks.append(
                asyncio.create_task(
                    every(
                        settings.retention_interval_s,
                        lambda: core.apply_retention(days),
                        "retention sweep",
                    )
                )
            )
        if core.signs_heads:
            tasks.append(
                asyncio.create_task(
                    every(settings.head_export_interval_s, core.export_head, "chain head export")
                )
            )
        try:
            yield [
                Registration(
                    a_grpc.add_AuditServiceServicer_to_server,
                    AuditServicer(core),
                    SERVICE_NAME,
                    serving=serving,
                )
            ]
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if core.signs_heads:
                with contextlib.suppress(Exception):  # the last head, as the drain leaves it
                    await core.export_head()
            await store.close()
