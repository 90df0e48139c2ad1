"""STORE-2 / PERF-1a-pg: a cached session's ALLOW reaches no database.

A real decision server on a real PostgreSQL, with every connection of its store passing
through a byte-counting proxy in front of the server's unix socket. The proxy reads each
connection's startup message to tell the change feed's LISTEN connection (its own name in
``application_name``; it is probed every few seconds and carries notifications) from the
pool's connections, which carry every query. Once a session is cached, Decides that
ALLOW send the pool not one byte and open no connection; the positive controls show the
proxy sees the queries a Decide does make (a new session, the write after a denial).
Counting bytes on the wire catches any query, however the store reaches the database.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import grpc
from google.protobuf import struct_pb2

from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

LISTEN_NAME = b"stockade-decision-listen"
"""The change feed connection's application_name (stockade.decision.store.postgres)."""


@dataclass
class Counts:
    """Bytes each kind of connection sent the server, and connections opened."""

    pool_bytes: int = 0
    pool_connections: int = 0
    listen_connections: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


def _upstream(dsn: str) -> tuple[str | None, tuple[str, int] | None]:
    """Where the server listens: a unix socket path, or a TCP (host, port)."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = (query.get("host") or [parts.hostname or ""])[0]
    port = int((query.get("port") or [str(parts.port or 5432)])[0])
    if host.startswith("/"):
        return f"{host}/.s.PGSQL.{port}", None
    return None, (host, port)


def _through(dsn: str, directory: Path) -> str:
    """``dsn`` with its host replaced by the proxy's socket directory (port 5432)."""
    parts = urlsplit(dsn)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query["host"], query["port"] = str(directory), "5432"
    netloc = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))


@contextlib.asynccontextmanager
async def counting_proxy(dsn: str, directory: Path) -> AsyncIterator[tuple[str, Counts]]:
    """A unix-socket proxy to the server of ``dsn``; yields the proxied DSN and the counts."""
    unix, tcp = _upstream(dsn)
    counts = Counts()

    async def pump(
        src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, counted: list[bool] | None
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(65536):
                if counted is not None and counted[0]:
                    counts.pool_bytes += len(data)
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(Exception):
            dst.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        counts.tasks.add(task)
        try:
            if unix is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(unix)
            else:
                assert tcp is not None
                up_reader, up_writer = await asyncio.open_connection(*tcp)
            # The first message is the startup packet (or an SSL request, then it): the
            # connection's kind is known once a packet naming the application arrives.
            counted = [False]
            first = await reader.read(65536)
            up_writer.write(first)
            if LISTEN_NAME in first:
                counts.listen_connections += 1
            else:
                counts.pool_connections += 1
                counted[0] = True  # the startup bytes themselves are not counted
            await asyncio.gather(
                pump(reader, up_writer, counted=counted),
                pump(up_reader, writer, counted=None),
            )
        finally:
            writer.close()
            counts.tasks.discard(task)

    server = await asyncio.start_unix_server(accept, path=str(directory / ".s.PGSQL.5432"))
    try:
        yield _through(dsn, directory), counts
    finally:
        server.close()
        for task in list(counts.tasks):
            task.cancel()
        await asyncio.gather(*counts.tasks, return_exceptions=True)


def _request(session: str, call_id: str, path: str) -> d_pb2.DecideRequest:
    args = struct_pb2.Struct()
    args.update({"file_path": path})
    return d_pb2.DecideRequest(
        call=c_pb2.ToolCall(
            call_id=call_id, tool_name="read_file", arguments=args, session_id=session
        ),
        inspection=d_pb2.ToolInspection(read_only=True, inside_working_dir=True),
    )


async def _settled(counts: Counts) -> int:
    """The pool's byte count once it stops moving (replies and acks in flight land)."""
    last = -1
    for _ in range(200):
        if counts.pool_bytes == last:
            return last
        last = counts.pool_bytes
        await asyncio.sleep(0.05)
    return counts.pool_bytes


async def test_a_cached_session_s_allow_sends_the_database_nothing(
    tmp_path: Path, pg_dsn: str
) -> None:
    proxy_dir = tmp_path / "pg"
    proxy_dir.mkdir()
    (tmp_path / "p.toml").write_text('[permissions]\ndeny = ["read_file(**/.env)"]\n')
    async with counting_proxy(pg_dsn, proxy_dir) as (dsn, counts):
        settings = load_settings(
            DecisionSettings,
            listen=f"unix://{tmp_path}/d.sock",
            state_dir=tmp_path / "state",
            policy_file=tmp_path / "p.toml",
            grace_seconds=0,
            store_dsn=dsn,
            # The approval sweeper queries the store on its own clock, apart from any
            # Decide: kept out of the window measured here.
            approval_sweep_s=3600,
        )
        async with DecisionApp(settings).open() as regs:
            srv = await create_server("decision", settings, regs)
            try:
                async with grpc.aio.insecure_channel(srv.address) as ch:
                    stub = d_grpc.DecisionServiceStub(ch)
                    assert counts.listen_connections >= 1 and counts.pool_connections >= 1

                    # A new session: created and read through the pool (positive control).
                    before = await _settled(counts)
                    first = await stub.Decide(_request("s1", "c0", "/w/a.py"))
                    assert first.verdict == c_pb2.VERDICT_ALLOW and first.grant.signature
                    assert await _settled(counts) > before

                    # Cached: 30 ALLOWs, each with its own signed grant, and no byte.
                    before, opened = await _settled(counts), counts.pool_connections
                    for i in range(30):
                        resp = await stub.Decide(_request("s1", f"c{i + 1}", f"/w/m{i}.py"))
                        assert resp.verdict == c_pb2.VERDICT_ALLOW and resp.grant.signature
                    assert await _settled(counts) == before
                    assert counts.pool_connections == opened

                    # A denial is written (the counters are shared), and so is the reset
                    # by the next ALLOW; the ALLOW after that is free again.
                    denied = await stub.Decide(_request("s1", "d1", "/w/.env"))
                    assert denied.verdict == c_pb2.VERDICT_DENY
                    after_deny = await _settled(counts)
                    assert after_deny > before
                    await stub.Decide(_request("s1", "r1", "/w/b.py"))
                    after_reset = await _settled(counts)
                    assert after_reset > after_deny
                    await stub.Decide(_request("s1", "r2", "/w/c.py"))
                    assert await _settled(counts) == after_reset
            finally:
                await stop_server(srv)
