"""A real PostgreSQL for the tests (STORE-6): started once per test session, a fresh
database per test.

The server is the ``pgserver`` package (PostgreSQL 16 in a wheel, a dev dependency; it
runs as root too), started on a unix socket in a private temporary folder, so a fresh
machine needs nothing but Python. ``STOCKADE_TEST_POSTGRES_DSN`` names an existing server
instead (its user must be allowed to ``CREATE DATABASE``). There is no skip: a server that
cannot start fails the tests that need it, with the reason.

Register the fixtures with ``from tests.pg import pg_server, pg_dsn  # noqa: F401`` in a
conftest (the root conftest does).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

ENV_DSN = "STOCKADE_TEST_POSTGRES_DSN"


def with_database(dsn: str, database: str) -> str:
    """``dsn`` pointing at another database on the same server."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the block: ``STOCKADE_TEST_POSTGRES_DSN`` if set, else a
    throwaway pgserver; yields the DSN of its maintenance database. Raises
    ``RuntimeError`` with the reason when none can start (the benchmarks use it too)."""
    given = os.environ.get(ENV_DSN, "").strip()
    if given:
        yield given
        return
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime folder at import, which warns when
        # XDG_RUNTIME_DIR is unset (CI, root shells): harmless, and the suite turns
        # warnings into errors.
        warnings.simplefilter("ignore")
        try:
            import pgserver
        except ImportError as err:
            raise RuntimeError(f"the pgserver package is missing (make venv): {err}") from err
    # A short path: the server's unix socket lives in its data folder (107-byte limit).
    data = tempfile.mkdtemp(prefix="stk-pg-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(data, cleanup_mode="stop")
    except Exception as err:
        shutil.rmtree(data, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL (pgserver) in {data}: {err!r}") from err
    try:
        yield server.get_uri()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The DSN of the session's PostgreSQL server (its maintenance database)."""
    try:
        with postgres_server() as dsn:
            yield dsn
    except RuntimeError as err:  # never a silent skip: fail with the reason
        pytest.fail(f"PostgreSQL tests need a server: {err}; or set {ENV_DSN}")


async def create_database(server: str) -> str:
    """A fresh, empty database on ``server``; returns its DSN."""
    name = f"stk_{uuid.uuid4().hex[:16]}"
    await _admin(server, f'CREATE DATABASE "{name}"')
    return with_database(server, name)


async def _admin(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """A DSN to a fresh, empty database on the session's server, dropped after the test.

    Synchronous (its own short event loop) so that sync fixtures can request it too.
    """
    name = f"stk_{uuid.uuid4().hex[:16]}"
    asyncio.run(_admin(pg_server, f'CREATE DATABASE "{name}"'))
    try:
        yield with_database(pg_server, name)
    finally:
        asyncio.run(_admin(pg_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
