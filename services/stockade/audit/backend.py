"""The audit store interface and the choice of backend by one DSN (STORE-1).

``AuditBackend`` is what the servicer and the service need from a store; ``AuditStore``
(SQLite: one node, the embedded default) and ``PostgresAuditStore`` (several replicas on
one PostgreSQL) both provide it. ``STOCKADE_AUDIT_STORE_DSN`` picks one: unset or
``sqlite:///path`` for SQLite, ``postgresql://…`` (or ``postgres://…``) for PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

from stockade.audit.model import (
    AppendResult,
    AuditEventRow,
    QueryFilters,
    SessionMetrics,
    StoredRow,
    VerifyResult,
)
from stockade.errors import InvalidArgument

Kind = Literal["sqlite", "postgresql"]


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
    """Which backend ``dsn`` selects and what to open it with (a file or a libpq DSN)."""
    dsn = dsn.strip()
    if not dsn:
        return "sqlite", default_sqlite_path
    scheme = urlsplit(dsn).scheme.lower()
    if scheme == "sqlite":
        # sqlite:///abs/path (three slashes: no host); sqlite:// alone is the default file.
        path = dsn[len("sqlite://") :]
        return "sqlite", path or default_sqlite_path
    if scheme in {"postgresql", "postgres"}:
        return "postgresql", dsn
    raise InvalidArgument(
        "STOCKADE_AUDIT_STORE_DSN must be empty, sqlite:///path or postgresql://…",
        field="store_dsn",
    )


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password (in the authority or the query), for logs."""
    parts = urlsplit(dsn)
    netloc = parts.netloc
    if parts.password is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{parts.username or ''}:***@{host}"
    query = "&".join(
        f"{key}=***" if key.lower() in {"password", "passfile", "sslpassword"} else item
        for item in parts.query.split("&")
        if item
        for key in [item.partition("=")[0]]
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))
