"""PostgreSQL plumbing every store on it shares (STORE-1): connecting with errors mapped
to ``DependencyUnavailable`` (UNAVAILABLE: the caller fails closed), and versioned schema
migrations applied under an advisory lock so replicas starting together apply each
migration exactly once.

asyncpg is the driver (docs/decisions/0007: binary COPY, LISTEN/NOTIFY callbacks and a
pool in one dependency).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Sequence

import asyncpg

from stockade.db.dsn import check_transport, redact_dsn, scrub
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
    dsn: str, *, what: str, application_name: str | None = None, timeout: float = 60.0
) -> asyncpg.Connection:
    """One connection to ``dsn``; ``DependencyUnavailable`` naming ``what`` if it fails
    (or takes more than ``timeout`` seconds).

    The message carries the redacted DSN, never the password. ``application_name`` names
    the connection in ``pg_stat_activity`` (what an operator sees on the server).
    """
    check_transport(dsn, what=what)
    settings = {"application_name": application_name} if application_name else None
    try:
        return await asyncpg.connect(dsn, server_settings=settings, timeout=timeout)
    except _OPEN_ERRORS as err:
        raise unreachable(what, dsn, err) from err
    except ValueError as err:
        raise unparsable(what) from err


def keep_alive(conn: asyncpg.Connection, *, idle_s: int, interval_s: int, count: int) -> bool:
    """Make the kernel notice a dead server on ``conn`` (TCP only; True if applied).

    A connection that only listens sends nothing, so a server that vanished without a
    FIN or RST (a crashed host, a dropped network path: a half-open connection) goes
    unnoticed until something is sent. TCP keepalives probe after ``idle_s`` of silence,
    every ``interval_s``, and give up after ``count`` unanswered probes; the user timeout
    aborts the connection when data sent (a keepalive or a query) stays unacknowledged for
    ``(idle_s + interval_s * count)`` seconds. Either way the connection closes with an
    error, which the owner's termination listener sees. A unix socket has no such failure
    and is left alone.
    """
    transport = getattr(conn, "_transport", None)  # asyncpg keeps its transport here
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    return keep_alive_socket(sock, idle_s=idle_s, interval_s=interval_s, count=count)


def keep_alive_socket(sock: object, *, idle_s: int, interval_s: int, count: int) -> bool:
    """``keep_alive`` on a socket object (anything with ``setsockopt``)."""
    setsockopt = getattr(sock, "setsockopt", None)
    if setsockopt is None:
        return False
    options = [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), idle_s),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), interval_s),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), count),
        (
            socket.IPPROTO_TCP,
            getattr(socket, "TCP_USER_TIMEOUT", None),
            (idle_s + interval_s * count) * 1000,
        ),
    ]
    try:
        for level, option, value in options:
            if option is not None:  # not every platform has every option
                setsockopt(level, option, value)
    except OSError as err:
        log.warning("could not set TCP keepalives on a database connection: %s", err)
        return False
    return True


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
    check_transport(dsn, what=what)
    try:
        return await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            command_timeout=command_timeout,
            server_settings={"application_name": application_name} if application_name else None,
        )
    except _OPEN_ERRORS as err:
        raise unreachable(what, dsn, err) from err
    except ValueError as err:
        raise unparsable(what) from err


def unreachable(what: str, dsn: str, err: BaseException) -> DependencyUnavailable:
    """``DependencyUnavailable`` for a connection to ``dsn`` that failed with ``err``:
    why (a certificate for another host, an unknown CA, a refused login) with the DSN
    redacted and anything secret scrubbed from the driver's words."""
    reason = scrub(f"{type(err).__name__}: {err}", dsn)
    return DependencyUnavailable(f"cannot reach the {what} database {redact_dsn(dsn)}: {reason}")


def unparsable(what: str) -> InvalidArgument:
    """The DSN that asyncpg could not parse. Its message is not repeated: it may quote a
    piece of the DSN (a password with an unencoded delimiter reads as a port)."""
    return InvalidArgument(
        f"the {what} database DSN does not parse: percent-encode the user and password "
        "(urllib.parse.quote(value, safe='')) and check the host list and port",
        field="store_dsn",
    )


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
