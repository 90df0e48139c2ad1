"""The decision store: one interface (``base.DecisionStore``), two backends, one setting.

``STOCKADE_DECISION_STORE_DSN`` picks the backend: unset or ``sqlite:///path`` for the
SQLite file (``sqlite.SQLiteDecisionStore``: one replica, the embedded default),
``postgresql://…`` for PostgreSQL (``postgres.PostgresDecisionStore``: any number of
interchangeable replicas). What the two share (records, checks, row mappers, the session
cache) is ``model``; only their SQL and what must hold across replicas differ.
"""

from __future__ import annotations

import logging

from stockade.db.dsn import parse_store_dsn, redact_dsn
from stockade.decision.store.base import DecisionStore, StoreListener
from stockade.decision.store.model import (
    DEFAULT_CACHE_MAX_SESSIONS,
    DEFAULT_MAX_SESSION_RULES,
    ApprovalRecord,
    ApprovalState,
    GrantRecord,
    PendingCall,
    SessionRecord,
)
from stockade.decision.store.postgres import PostgresDecisionStore
from stockade.decision.store.sqlite import SQLiteDecisionStore

__all__ = [
    "ApprovalRecord",
    "ApprovalState",
    "DecisionStore",
    "GrantRecord",
    "PendingCall",
    "PostgresDecisionStore",
    "SQLiteDecisionStore",
    "SessionRecord",
    "StoreListener",
    "open_decision_store",
]

log = logging.getLogger(__name__)


async def open_decision_store(
    dsn: str,
    default_sqlite_path: str,
    *,
    cache_max_sessions: int = DEFAULT_CACHE_MAX_SESSIONS,
    max_session_rules: int = DEFAULT_MAX_SESSION_RULES,
    pool_size: int = 10,
) -> DecisionStore:
    """Open the store ``dsn`` selects (``InvalidArgument`` for an unknown scheme)."""
    kind, target = parse_store_dsn(dsn, default_sqlite_path, setting="STOCKADE_DECISION_STORE_DSN")
    if kind == "postgresql":
        log.info("decision store %s (PostgreSQL, shared by replicas)", redact_dsn(target))
        return await PostgresDecisionStore.open(
            target,
            cache_max_sessions=cache_max_sessions,
            max_session_rules=max_session_rules,
            pool_size=pool_size,
        )
    log.info("decision store %s (SQLite, one replica)", target)
    return await SQLiteDecisionStore.open(
        target, cache_max_sessions=cache_max_sessions, max_session_rules=max_session_rules
    )
