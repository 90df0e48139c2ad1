"""The executor's shared state on PostgreSQL, for many executor replicas (STORE-3).

The executor is the most exposed component (it runs the model's commands), so its
database role gets no table rights at all. Everything lives in the schema
``stockade_executor``, owned by an administrator's role; the executor's role is given
``USAGE`` on the schema and ``EXECUTE`` on four ``SECURITY DEFINER`` functions:

- ``spend_grant(id, expires)`` → whether the grant was fresh (an ``INSERT … ON CONFLICT
  DO NOTHING``: the unique key is the single arbiter across replicas);
- ``record_read(session, path, mtime_ns, size, sha256)`` and ``last_read(session, path)``
  for read-before-edit (EXE-11);
- ``state_version()``, so an executor can tell a schema it does not know.

It cannot select, update or delete a row, nor create anything. The functions bound their
inputs, prune expired rows in small batches (``FOR UPDATE SKIP LOCKED``, so replicas never
wait on each other's pruning), and read time from the database's clock, never from the
caller. ``stockade executor-state migrate --dsn ADMIN_DSN --role ROLE`` applies the schema
and grants; an executor whose DSN may create the schema itself (a development database)
applies it at start, under an advisory lock so replicas starting together do not race.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg

from stockade.db.dsn import check_transport, redact_dsn, scrub
from stockade.db.postgres import CONNECTION_ERRORS, connect, unparsable
from stockade.db.postgres import migrate as apply_migrations
from stockade.errors import (
    DependencyUnavailable,
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
)
from stockade.executor.readstate import (
    MAX_READS_PER_SESSION,
    FileStamp,
    ReadLedger,
    reads_exhausted,
)
from stockade.executor.state import (
    MAX_GRANT_ID,
    MAX_GRANT_LIFETIME_S,
    MAX_PATH,
    MAX_SESSION_ID,
    PRUNE_BATCH,
    PRUNE_MARGIN_S,
    READ_TTL_S,
    STORE_WAIT_S,
    StoreReadState,
    _check_bounds,
)

__all__ = [
    "LATEST",
    "MIGRATIONS",
    "SCHEMA",
    "PostgresExecutorState",
    "grant_role",
    "migrate",
    "run_migrate",
]

log = logging.getLogger("stockade.executor.state")

SCHEMA = "stockade_executor"
#: Which migrations were applied (``stockade.db.postgres.migrate``'s table, in the default
#: schema; the executor's role reads the version only through ``state_version()``).
VERSION_TABLE = "stockade_executor_schema_version"
#: Advisory lock key for migrations (the audit store's namespace, another number).
_MIGRATION_LOCK = 0x53544B_0101
#: Advisory lock class (two-key form) of one session's read records: the per-session
#: limit's count and insert run under it (migration 3).
_READS_LOCK_CLASS = 0x53544B04

_CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    *CONNECTION_ERRORS,
    TimeoutError,
    # A connection the server terminated while idle can be left mid-protocol in the pool:
    # the next use says so with this; it is no answer either.
    asyncpg.InternalClientError,
)

#: What opening the pool can raise: the connection errors, a refused login, a bad DSN.
_OPEN_ERRORS: tuple[type[Exception], ...] = (*_CONNECTION_ERRORS, asyncpg.PostgresError)

#: The functions the executor's role may call, with their argument types (for GRANT).
FUNCTIONS: tuple[str, ...] = (
    f"{SCHEMA}.state_version()",
    f"{SCHEMA}.spend_grant(text, double precision)",
    f"{SCHEMA}.record_read(text, text, bigint, bigint, text)",
    f"{SCHEMA}.last_read(text, text)",
)

_Conn = asyncpg.Connection | asyncpg.pool.PoolConnectionProxy

_DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, pg_temp"

#: Versioned migrations, applied in order, each in its own transaction (append only).
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        f"""
CREATE SCHEMA {SCHEMA};
-- Nobody but the owner reaches the schema unless granted (a new schema gives PUBLIC
-- nothing; said anyway, so a pre-created schema is closed too).
REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC;
CREATE TABLE {SCHEMA}.spent_grant (
  grant_id TEXT PRIMARY KEY,
  expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX spent_grant_expiry ON {SCHEMA}.spent_grant (expires_at);
CREATE TABLE {SCHEMA}.read_state (
  session_id TEXT NOT NULL,
  path TEXT NOT NULL,
  mtime_ns BIGINT NOT NULL,
  size BIGINT NOT NULL,
  sha256 TEXT NOT NULL,
  read_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (session_id, path)
);
CREATE INDEX read_state_age ON {SCHEMA}.read_state (read_at);

CREATE FUNCTION {SCHEMA}.spend_grant(p_id TEXT, p_expires DOUBLE PRECISION)
RETURNS BOOLEAN LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
  now_s DOUBLE PRECISION := extract(epoch FROM clock_timestamp());
BEGIN
  IF p_id IS NULL OR length(p_id) NOT BETWEEN 1 AND {MAX_GRANT_ID} THEN
    RAISE EXCEPTION 'grant id must be 1-{MAX_GRANT_ID} characters' USING ERRCODE = '22023';
  END IF;
  IF p_expires IS NULL OR p_expires > now_s + {MAX_GRANT_LIFETIME_S} THEN
    RAISE EXCEPTION 'grant expiry out of range' USING ERRCODE = '22023';
  END IF;
  DELETE FROM {SCHEMA}.spent_grant WHERE grant_id = ANY(ARRAY(
    SELECT grant_id FROM {SCHEMA}.spent_grant WHERE expires_at < now_s - {PRUNE_MARGIN_S}
    LIMIT {PRUNE_BATCH} FOR UPDATE SKIP LOCKED));
  INSERT INTO {SCHEMA}.spent_grant VALUES (p_id, p_expires) ON CONFLICT DO NOTHING;
  RETURN FOUND;
END $$;

CREATE FUNCTION {SCHEMA}.record_read(
  p_session TEXT, p_path TEXT, p_mtime BIGINT, p_size BIGINT, p_sha TEXT)
RETURNS VOID LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
  now_s DOUBLE PRECISION := extract(epoch FROM clock_timestamp());
BEGIN
  IF p_session IS NULL OR length(p_session) NOT BETWEEN 1 AND {MAX_SESSION_ID}
     OR p_path IS NULL OR length(p_path) NOT BETWEEN 1 AND {MAX_PATH}
     OR p_sha IS NULL OR length(p_sha) <> 64 OR p_mtime IS NULL OR p_size IS NULL THEN
    RAISE EXCEPTION 'read record out of bounds' USING ERRCODE = '22023';
  END IF;
  DELETE FROM {SCHEMA}.read_state WHERE (session_id, path) IN (
    SELECT session_id, path FROM {SCHEMA}.read_state WHERE read_at < now_s - {READ_TTL_S}
    LIMIT {PRUNE_BATCH} FOR UPDATE SKIP LOCKED);
  INSERT INTO {SCHEMA}.read_state VALUES (p_session, p_path, p_mtime, p_size, p_sha, now_s)
  ON CONFLICT (session_id, path) DO UPDATE SET mtime_ns = excluded.mtime_ns,
    size = excluded.size, sha256 = excluded.sha256, read_at = excluded.read_at;
END $$;

CREATE FUNCTION {SCHEMA}.last_read(p_session TEXT, p_path TEXT)
RETURNS TABLE (mtime_ns BIGINT, size BIGINT, sha256 TEXT)
LANGUAGE sql STABLE {_DEFINER} AS $$
  SELECT r.mtime_ns, r.size, r.sha256 FROM {SCHEMA}.read_state r
  WHERE r.session_id = p_session AND r.path = p_path
    AND r.read_at >= extract(epoch FROM clock_timestamp()) - {READ_TTL_S}
$$;

CREATE FUNCTION {SCHEMA}.state_version() RETURNS INTEGER
LANGUAGE sql STABLE {_DEFINER} AS $$ SELECT max(version) FROM public.{VERSION_TABLE} $$;

-- Functions are executable by PUBLIC by default: only the roles granted may call them.
REVOKE ALL ON FUNCTION {FUNCTIONS[0]} FROM PUBLIC;
REVOKE ALL ON FUNCTION {FUNCTIONS[1]} FROM PUBLIC;
REVOKE ALL ON FUNCTION {FUNCTIONS[2]} FROM PUBLIC;
REVOKE ALL ON FUNCTION {FUNCTIONS[3]} FROM PUBLIC;
""",
    ),
    (
        2,
        # The per-session limit of files on record (EXE-11): a new path past it is
        # refused with program_limit_exceeded; a path on record is updated. CREATE OR
        # REPLACE keeps the function's owner and grants.
        f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.record_read(
  p_session TEXT, p_path TEXT, p_mtime BIGINT, p_size BIGINT, p_sha TEXT)
RETURNS VOID LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
  now_s DOUBLE PRECISION := extract(epoch FROM clock_timestamp());
BEGIN
  IF p_session IS NULL OR length(p_session) NOT BETWEEN 1 AND {MAX_SESSION_ID}
     OR p_path IS NULL OR length(p_path) NOT BETWEEN 1 AND {MAX_PATH}
     OR p_sha IS NULL OR length(p_sha) <> 64 OR p_mtime IS NULL OR p_size IS NULL THEN
    RAISE EXCEPTION 'read record out of bounds' USING ERRCODE = '22023';
  END IF;
  DELETE FROM {SCHEMA}.read_state WHERE (session_id, path) IN (
    SELECT session_id, path FROM {SCHEMA}.read_state WHERE read_at < now_s - {READ_TTL_S}
    LIMIT {PRUNE_BATCH} FOR UPDATE SKIP LOCKED);
  IF NOT EXISTS (SELECT 1 FROM {SCHEMA}.read_state
                 WHERE session_id = p_session AND path = p_path)
     AND (SELECT count(*) FROM {SCHEMA}.read_state
          WHERE session_id = p_session AND read_at >= now_s - {READ_TTL_S})
         >= {MAX_READS_PER_SESSION} THEN
    RAISE EXCEPTION 'session has {MAX_READS_PER_SESSION} files on record'
      USING ERRCODE = '54000';
  END IF;
  INSERT INTO {SCHEMA}.read_state VALUES (p_session, p_path, p_mtime, p_size, p_sha, now_s)
  ON CONFLICT (session_id, path) DO UPDATE SET mtime_ns = excluded.mtime_ns,
    size = excluded.size, sha256 = excluded.sha256, read_at = excluded.read_at;
END $$;
""",
    ),
    (
        3,
        # The limit is exact under concurrency: the count and the insert run under a
        # transaction-scoped advisory lock on the session (class _READS_LOCK_CLASS, key
        # hashtext of the session id), so two new reads of one session, on any replicas,
        # never both see room for one. Reads of other sessions do not wait (a hash
        # collision only serialises two sessions' reads); a path already on record is
        # updated under the lock as well, which costs one uncontended lock.
        f"""
CREATE OR REPLACE FUNCTION {SCHEMA}.record_read(
  p_session TEXT, p_path TEXT, p_mtime BIGINT, p_size BIGINT, p_sha TEXT)
RETURNS VOID LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
  now_s DOUBLE PRECISION := extract(epoch FROM clock_timestamp());
BEGIN
  IF p_session IS NULL OR length(p_session) NOT BETWEEN 1 AND {MAX_SESSION_ID}
     OR p_path IS NULL OR length(p_path) NOT BETWEEN 1 AND {MAX_PATH}
     OR p_sha IS NULL OR length(p_sha) <> 64 OR p_mtime IS NULL OR p_size IS NULL THEN
    RAISE EXCEPTION 'read record out of bounds' USING ERRCODE = '22023';
  END IF;
  DELETE FROM {SCHEMA}.read_state WHERE (session_id, path) IN (
    SELECT session_id, path FROM {SCHEMA}.read_state WHERE read_at < now_s - {READ_TTL_S}
    LIMIT {PRUNE_BATCH} FOR UPDATE SKIP LOCKED);
  PERFORM pg_advisory_xact_lock({_READS_LOCK_CLASS}, hashtext(p_session));
  -- The clock is read again under the lock: a wait for it must not make the records
  -- this call compares against look younger than they are.
  now_s := extract(epoch FROM clock_timestamp());
  IF NOT EXISTS (SELECT 1 FROM {SCHEMA}.read_state
                 WHERE session_id = p_session AND path = p_path)
     AND (SELECT count(*) FROM {SCHEMA}.read_state
          WHERE session_id = p_session AND read_at >= now_s - {READ_TTL_S})
         >= {MAX_READS_PER_SESSION} THEN
    RAISE EXCEPTION 'session has {MAX_READS_PER_SESSION} files on record'
      USING ERRCODE = '54000';
  END IF;
  INSERT INTO {SCHEMA}.read_state VALUES (p_session, p_path, p_mtime, p_size, p_sha, now_s)
  ON CONFLICT (session_id, path) DO UPDATE SET mtime_ns = excluded.mtime_ns,
    size = excluded.size, sha256 = excluded.sha256, read_at = excluded.read_at;
END $$;
""",
    ),
)
LATEST = MIGRATIONS[-1][0]


async def migrate(conn: _Conn) -> int:
    """Bring the schema to the latest version (under the shared advisory-lock migration
    of ``stockade.db.postgres``); returns the version now. Needs a role that may create
    the schema; refuses a database migrated by a newer executor."""
    version = await apply_migrations(
        conn,  # type: ignore[arg-type]  # a pool's connection proxy works alike
        MIGRATIONS,
        version_table=VERSION_TABLE,
        lock_key=_MIGRATION_LOCK,
    )
    if version > LATEST:
        raise FailedPrecondition(
            f"executor state schema version {version} is newer than this executor ({LATEST})"
        )
    return version


async def grant_role(conn: _Conn, role: str) -> None:
    """Let ``role`` use the executor state: USAGE on the schema, EXECUTE on the functions,
    nothing else."""
    quoted = await conn.fetchval("SELECT quote_ident($1)", role)
    await conn.execute(f"GRANT USAGE ON SCHEMA {SCHEMA} TO {quoted}")
    for function in FUNCTIONS:
        await conn.execute(f"GRANT EXECUTE ON FUNCTION {function} TO {quoted}")


async def run_migrate(dsn: str, roles: list[str]) -> int:
    """Connect with an administrator's ``dsn``, migrate, and grant each of ``roles`` the
    use of the state; returns the schema version. Errors name no password."""
    conn = await connect(dsn, what="executor state")
    try:
        version = await migrate(conn)
        for role in roles:
            await grant_role(conn, role)
        return version
    finally:
        await conn.close()


def _unavailable(dsn: str, exc: BaseException) -> DependencyUnavailable:
    return DependencyUnavailable(
        f"executor state store {redact_dsn(dsn)} is unreachable: {type(exc).__name__}"
    )


class PostgresExecutorState:
    """Spent grants and reads in PostgreSQL, shared by every executor replica."""

    shared = True

    def __init__(self, pool: asyncpg.Pool, dsn: str, *, wait_s: float = STORE_WAIT_S) -> None:
        """Use ``pool`` (see :meth:`open`); a call waits at most ``wait_s`` for it."""
        self._pool = pool
        self._dsn = dsn
        self._wait_s = wait_s
        self.description = f"postgresql:{redact_dsn(dsn)}"

    @classmethod
    async def open(
        cls, dsn: str, *, max_size: int = 8, wait_s: float = STORE_WAIT_S
    ) -> PostgresExecutorState:
        """Connect and check the schema; migrate it when it is older and this role may.

        Raises ``DependencyUnavailable`` when the server cannot be reached and
        ``FailedPrecondition`` when the schema is missing or old and this role may not
        create it (run ``stockade executor-state migrate`` with an administrator's DSN).
        """
        check_transport(dsn, what="executor state")
        try:
            pool = await asyncpg.create_pool(
                dsn,
                min_size=1,
                max_size=max_size,
                timeout=wait_s,
                command_timeout=wait_s,
            )
        except _OPEN_ERRORS as exc:
            # At start-up the operator reads this: say why (a certificate for another
            # host, an unknown CA, a refused login), the DSN redacted and the driver's
            # words scrubbed. Calls after start-up keep _unavailable's kind-only message
            # (callers see those).
            reason = scrub(f"{exc.__class__.__name__}: {exc}", dsn)
            raise DependencyUnavailable(
                f"executor state store {redact_dsn(dsn)} is unreachable: {reason}"
            ) from exc
        except ValueError as exc:  # a DSN asyncpg cannot parse; its words may quote it
            raise unparsable("executor state") from exc
        try:
            async with pool.acquire() as conn:
                version = await cls._version(conn)
                if version > LATEST:
                    raise FailedPrecondition(
                        f"executor state schema version {version} is newer than this "
                        f"executor ({LATEST})"
                    )
                if version < LATEST:
                    try:
                        await migrate(conn)
                    except asyncpg.InsufficientPrivilegeError as exc:
                        raise FailedPrecondition(
                            f"the executor state schema is at version {version}, this "
                            f"executor needs {LATEST}, and its database role may not create "
                            "it: run `stockade executor-state migrate --dsn ADMIN_DSN --role "
                            "ROLE` first"
                        ) from exc
        except BaseException:
            await pool.close()
            raise
        return cls(pool, dsn, wait_s=wait_s)

    @staticmethod
    async def _version(conn: _Conn) -> int:
        try:
            value = await conn.fetchval(f"SELECT {SCHEMA}.state_version()")
        except (asyncpg.UndefinedFunctionError, asyncpg.InvalidSchemaNameError):
            return 0
        except asyncpg.InsufficientPrivilegeError as exc:
            raise FailedPrecondition(
                "the executor's database role may not use the executor state: run "
                "`stockade executor-state migrate --dsn ADMIN_DSN --role ROLE`"
            ) from exc
        return int(value or 0)

    async def _call(self, method: str, query: str, *args: Any) -> Any:
        try:
            async with self._pool.acquire(timeout=self._wait_s) as conn:
                return await getattr(conn, method)(query, *args)
        except _CONNECTION_ERRORS as exc:
            raise _unavailable(self._dsn, exc) from exc
        except asyncpg.DataError as exc:
            raise InvalidArgument(f"executor state: {exc}") from exc
        except asyncpg.ProgramLimitExceededError as exc:
            raise ResourceExhausted(f"executor state: {exc}") from exc
        except asyncpg.PostgresError as exc:
            # Anything else the server says (a revoked right, a dropped function) is no
            # answer either: refuse, never treat it as "fresh".
            raise DependencyUnavailable(
                f"executor state store: {exc.__class__.__name__}: {exc}"
            ) from exc

    async def spend_grant(self, grant_id: str, expires_at: float) -> bool:
        """See ``ExecutorState.spend_grant``."""
        _check_bounds(grant_id)
        fresh = await self._call(
            "fetchval", f"SELECT {SCHEMA}.spend_grant($1, $2)", grant_id, expires_at
        )
        return fresh is True

    async def record_read(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """See ``ExecutorState.record_read`` (past the session's limit of files on record:
        ``ResourceExhausted``, enforced by the function)."""
        _check_bounds(None, session_id, path)
        try:
            await self._record(session_id, path, stamp)
        except ResourceExhausted:
            raise reads_exhausted(session_id) from None

    async def _record(self, session_id: str, path: str, stamp: FileStamp) -> None:
        await self._call(
            "execute",
            f"SELECT {SCHEMA}.record_read($1, $2, $3, $4, $5)",
            session_id,
            path,
            stamp.mtime_ns,
            stamp.size,
            stamp.sha256,
        )

    async def last_read(self, session_id: str, path: str) -> FileStamp | None:
        """See ``ExecutorState.last_read``."""
        _check_bounds(None, session_id, path)
        row = await self._call(
            "fetchrow", f"SELECT * FROM {SCHEMA}.last_read($1, $2)", session_id, path
        )
        if row is None:
            return None
        return FileStamp(int(row["mtime_ns"]), int(row["size"]), str(row["sha256"]))

    def read_ledger(self, loop: asyncio.AbstractEventLoop) -> ReadLedger:
        """See ``ExecutorState.read_ledger``: the tools wait for the server from a worker
        thread (``StoreReadState``)."""
        return StoreReadState(self, loop, wait_s=self._wait_s)

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()
