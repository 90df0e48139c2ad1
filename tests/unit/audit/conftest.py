"""Fixtures of the audit unit tests: an event builder and an open store of each backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stockade.audit.model import AuditEventRow
from stockade.audit.store.base import AuditBackend
from stockade.audit.store.postgres import PostgresAuditStore
from stockade.audit.store.sqlite import AuditStore

BASE_NS = 1_700_000_000_000_000_000

EventFactory = Callable[..., AuditEventRow]


def build_event(n: int, session: str = "s1", **changes: object) -> AuditEventRow:
    """A valid OK event number ``n`` of ``session`` (any field overridable)."""
    fields: dict[str, object] = {
        "event_id": f"{session}-e{n}",
        "session_id": session,
        "step": n % 8,
        "tool_name": "read_file",
        "status": "OK",
        "elapsed_ms": n % 50,
        "output_preview": f"output {n}",
        "agent_name": "lead",
        "time_ns": BASE_NS + n * 1_000_000,
        "call_id": f"call-{n}",
        "verdict": "ALLOW",
        "matched_rule": "read_file(*)",
        "rule_source": "MANAGED",
        "trace_id": f"{n:032x}",
    }
    fields.update(changes)
    return AuditEventRow(**fields)  # type: ignore[arg-type]


@pytest.fixture
def make_event() -> EventFactory:
    """The event builder."""
    return build_event


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the test's audit database lives."""
    return tmp_path / "audit.db"


@dataclass(frozen=True)
class StoreOpener:
    """Opens the audit store of one backend at one place (a file, or a database)."""

    kind: str
    target: str

    async def __call__(self, *, chain_id: str = "replica-a", **options: Any) -> AuditBackend:
        """Open (again) the store; ``options`` go to the backend's ``open``."""
        if self.kind == "sqlite":
            return await AuditStore.open(self.target, **options)
        return await PostgresAuditStore.open(self.target, chain_id=chain_id, **options)


@pytest.fixture(params=["sqlite", "postgresql"])
def open_store(request: pytest.FixtureRequest, db_path: Path) -> StoreOpener:
    """Opens a store of each backend in turn (STORE-1): a fresh SQLite file, or a fresh
    database on the session's real PostgreSQL server."""
    if request.param == "sqlite":
        return StoreOpener("sqlite", str(db_path))
    return StoreOpener("postgresql", request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def store(open_store: StoreOpener) -> AsyncIterator[AuditBackend]:
    """An open store of each backend on a fresh file or database, closed after the test."""
    opened = await open_store()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def sqlite_store(db_path: Path) -> AsyncIterator[AuditStore]:
    """An open SQLite store on a fresh file (for what only SQLite has), closed after."""
    opened = await AuditStore.open(db_path)
    try:
        yield opened
    finally:
        await opened.close()
