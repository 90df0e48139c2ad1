"""PostgreSQL plumbing every store on it shares (STORE-1): connecting with errors mapped
to ``DependencyUnavailable`` (UNAVAILABLE: the caller fails closed), and versioned schema
migrations applied under an advisory lock so replicas starting together apply each
migration exactly once.

asyncpg is the driver (docs/decisions/0007: binary COPY, LISTEN/NOTIFY callbacks and a
pool in one dependency).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import asyncpg

from stockade.db.dsn import redact_dsn
from stockade.errors import DependencyUnavailable, InvalidArgument

log = logging.getLogger("stockade.db.postgres")

#: What a lost or unreachable server raises: callers map these to UNAVAILABLE.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
)
#: What opening a connection can raise besides: a refused login, a missing database.
_OPEN_ERRORS: tuple[type[Exception], ...] = (*CONNECTION_ERRORS, asyncpg.PostgresError)

#: A migration: (version, SQL). Versions grow by one; a released migration is never
#: edited (replicas already ran it), only followed by a new one.
Migration = tuple[int, str]


async def connect(
    dsn: str, *, what: str, application_name: str | None = None
) -> asyncpg.Connection:
    """One connection to ``dsn``; ``DependencyUnavailable`` naming ``what`` if it fails.

    The message carries the redacted DSN, never the password. ``application_name`` names
    the connection in ``pg_stat_activity`` (what an operator sees on the server).
    """
    settings = {"application_name": application_name} if application_name else None
    try:
        return await asyncpg.connect(dsn, server_settings=settings)
    except _OPEN_ERRORS as err:
        raise DependencyUnavailable(
            f"cannot reach the {what} database {redact_dsn(dsn)}: {err}"
        ) from err


async def open_pool(
    dsn: str,
    *,
    what: str,
    min_size: int = 1,
    max_size: int = 4,
    command_timeout: float | None = None,
    application_name: str | None = None,
) -> asyncpg.Pool:
    """A connection pool on ``dsn``; ``DependencyUnavailable`` naming ``what`` if it fails.

    ``command_timeout`` bounds every statement (``TimeoutError`` past it), so a database
    that hangs makes calls fail instead of piling up behind it.
    """
    if not 1 <= min_size <= max_size:
        raise InvalidArgument("pool sizes must satisfy 1 <= min_size <= max_size")
    try:
        return await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            command_timeout=command_timeout,
            server_settings={"application_name": application_name} if application_name else None,
        )
    except _OPEN_ERRORS as err:
        raise DependencyUnavailable(
            f"cannot reach the {what} database {redact_dsn(dsn)}: {err}"
        ) from err


def check_migrations(migrations: Sequence[Migration]) -> None:
    """Refuse a migration list whose versions are not 1, 2, 3 … (a programming error)."""
    versions = [version for version, _ in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migration versions must be 1..n in order, got {versions}")


async def migrate(
    conn: asyncpg.Connection,
    migrations: Sequence[Migration],
    *,
    version_table: str,
    lock_key: int,
) -> int:
    """Apply the missing ``migrations`` under advisory lock ``lock_key``; return the
    schema version.

    ``version_table`` records what was applied (one row per version); each migration runs
    in its own transaction with its version row, so a crash leaves no half-applied one.
    Two replicas starting together serialise on the lock: the second finds the work done.
    ``version_table`` is an identifier chosen by the caller's code, never by input.
    """
    check_migrations(migrations)
    if not version_table.replace("_", "").isalnum():
        raise ValueError(f"not a plain table name: {version_table!r}")
    await conn.execute("SELECT pg_advisory_lock($1)", lock_key)
    try:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {version_table}"
            " (version INTEGER PRIMARY KEY, applied_ns BIGINT NOT NULL)"
        )
        current = int(await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {version_table}"))
        for version, sql in migrations:
            if version <= current:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(
                    f"INSERT INTO {version_table} VALUES ($1, $2)", version, time.time_ns()
                )
            log.info("%s: applied schema migration %d", version_table, version)
            current = version
        return current
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", lock_key)
