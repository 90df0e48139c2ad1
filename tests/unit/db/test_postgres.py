"""The shared PostgreSQL plumbing (stockade.db): migrations under the advisory lock,
connection errors as UNAVAILABLE with the password kept out, DSN choice and redaction."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from stockade.db.dsn import parse_store_dsn, redact_dsn
from stockade.db.postgres import check_migrations, connect, migrate, open_pool
from stockade.errors import DependencyUnavailable, InvalidArgument

_LOCK = 0x7E57_0001
_MIGRATIONS = (
    (1, "CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)"),
    (2, "ALTER TABLE t ADD COLUMN label TEXT NOT NULL DEFAULT ''"),
    # Not idempotent: applying it twice would add two rows (a race would show).
    (3, "INSERT INTO t VALUES (1, 0, 'once')"),
)


async def test_replicas_migrating_together_apply_each_version_once(pg_dsn: str) -> None:
    conns = [await asyncpg.connect(pg_dsn) for _ in range(4)]
    try:
        versions = await asyncio.gather(
            *(migrate(c, _MIGRATIONS, version_table="t_version", lock_key=_LOCK) for c in conns)
        )
        assert versions == [3, 3, 3, 3]
        assert await conns[0].fetchval("SELECT count(*) FROM t") == 1
        applied = await conns[0].fetch("SELECT version FROM t_version ORDER BY version")
        assert [r[0] for r in applied] == [1, 2, 3]
        # A later release adds a migration: only the new one runs.
        more = (*_MIGRATIONS, (4, "UPDATE t SET n = n + 1"))
        assert await migrate(conns[1], more, version_table="t_version", lock_key=_LOCK) == 4
        assert await migrate(conns[2], more, version_table="t_version", lock_key=_LOCK) == 4
        assert await conns[0].fetchval("SELECT n FROM t") == 1
        # The lock is released afterwards (nobody holds it).
        assert await conns[3].fetchval("SELECT pg_try_advisory_lock($1)", _LOCK) is True
    finally:
        for c in conns:
            await c.close()


async def test_a_failing_migration_leaves_nothing_half_applied(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        broken = (*_MIGRATIONS, (4, "ALTER TABLE t ADD COLUMN x INT; SELECT no_such_fn()"))
        with pytest.raises(asyncpg.PostgresError):
            await migrate(conn, broken, version_table="t_version", lock_key=_LOCK)
        assert await conn.fetchval("SELECT max(version) FROM t_version") == 3
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 't'"
        )
        assert "x" not in {r[0] for r in columns}
        # The failure released the lock too.
        assert await conn.fetchval("SELECT pg_try_advisory_lock($1)", _LOCK) is True
    finally:
        await conn.close()


def test_migration_lists_and_table_names_are_checked() -> None:
    check_migrations(_MIGRATIONS)
    for bad in [((2, "x"),), ((1, "x"), (3, "y")), ((1, "x"), (1, "y"))]:
        with pytest.raises(ValueError, match="1..n"):
            check_migrations(bad)


async def test_migrate_refuses_a_table_name_that_is_not_an_identifier(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        with pytest.raises(ValueError, match="plain table name"):
            await migrate(conn, _MIGRATIONS, version_table="t; DROP TABLE x", lock_key=_LOCK)
    finally:
        await conn.close()


async def test_an_unreachable_server_is_unavailable_and_the_password_stays_out() -> None:
    dsn = "postgresql://nobody:hunter2@/nowhere?host=/nonexistent-socket-dir"
    with pytest.raises(DependencyUnavailable, match="cannot reach the decision database") as err:
        await connect(dsn, what="decision")
    assert "hunter2" not in str(err.value)
    with pytest.raises(DependencyUnavailable) as err:
        await open_pool(dsn, what="decision")
    assert "hunter2" not in str(err.value)
    with pytest.raises(InvalidArgument):
        await open_pool(dsn, what="decision", min_size=3, max_size=2)


async def test_a_pool_opens_and_serves(pg_dsn: str) -> None:
    pool = await open_pool(pg_dsn, what="test", max_size=2)
    try:
        assert await pool.fetchval("SELECT 41 + 1") == 42
    finally:
        await pool.close()


def test_one_dsn_setting_picks_the_backend_and_names_itself_in_errors() -> None:
    assert parse_store_dsn("", "/s/d.db") == ("sqlite", "/s/d.db")
    assert parse_store_dsn(" sqlite:///var/d.db ", "/s") == ("sqlite", "/var/d.db")
    assert parse_store_dsn("sqlite://", "/s/d.db") == ("sqlite", "/s/d.db")
    assert parse_store_dsn("POSTGRESQL://h/db", "/s")[0] == "postgresql"
    for bad in ("mysql://db/a", "d.db", "file:///x"):
        with pytest.raises(InvalidArgument, match="STOCKADE_X_STORE_DSN"):
            parse_store_dsn(bad, "/s", setting="STOCKADE_X_STORE_DSN")


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://u:s3cret@db:5432/x", "s3cret"),
        ("postgresql://u:p%40ss@db/x", "p%40ss"),
        ("postgresql://u@db/x?sslmode=require&password=s3cret", "s3cret"),
        ("postgresql://u@db/x?PASSWORD=s3cret", "s3cret"),
        ("postgresql://u@db/x?passfile=/run/secrets/pg", "/run/secrets/pg"),
        ("postgresql://u@db/x?sslpassword=s3cret", "s3cret"),
        ("postgresql://u:a@b@db/x", "a@b"),
    ],
)
def test_redaction_hides_every_place_a_password_can_be(dsn: str, secret: str) -> None:
    shown = redact_dsn(dsn)
    assert secret not in shown
    assert "db" in shown
