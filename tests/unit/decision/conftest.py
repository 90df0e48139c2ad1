"""Fixtures of the decision unit tests: an opener of the decision store of each backend
(STORE-1, STORE-2): a fresh SQLite file, or a fresh database on the session's real
PostgreSQL server (tests/pg.py; never skipped)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from stockade.decision.store import DecisionStore, PostgresDecisionStore, SQLiteDecisionStore


@dataclass
class StoreOpener:
    """Opens the decision store of one backend at one place; on PostgreSQL each call is
    another replica on the same database. Everything opened is closed after the test."""

    kind: str
    target: str
    opened: list[DecisionStore] = field(default_factory=list)

    async def __call__(self, **options: Any) -> DecisionStore:
        """Open (again) the store; ``options`` go to the backend's ``open``."""
        store: DecisionStore
        if self.kind == "sqlite":
            store = await SQLiteDecisionStore.open(self.target, **options)
        else:
            store = await PostgresDecisionStore.open(self.target, pool_size=4, **options)
        self.opened.append(store)
        return store


@pytest.fixture(params=["sqlite", "postgresql"])
def decision_store_target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(backend, file or DSN): each test using it runs once per backend."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "decision.db")
    return "postgresql", str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def open_decision_store(
    decision_store_target: tuple[str, str],
) -> AsyncIterator[StoreOpener]:
    """An opener of the decision store of each backend; closes what it opened."""
    opener = StoreOpener(*decision_store_target)
    try:
        yield opener
    finally:
        for store in reversed(opener.opened):
            await store.close()


async def age_approvals(store: DecisionStore, seconds: float) -> None:
    """Let ``seconds`` pass on a shared store's clock for every stored approval: its
    creation, deadline, finish time and last waiter heartbeat move that far into the past.

    A shared store keeps these on the database's clock, which a test's fake clock does not
    move; a private store keeps them on its own clock (the test's fake one, which the test
    moves itself), so there is nothing to do there.
    """
    if isinstance(store, PostgresDecisionStore):
        dsn = store._dsn
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(
                "UPDATE decision_approvals SET waiter_seen = waiter_seen - $1, "
                "create_time = create_time - $1, expire_time = expire_time - $1, "
                "finish_time = finish_time - $1",
                seconds,
            )
        finally:
            await conn.close()
