"""PERF-3 and PERF-3-pg: sustained audit ingestion through RecordBatch over real gRPC.

The audit service runs as its own process (``python -m stockade.audit``, as deployed) on
a unix socket; the bench process streams batches of 1,000 realistic events (200-char
previews, rule, trace id, arguments) and counts events per second from the first
message to the acknowledgement of the last; three rounds, the median is reported. The
baseline, measured in the same rounds on the same disk, is raw batched inserts of the
same rows into the same ``agent_audit_log`` schema with plain ``sqlite3`` (1,000-row
transactions, WAL, synchronous=NORMAL, no hashing, no validation, no RPC); the ratio
says how much of SQLite's own speed the service keeps. PERF-3-pg does the same with the
service on PostgreSQL (a throwaway pgserver, or ``STOCKADE_TEST_POSTGRES_DSN``) against
raw batched ``COPY`` of the same rows into the same table in a fresh database.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc

from stockade.audit.chain import GENESIS
from stockade.audit.convert import row_from_proto
from stockade.audit.store.postgres import COPY_COLUMNS, migrate
from stockade.audit.store.schema import INSERT_ROW, SCHEMA
from stockade.client.base import aio_channel
from stockade.stack import LocalStack
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2
from tests.bench.common import figure
from tests.pg import create_database, postgres_server

BATCH = 1000
MESSAGES_PER_CALL = 20
CALLS = 4  # 80,000 events through the service per round
RAW_ROWS = 80_000
ROUNDS = 3


def _events(start: int, count: int) -> list[a_pb2.AuditEvent]:
    out = []
    for n in range(start, start + count):
        event = a_pb2.AuditEvent(
            event_id=f"bench-{n:09d}",
            session_id=f"session-{n % 16}",
            step=n % 8,
            tool_name=("read_file", "run_bash", "grep_files")[n % 3],
            status=a_pb2.AUDIT_STATUS_OK,
            elapsed_ms=n % 97,
            output_preview=("lorem ipsum dolor sit amet " * 8)[:200],
            agent_name="lead",
            call_id=f"call-{n}",
            verdict=common_pb2.VERDICT_ALLOW,
            # The decision typed, as the agent sends it (the service turns it into text).
            winning_rule=common_pb2.Rule(
                effect=common_pb2.RULE_EFFECT_ALLOW,
                pattern="read_file(**)",
                source=common_pb2.RULE_SOURCE_MANAGED,
            ),
            decision_reason="allowed by read_file(**)",
            trace_id=f"{n:032x}",
            policy_version="3f2a9c",
        )
        event.arguments.update({"file_path": "notes/hello.txt"})
        event.time.FromNanoseconds(1_700_000_000_000_000_000 + n * 1000)
        out.append(event)
    return out


def _raw_rate(db_path: Path, events: list[a_pb2.AuditEvent]) -> float:
    """Rows/s of plain batched sqlite3 inserts of the same rows into the same schema."""
    rows = []
    for seq, event in enumerate(events, start=1):
        rows.append((seq, 0, *row_from_proto(event), GENESIS, GENESIS))
    db = sqlite3.connect(db_path)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.executescript(SCHEMA)
        t0 = time.perf_counter()
        for start in range(0, len(rows), BATCH):
            db.executemany(INSERT_ROW, rows[start : start + BATCH])
            db.commit()
        return len(rows) / (time.perf_counter() - t0)
    finally:
        db.close()


async def _service_rate(channel: grpc.aio.Channel, messages: list[bytes]) -> float:
    """Events/s of serialized RecordBatchRequests streamed MESSAGES_PER_CALL per call.

    The messages are serialized before the clock starts: the producer's cost of
    building events is not the service's, and on two shared cores it would otherwise
    take CPU from the server being measured. The service receives the same bytes.
    """
    record_batch = channel.stream_unary(
        "/stockade.v1.AuditService/RecordBatch",
        request_serializer=None,
        response_deserializer=a_pb2.RecordBatchResponse.FromString,
    )

    async def stream(part: list[bytes]) -> AsyncIterator[bytes]:
        for message in part:
            yield message

    total = 0
    t0 = time.perf_counter()
    for start in range(0, len(messages), MESSAGES_PER_CALL):
        reply = await record_batch(stream(messages[start : start + MESSAGES_PER_CALL]))
        total += reply.accepted
    elapsed = time.perf_counter() - t0
    expected = len(messages) * BATCH
    if total != expected:
        raise RuntimeError(f"service stored {total} events, expected {expected}")
    return total / elapsed


async def _run() -> list[dict[str, Any]]:
    per_round = CALLS * MESSAGES_PER_CALL * BATCH
    service: list[float] = []
    raw: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        stack = LocalStack(base / "stack")
        try:
            await stack.start(["audit"])
            async with aio_channel(stack.addresses["audit"]) as channel:
                # Warm up (connection, code paths) with events not counted below.
                warmup = a_pb2.RecordBatchRequest(events=_events(10**8, BATCH))
                await _service_rate(channel, [warmup.SerializeToString()])
                # Rounds alternate service and baseline so both see the same machine load
                # (the CPUs are shared); each round uses fresh event ids.
                for round_no in range(ROUNDS):
                    events = _events(round_no * per_round, per_round)
                    messages = [
                        a_pb2.RecordBatchRequest(events=events[i : i + BATCH]).SerializeToString()
                        for i in range(0, len(events), BATCH)
                    ]
                    service.append(await _service_rate(channel, messages))
                    raw.append(_raw_rate(base / f"raw{round_no}.db", events[:RAW_ROWS]))
        finally:
            await stack.close()
    rate, baseline = statistics.median(service), statistics.median(raw)
    return [
        figure(
            "PERF-3",
            "audit ingestion through RecordBatch, median of 3 rounds"
            " (baseline: raw batched SQLite inserts, rows/s)",
            rate,
            "events/s",
            baseline=baseline,
            ratio=rate / baseline,
            target=">= 0.4x raw batched inserts",
        )
    ]


async def _raw_pg_rate(dsn: str, events: list[a_pb2.AuditEvent]) -> float:
    """Rows/s of plain batched COPYs of the same rows into the same PostgreSQL table
    (1,000-row transactions; no hashing, no validation, no RPC, no locks)."""
    rows = [
        (seq, 0, *row_from_proto(event), "raw", seq, GENESIS, GENESIS)
        for seq, event in enumerate(events, start=1)
    ]
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        t0 = time.perf_counter()
        for start in range(0, len(rows), BATCH):
            async with conn.transaction():
                await conn.copy_records_to_table(
                    "agent_audit_log",
                    records=rows[start : start + BATCH],
                    columns=list(COPY_COLUMNS),
                )
        return len(rows) / (time.perf_counter() - t0)
    finally:
        await conn.close()


async def _run_pg(server: str) -> list[dict[str, Any]]:
    per_round = CALLS * MESSAGES_PER_CALL * BATCH
    service: list[float] = []
    raw: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        stack = LocalStack(
            Path(tmp) / "stack",
            common_env={
                "STOCKADE_AUDIT_STORE_DSN": await create_database(server),
                "STOCKADE_AUDIT_REPLICA_ID": "bench",
            },
        )
        try:
            await stack.start(["audit"])
            async with aio_channel(stack.addresses["audit"]) as channel:
                warmup = a_pb2.RecordBatchRequest(events=_events(10**8, BATCH))
                await _service_rate(channel, [warmup.SerializeToString()])
                for round_no in range(ROUNDS):
                    events = _events(round_no * per_round, per_round)
                    messages = [
                        a_pb2.RecordBatchRequest(events=events[i : i + BATCH]).SerializeToString()
                        for i in range(0, len(events), BATCH)
                    ]
                    service.append(await _service_rate(channel, messages))
                    raw.append(await _raw_pg_rate(await create_database(server), events))
        finally:
            await stack.close()
    rate, baseline = statistics.median(service), statistics.median(raw)
    return [
        figure(
            "PERF-3-pg",
            "audit ingestion through RecordBatch on PostgreSQL, median of 3 rounds"
            " (baseline: raw batched COPY into the same PostgreSQL table, rows/s)",
            rate,
            "events/s",
            baseline=baseline,
            ratio=rate / baseline,
            target=">= 0.4x raw batched inserts",
        )
    ]


def run() -> list[dict[str, Any]]:
    """The PERF-3 figure (SQLite) and PERF-3-pg (a throwaway PostgreSQL, or
    ``STOCKADE_TEST_POSTGRES_DSN``)."""
    figures = asyncio.run(_run())
    with postgres_server() as server:
        figures += asyncio.run(_run_pg(server))
    return figures
