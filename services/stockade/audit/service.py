"""The audit service as a runnable service."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from stockade.audit.backend import AuditBackend, parse_store_dsn, redact_dsn
from stockade.audit.heads import SignedHead
from stockade.audit.pg_store import PostgresAuditStore
from stockade.audit.servicer import AuditServicer
from stockade.audit.settings import AuditSettings
from stockade.audit.store import AuditStore
from stockade.errors import InvalidArgument
from stockade.server import Registration
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc

SERVICE_NAME = a_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name

log = logging.getLogger("stockade.audit")
#: Signed chain heads go to their own logger, so a pipeline can route them elsewhere.
heads_log = logging.getLogger("stockade.audit.heads")


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


async def export_head_once(
    store: AuditBackend, key: Ed25519PrivateKey, clock: Callable[[], int] = time.time_ns
) -> SignedHead:
    """Sign the chain's current head and log it (one line, ``HEAD_PREFIX`` + JSON)."""
    chain_id, sequence, digest = await store.chain_head()
    head = SignedHead(chain_id, sequence, digest, clock()).signed(key)
    heads_log.info("%s", head.log_message())
    return head


async def head_export_loop(store: AuditBackend, key: Ed25519PrivateKey, interval_s: float) -> None:
    """Export the signed head now and every ``interval_s`` seconds until cancelled."""
    while True:
        try:
            await export_head_once(store, key)
        except Exception:  # a failed export must not stop the service; the next one retries
            log.exception("chain head export failed")
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
        head_key = (
            load_head_key(self.settings.head_signing_key_file)
            if self.settings.head_signing_key_file is not None
            else None
        )
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
        tasks: list[asyncio.Task[None]] = []
        if self.settings.retention_days > 0:
            tasks.append(
                asyncio.create_task(
                    retention_loop(
                        store, self.settings.retention_days, self.settings.retention_interval_s
                    )
                )
            )
        if head_key is not None:
            tasks.append(
                asyncio.create_task(
                    head_export_loop(store, head_key, self.settings.head_export_interval_s)
                )
            )
        try:
            yield [
                Registration(
                    a_grpc.add_AuditServiceServicer_to_server, AuditServicer(store), SERVICE_NAME
                )
            ]
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if head_key is not None:
                with contextlib.suppress(Exception):  # the last head, as the drain leaves it
                    await export_head_once(store, head_key)
            await store.close()
