"""Fixtures of the audit unit tests: an event builder and an open store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from stockade.audit.model import AuditEventRow
from stockade.audit.store import AuditStore

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


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[AuditStore]:
    """An open store on a fresh file, closed after the test."""
    opened = await AuditStore.open(db_path)
    try:
        yield opened
    finally:
        await opened.close()
