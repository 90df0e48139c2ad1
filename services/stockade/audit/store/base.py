"""The audit store interface and the choice of backend by one DSN (STORE-1).

``AuditBackend`` is what the servicer and the service need from a store; ``AuditStore``
(SQLite: one node, the embedded default) and ``PostgresAuditStore`` (several replicas on
one PostgreSQL) both provide it. ``STOCKADE_AUDIT_STORE_DSN`` picks one: unset or
``sqlite:///path`` for SQLite, ``postgresql://…`` (or ``postgres://…``) for PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from stockade.audit.model import (
    AppendResult,
    AuditEventRow,
    QueryFilters,
    SessionMetrics,
    StoredRow,
    VerifyResult,
)
from stockade.db import dsn as db_dsn
from stockade.db.dsn import Kind, redact_dsn

__all__ = ["AuditBackend", "Kind", "parse_store_dsn", "redact_dsn"]


class AuditBackend(Protocol):
    """What every audit store offers (see ``AuditStore`` for the behaviour)."""

    @property
    def head_sequence(self) -> int:
        """Sequence of the last stored row this store knows of."""

    async def append(self, events: Sequence[AuditEventRow]) -> AppendResult:
        """Store a batch, idempotent by event id."""

    async def apply_retention(self, days: float, *, now_ns: int | None = None) -> int:
        """Delete rows stored more than ``days`` ago; return how many."""

    async def query(
        self, filters: QueryFilters, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[StoredRow], str]:
        """A page of matching rows, newest first, and the next page token."""

    def tail(
        self, session_id: str = "", *, after: int | None = None, batch: int = 500
    ) -> AsyncIterator[StoredRow]:
        """Rows as they are committed, until the store closes."""

    async def session_metrics(self, session_id: str) -> SessionMetrics:
        """One session's metrics."""

    async def verify(self) -> VerifyResult:
        """Check the hash chain(s)."""

    async def chain_head(self) -> tuple[str, int, str]:
        """(chain id, head position, head hash) of the chain this store appends to."""

    async def row_hash_at(self, chain_id: str, position: int) -> str | None:
        """A chain's stored hash at ``position`` (``""``: deleted by retention)."""

    async def close(self) -> None:
        """Close the store."""


def parse_store_dsn(dsn: str, default_sqlite_path: str) -> tuple[Kind, str]:
    """Which backend ``STOCKADE_AUDIT_STORE_DSN`` selects (see ``stockade.db.dsn``)."""
    return db_dsn.parse_store_dsn(dsn, default_sqlite_path, setting="STOCKADE_AUDIT_STORE_DSN")
