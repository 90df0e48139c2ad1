"""The executor state store (STORE-3, EXE-11) on both backends: spent grants are single-use
across stores sharing the records and across reopening; reads are shared; records are
bounded and pruned; an unreachable store refuses; and on PostgreSQL the executor's role
can do nothing but call the store's functions."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from stockade.cli.main import main as cli_main
from stockade.db.dsn import redact_dsn
from stockade.errors import (
    DependencyUnavailable,
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    StaleWrite,
)
from stockade.executor.app import build_core, build_sandbox
from stockade.executor.core import CallSpec, ExecutorCore
from stockade.executor.pg_state import LATEST, SCHEMA, VERSION_TABLE, PostgresExecutorState
from stockade.executor.readstate import MAX_READS_PER_SESSION, FileStamp, ReadState
from stockade.executor.settings import ExecutorSettings
from stockade.executor.state import (
    MAX_GRANT_ID,
    PRUNE_EVERY,
    PRUNE_MARGIN_S,
    ExecutorState,
    SqliteExecutorState,
    SqliteReadLedger,
    StoreReadState,
    open_state,
    parse_state_dsn,
)
from stockade.executor.tools.base import Status, ToolResult
from tests.pg import with_database

Opener = Callable[[], Awaitable[ExecutorState]]

STAMP = FileStamp(1, 3, "a" * 64)
OTHER = FileStamp(2, 3, "b" * 64)


@pytest.fixture(params=["sqlite", "postgresql"])
def state_dsn(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store's DSN: an SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'executor.sqlite3'}"
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def open_store(state_dsn: str, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens stores on ONE set of records (two calls: two replicas of the executor)."""
    dsn = state_dsn
    opened: list[ExecutorState] = []

    async def opener() -> ExecutorState:
        store = await open_state(dsn, tmp_path)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        await store.close()


def _as_role(dsn: str, role: str, password: str) -> str:
    """``dsn`` logging in as ``role`` (host, port and database kept)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))


def _id() -> str:
    return uuid.uuid4().hex


async def test_a_grant_is_spent_once_across_replicas_and_reopening(open_store: Opener) -> None:
    a, b = await open_store(), await open_store()
    grant, exp = _id(), time.time() + 60
    assert await a.spend_grant(grant, exp) is True
    assert await a.spend_grant(grant, exp) is False
    assert await b.spend_grant(grant, exp) is False
    await a.close()
    again = await open_store()
    assert await again.spend_grant(grant, exp) is False
    assert await again.spend_grant(_id(), exp) is True


async def test_racing_replicas_spend_a_grant_exactly_once(open_store: Opener) -> None:
    stores = [await open_store() for _ in range(4)]
    grant, exp = _id(), time.time() + 60
    results = await asyncio.gather(*(s.spend_grant(grant, exp) for s in stores for _ in range(5)))
    assert results.count(True) == 1


async def test_records_long_expired_are_pruned_fresh_ones_kept(open_store: Opener) -> None:
    store = await open_store()
    old, recent = _id(), _id()
    now = time.time()
    assert await store.spend_grant(old, now - PRUNE_MARGIN_S - 100)
    # Expired, but within the margin: kept (clocks may differ between replicas).
    assert await store.spend_grant(recent, now - 5)
    for _ in range(PRUNE_EVERY):  # every PRUNE_EVERY-th write prunes
        assert await store.spend_grant(_id(), now + 60)
    assert await store.spend_grant(old, now - PRUNE_MARGIN_S - 100) is True  # forgotten
    assert await store.spend_grant(recent, now - 5) is False  # still remembered


@pytest.mark.parametrize(
    ("grant", "expires_in"),
    [("", 60.0), ("x" * (MAX_GRANT_ID + 1), 60.0), ("ok", 10 * 3600.0)],
)
async def test_bounds_are_enforced(open_store: Opener, grant: str, expires_in: float) -> None:
    store = await open_store()
    with pytest.raises(InvalidArgument):
        await store.spend_grant(grant, time.time() + expires_in)


async def test_reads_are_shared_between_replicas(open_store: Opener) -> None:
    a, b = await open_store(), await open_store()
    assert await b.last_read("s1", "/w/f.txt") is None
    await a.record_read("s1", "/w/f.txt", STAMP)
    assert await b.last_read("s1", "/w/f.txt") == STAMP
    assert await b.last_read("s2", "/w/f.txt") is None  # another session
    await b.record_read("s1", "/w/f.txt", OTHER)
    assert await a.last_read("s1", "/w/f.txt") == OTHER
    with pytest.raises(InvalidArgument):
        await a.record_read("s1", "/" + "p" * 5000, STAMP)


async def test_store_read_state_from_worker_threads(open_store: Opener) -> None:
    """The tools' view (worker threads): read on one replica, fresh-check on another; never
    callable on the loop itself (it would wait on itself)."""
    loop = asyncio.get_running_loop()
    a = StoreReadState(await open_store(), loop)
    b = StoreReadState(await open_store(), loop)
    await asyncio.to_thread(a.record, "s", "/w/f", STAMP)
    await asyncio.to_thread(b.require_fresh, "s", "/w/f", STAMP)
    with pytest.raises(StaleWrite, match="changed since"):
        await asyncio.to_thread(b.require_fresh, "s", "/w/f", OTHER)
    with pytest.raises(StaleWrite, match="not been read"):
        await asyncio.to_thread(b.require_fresh, "other", "/w/f", STAMP)
    with pytest.raises(RuntimeError, match="worker thread"):
        b.require_fresh("s", "/w/f", STAMP)


async def test_each_store_gives_the_tools_a_ledger_of_its_own_records(
    open_store: Opener,
) -> None:
    """The tools' view of two stores on one set of records: what one records the other
    sees. SQLite's ledger calls the local file directly (callable on the event loop, no
    thread hop); PostgreSQL's waits for the server from a worker thread."""
    loop = asyncio.get_running_loop()
    a_store, b_store = await open_store(), await open_store()
    a, b = a_store.read_ledger(loop), b_store.read_ledger(loop)
    if isinstance(a_store, SqliteExecutorState):
        assert isinstance(a, SqliteReadLedger) and not a.blocking
        a.record("s", "/w/f", STAMP)
        b.require_fresh("s", "/w/f", STAMP)
        with pytest.raises(StaleWrite, match="changed since"):
            b.require_fresh("s", "/w/f", OTHER)
        await a_store.close()
        with pytest.raises(DependencyUnavailable):  # a closed file refuses, never "fresh"
            a.require_fresh("s", "/w/f", STAMP)
    else:
        assert isinstance(a, StoreReadState) and a.blocking
        await asyncio.to_thread(a.record, "s", "/w/f", STAMP)
        await asyncio.to_thread(b.require_fresh, "s", "/w/f", STAMP)
    with pytest.raises(StaleWrite, match="not been read"):
        await asyncio.to_thread(b.require_fresh, "other", "/w/f", STAMP)


def test_dsn_parsing_and_redaction(tmp_path: Path) -> None:
    assert parse_state_dsn(None, tmp_path) == ("sqlite", tmp_path / "executor-state.sqlite3")
    assert parse_state_dsn("sqlite:///x/y.db", tmp_path) == ("sqlite", Path("/x/y.db"))
    assert parse_state_dsn("postgresql://u:p@h/db", tmp_path)[0] == "postgresql"
    for bad in ("mysql://h/db", "/tmp/x.db", "postgresq://h"):
        with pytest.raises(InvalidArgument):
            parse_state_dsn(bad, tmp_path)
    assert "secret" not in redact_dsn("postgresql://u:secret@h/db?password=secret")
    with pytest.raises(InvalidArgument) as err:
        parse_state_dsn("mysql://u:secret@h/db", tmp_path)
    assert "secret" not in str(err.value)


async def test_sqlite_store_that_fails_refuses(tmp_path: Path) -> None:
    store = SqliteExecutorState(tmp_path / "s.sqlite3")
    await store.close()
    with pytest.raises(DependencyUnavailable):
        await store.spend_grant(_id(), time.time() + 60)
    with pytest.raises(DependencyUnavailable):
        await store.last_read("s", "/p")


async def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    SqliteExecutorState(path)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(InvalidArgument, match="newer"):
        SqliteExecutorState(path)


# --- PostgreSQL only ---------------------------------------------------------------------


async def test_unreachable_server_refuses_at_open(tmp_path: Path) -> None:
    with pytest.raises(DependencyUnavailable) as err:
        await open_state("postgresql://u:secret@127.0.0.1:1/db", tmp_path)
    assert "secret" not in str(err.value)


async def test_server_gone_after_open_refuses_and_spends_nothing(
    pg_dsn: str, pg_server: str
) -> None:
    store = await PostgresExecutorState.open(pg_dsn)
    database = urlsplit(pg_dsn).path.lstrip("/")
    admin = await asyncpg.connect(pg_server)
    grant = _id()
    try:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            database,
        )
        with pytest.raises(DependencyUnavailable):
            await store.spend_grant(grant, time.time() + 60)
        with pytest.raises(DependencyUnavailable):
            await store.last_read("s", "/p")
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
    # The refused grant was not recorded: it is still fresh once the store is back.
    assert await store.spend_grant(grant, time.time() + 60) is True
    await store.close()


@pytest.fixture
async def executor_role(pg_dsn: str) -> AsyncIterator[tuple[str, str]]:
    """(role name, its DSN): a role that may only use the executor state, as
    ``stockade executor-state migrate --role`` sets it up; the schema migrated by the
    administrator, who also keeps another table in the same database."""
    role = f"stk_exec_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_dsn)
    try:
        password = uuid.uuid4().hex
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        # As an administrator or a deployment job does it: the CLI, twice (idempotent).
        for _ in range(2):
            argv = ["executor-state", "migrate", "--dsn", pg_dsn, "--role", role]
            assert await asyncio.to_thread(cli_main, argv) == 0
        await admin.execute("CREATE TABLE public.other_secrets (v TEXT)")
        await admin.execute("INSERT INTO public.other_secrets VALUES ('s3cret')")
        yield role, _as_role(pg_dsn, role, password)
    finally:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
        )
        await admin.execute(f"DROP OWNED BY {role}")
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()


async def test_the_executors_role_can_only_call_the_functions(
    executor_role: tuple[str, str],
) -> None:
    role, dsn = executor_role
    store = await PostgresExecutorState.open(dsn)
    grant = _id()
    assert await store.spend_grant(grant, time.time() + 60) is True
    assert await store.spend_grant(grant, time.time() + 60) is False
    await store.record_read("s", "/w/f", STAMP)
    assert await store.last_read("s", "/w/f") == STAMP
    await store.close()

    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT current_user") == role
        forbidden = [
            f"SELECT * FROM {SCHEMA}.spent_grant",
            f"DELETE FROM {SCHEMA}.spent_grant",
            f"UPDATE {SCHEMA}.spent_grant SET expires_at = 0",
            f"TRUNCATE {SCHEMA}.spent_grant",
            f"INSERT INTO {SCHEMA}.spent_grant VALUES ('x', 0)",
            f"SELECT * FROM {SCHEMA}.read_state",
            f"DELETE FROM {SCHEMA}.read_state",
            f"UPDATE {SCHEMA}.read_state SET sha256 = 'x'",
            f"SELECT * FROM {VERSION_TABLE}",
            f"DELETE FROM {VERSION_TABLE}",
            f"CREATE TABLE {SCHEMA}.mine (v TEXT)",
            f"CREATE FUNCTION {SCHEMA}.spend_grant(a text) RETURNS int LANGUAGE sql AS 'SELECT 1'",
            f"DROP FUNCTION {SCHEMA}.spend_grant(text, double precision)",
            f"ALTER TABLE {SCHEMA}.spent_grant ADD COLUMN x int",
            "SELECT * FROM public.other_secrets",
            "CREATE TABLE public.mine (v TEXT)",
            f"GRANT SELECT ON {SCHEMA}.spent_grant TO {role}",
        ]
        for statement in forbidden:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
        # The functions take no caller-chosen clock or table: bounds hold for the role too.
        with pytest.raises(asyncpg.DataError):
            await conn.fetchval(f"SELECT {SCHEMA}.spend_grant($1, $2)", "x" * 500, 0.0)
        with pytest.raises(asyncpg.DataError):
            await conn.fetchval(f"SELECT {SCHEMA}.spend_grant($1, $2)", "y", time.time() + 1e9)
    finally:
        await conn.close()


async def test_a_role_without_the_grant_is_refused_at_open(
    executor_role: tuple[str, str], pg_dsn: str
) -> None:
    role, dsn = executor_role
    admin = await asyncpg.connect(pg_dsn)
    try:
        await admin.execute(f"REVOKE USAGE ON SCHEMA {SCHEMA} FROM {role}")
    finally:
        await admin.close()
    with pytest.raises(FailedPrecondition, match="executor-state migrate"):
        await PostgresExecutorState.open(dsn)


async def test_an_unmigrated_database_and_a_role_that_may_not_create_it(pg_dsn: str) -> None:
    role = f"stk_exec_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_dsn)
    try:
        password = uuid.uuid4().hex
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        dsn = _as_role(pg_dsn, role, password)
        with pytest.raises(FailedPrecondition, match="executor-state migrate"):
            await PostgresExecutorState.open(dsn)
    finally:
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()


async def test_replicas_migrating_together_apply_the_schema_once(pg_dsn: str) -> None:
    stores = await asyncio.gather(*(PostgresExecutorState.open(pg_dsn) for _ in range(4)))
    conn = await asyncpg.connect(pg_dsn)
    try:
        # One row per migration, each applied once.
        assert await conn.fetchval(f"SELECT count(*) FROM {VERSION_TABLE}") == LATEST
    finally:
        await conn.close()
    for store in stores:
        await store.close()


def test_with_database_keeps_the_dsn_shape(pg_server: str) -> None:
    assert with_database(pg_server, "x").split("?")[0].endswith("/x")


def test_migrate_cli_refuses_bad_dsns_without_showing_passwords(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["executor-state", "migrate", "--dsn", "sqlite:///x.db"]) == 2
    dsn = "postgresql://admin:hunter2@127.0.0.1:1/db"
    assert cli_main(["executor-state", "migrate", "--dsn", dsn, "--role", "r"]) == 1
    err = capsys.readouterr().err
    assert "migrate failed" in err
    assert "hunter2" not in err


async def test_two_executors_on_one_sqlite_file_share_reads_through_the_tools(
    tmp_path: Path,
) -> None:
    """Two cores (two executors of one node) on one SQLite file: a read through one
    counts for an edit through the other, on the event loop (the ledger calls the file
    directly, so read_file takes its on-loop path); a change on disk refuses both."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("one\n")
    settings = ExecutorSettings(workspace=ws, allow_ungranted=True)
    path = tmp_path / "shared.sqlite3"
    stores = [SqliteExecutorState(path), SqliteExecutorState(path)]
    a, b = (build_core(settings, build_sandbox(settings), state=s) for s in stores)
    assert not a.read_state.blocking

    async def run(core: ExecutorCore, call_id: str, tool: str, **args: object) -> ToolResult:
        results = [
            item
            async for item in core.execute(CallSpec("s", call_id, tool, args))
            if isinstance(item, ToolResult)
        ]
        assert len(results) == 1
        return results[0]

    edit = {"file_path": "f.txt", "old_string": "one", "new_string": "two"}
    refused = await run(b, "c0", "file_edit", **edit)
    assert refused.status is Status.ERROR and "not been read" in refused.content
    assert (await run(a, "c1", "read_file", file_path="f.txt")).status is Status.OK
    assert (await run(b, "c2", "file_edit", **edit)).status is Status.OK
    (ws / "f.txt").write_text("changed elsewhere\n")
    back = {"file_path": "f.txt", "old_string": "two", "new_string": "three"}
    for core, call_id in ((a, "c3"), (b, "c4")):
        stale = await run(core, call_id, "file_edit", **back)
        assert stale.status is Status.ERROR and "changed since" in stale.content
    for store in stores:
        await store.close()


async def test_a_session_has_a_bounded_number_of_files_on_record(
    open_store: Opener, pg_or_none: str | None
) -> None:
    """Past the per-session limit a read of another file is refused (ResourceExhausted,
    naming the limit); files on record can be read again; other sessions are unaffected.
    On PostgreSQL the function enforces it (the executor's role cannot go around it)."""
    store = await open_store()
    if isinstance(store, SqliteExecutorState):
        store.max_reads_per_session = limit = 3
        for n in range(limit):
            await store.record_read("s", f"/w/{n}", STAMP)
    else:
        assert pg_or_none is not None
        limit = MAX_READS_PER_SESSION
        admin = await asyncpg.connect(pg_or_none)
        try:  # the records a long session made, written at once
            await admin.execute(
                f"INSERT INTO {SCHEMA}.read_state SELECT 's', '/w/' || n, 1, 3, $1, "
                "extract(epoch FROM clock_timestamp()) FROM generate_series(0, $2 - 1) n",
                STAMP.sha256,
                limit,
            )
        finally:
            await admin.close()
    with pytest.raises(ResourceExhausted, match="MAX_READS_PER_SESSION") as err:
        await store.record_read("s", "/w/one-more", STAMP)
    assert str(limit) in err.value.message
    assert await store.last_read("s", "/w/one-more") is None
    await store.record_read("s", "/w/0", OTHER)  # on record: updated
    assert await store.last_read("s", "/w/0") == OTHER
    await store.record_read("other", "/w/one-more", STAMP)  # another session


async def test_concurrent_reads_at_the_limit_record_exactly_one_more(
    open_store: Opener, pg_or_none: str | None
) -> None:
    """One place left under the per-session limit and many new files read at once, on
    several replicas (SQLite: stores on one file, as executors of one node; several
    threads each): exactly one is recorded, every other read is RESOURCE_EXHAUSTED, and
    the session ends with exactly the limit on record."""
    stores = [await open_store() for _ in range(3)]
    session = "s-" + _id()
    if pg_or_none is None:
        limit = 5
        for store in stores:
            assert isinstance(store, SqliteExecutorState)
            store.max_reads_per_session = limit
        for n in range(limit - 1):
            await stores[0].record_read(session, f"/w/{n}", STAMP)
    else:
        limit = MAX_READS_PER_SESSION
        admin = await asyncpg.connect(pg_or_none)
        try:
            await admin.execute(
                f"INSERT INTO {SCHEMA}.read_state SELECT $1, '/w/' || n, 1, 3, $2, "
                "extract(epoch FROM clock_timestamp()) FROM generate_series(0, $3 - 1) n",
                session,
                STAMP.sha256,
                limit - 1,
            )
        finally:
            await admin.close()

    def read_in_thread(store: ExecutorState, n: int) -> str:
        # A worker thread per read, as the file tools run (SQLite: straight into the file).
        if isinstance(store, SqliteExecutorState):
            try:
                store.record_read_now(session, f"/w/new-{n}", STAMP)
            except ResourceExhausted:
                return "refused"
            return "recorded"
        raise AssertionError("threads only for SQLite")

    async def read(store: ExecutorState, n: int) -> str:
        if isinstance(store, SqliteExecutorState):
            return await asyncio.to_thread(read_in_thread, store, n)
        try:
            await store.record_read(session, f"/w/new-{n}", STAMP)
        except ResourceExhausted:
            return "refused"
        return "recorded"

    if pg_or_none is not None:
        # Every pool holds its connections open already, so the reads really run at once
        # (a pool opening connections one by one would space them out).
        for store in stores:
            assert isinstance(store, PostgresExecutorState)
            async with contextlib.AsyncExitStack() as held:
                for _ in range(8):
                    await held.enter_async_context(store._pool.acquire())
    outcomes = await asyncio.gather(*(read(stores[n % 3], n) for n in range(30)))
    assert sorted(outcomes) == ["recorded"] + ["refused"] * 29
    on_record = [
        n for n in range(30) if await stores[0].last_read(session, f"/w/new-{n}") is not None
    ]
    assert len(on_record) == 1
    if pg_or_none is not None:
        admin = await asyncpg.connect(pg_or_none)
        try:
            count = await admin.fetchval(
                f"SELECT count(*) FROM {SCHEMA}.read_state WHERE session_id = $1", session
            )
        finally:
            await admin.close()
        assert count == limit


@pytest.fixture
def pg_or_none(state_dsn: str) -> str | None:
    """The PostgreSQL DSN of the store under test (None for SQLite)."""
    return state_dsn if state_dsn.startswith("postgresql") else None


def test_the_memory_read_state_has_the_same_bound() -> None:
    reads = ReadState(max_entries=5, per_session=2)
    reads.record("s", "/a", STAMP)
    reads.record("s", "/b", STAMP)
    reads.record("s", "/a", OTHER)  # on record: fine
    with pytest.raises(ResourceExhausted):
        reads.record("s", "/c", STAMP)
    reads.forget_session("s")
    reads.record("s", "/c", STAMP)
    # The global bound evicts the oldest records, which frees their session's count.
    for n in range(5):
        reads.record(f"t{n}", "/x", STAMP)
    assert reads.get("s", "/c") is None
    reads.record("s", "/d", STAMP)
    reads.record("s", "/e", STAMP)


async def test_reads_past_the_bound_fail_the_call_with_resource_exhausted(
    tmp_path: Path,
) -> None:
    """Through the tools: read_file past the limit fails the call (RESOURCE_EXHAUSTED, the
    gRPC status the interceptor gives it), on the loop and from a worker thread (a file
    too large to read on the loop); a write past it is done and reported as done, and
    the next edit asks for a read first."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("a.txt", "b.txt"):
        (ws / name).write_text("x\n")
    (ws / "big.txt").write_text("y" * 100 + "\n" * 1000 + "z" * 70_000)
    settings = ExecutorSettings(workspace=ws, allow_ungranted=True)
    store = SqliteExecutorState(tmp_path / "s.sqlite3")
    store.max_reads_per_session = 1
    core = build_core(settings, build_sandbox(settings), state=store)

    async def run(call_id: str, tool: str, **args: object) -> ToolResult:
        items = [i async for i in core.execute(CallSpec("s", call_id, tool, args))]
        assert isinstance(items[-1], ToolResult)
        return items[-1]

    assert (await run("c1", "read_file", file_path="a.txt")).status is Status.OK
    for call_id, name in (("c2", "b.txt"), ("c3", "big.txt")):
        with pytest.raises(ResourceExhausted, match="MAX_READS_PER_SESSION"):
            await run(call_id, "read_file", file_path=name)
    assert (await run("c4", "read_file", file_path="a.txt")).status is Status.OK  # on record
    written = await run("c5", "file_write", file_path="new.txt", content="n\n")
    assert written.status is Status.OK and (ws / "new.txt").read_text() == "n\n"
    edit = await run("c6", "file_edit", file_path="new.txt", old_string="n", new_string="m")
    assert edit.status is Status.ERROR and "not been read" in edit.content
    assert (ws / "new.txt").read_text() == "n\n"
    await store.close()


async def test_a_held_lock_refuses_after_the_store_wait_and_spends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another executor holding the SQLite file's write lock past STORE_WAIT_S: the spend
    is refused (UNAVAILABLE, never "fresh"), and the grant is still fresh afterwards."""
    monkeypatch.setenv("STOCKADE_EXECUTOR_STORE_WAIT_S", "0.2")
    settings = ExecutorSettings(workspace=tmp_path)
    assert settings.store_wait_s == 0.2
    path = tmp_path / "s.sqlite3"
    store = await open_state(f"sqlite:///{path}", tmp_path, wait_s=settings.store_wait_s)
    other = sqlite3.connect(path, isolation_level=None)
    grant = _id()
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(DependencyUnavailable, match="locked"):
            await store.spend_grant(grant, time.time() + 60)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await store.spend_grant(grant, time.time() + 60) is True
    await store.close()
    for bad in ("0", "301"):
        monkeypatch.setenv("STOCKADE_EXECUTOR_STORE_WAIT_S", bad)
        with pytest.raises(ValueError, match="store_wait_s"):
            ExecutorSettings(workspace=tmp_path)
