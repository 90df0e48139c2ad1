"""Issue #14 audit gaps: VerifyLog answers per chain in typed fields (chain id, rows, the
first broken row by log sequence and chain position, a reason enum), over real servers on
both backends; the signed chain heads are also exported as OpenTelemetry log records."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from stockade.audit.app import AuditApp
from stockade.audit.chain import hash_values
from stockade.audit.core import AuditCore
from stockade.audit.heads import (
    HEAD_EVENT,
    check_heads,
    head_from_attributes,
    otel_head_sink,
    parse_heads,
)
from stockade.audit.model import EVENT_FIELDS, AuditEventRow
from stockade.audit.settings import AuditSettings
from stockade.audit.store.sqlite import AuditStore
from stockade.server.app import create_server, stop_server
from stockade.stack import LocalStack
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2

Stub = a_grpc.AuditServiceStub


@asynccontextmanager
async def served(tmp_path: Path, replica: str, dsn: str = "") -> AsyncIterator[Stub]:
    settings = AuditSettings(
        listen="127.0.0.1:0",
        state_dir=tmp_path / replica,
        grace_seconds=1,
        store_dsn=dsn,
        replica_id=replica,
    )
    async with AuditApp(settings).open() as registrations:
        running = await create_server("audit", settings, registrations)
        channel = grpc.aio.insecure_channel(running.address)
        try:
            yield a_grpc.AuditServiceStub(channel)
        finally:
            await channel.close(None)
            await stop_server(running)


def event(n: int, session: str) -> a_pb2.AuditEvent:
    return a_pb2.AuditEvent(
        event_id=f"{session}-{n}",
        session_id=session,
        step=n,
        tool_name="read_file",
        status=a_pb2.AUDIT_STATUS_OK,
        verdict=common_pb2.VERDICT_ALLOW,
        winning_rule=common_pb2.Rule(pattern="read_file(*)", effect=common_pb2.RULE_EFFECT_ALLOW),
    )


async def record(stub: Stub, session: str, count: int) -> None:
    for n in range(1, count + 1):
        await stub.Record(a_pb2.RecordRequest(event=event(n, session)))


async def test_sqlite_verify_log_reports_its_one_chain(tmp_path: Path) -> None:
    async with served(tmp_path, "single") as stub:
        await record(stub, "s", 6)
        clean = await stub.VerifyLog(a_pb2.VerifyLogRequest())
        assert clean.ok and len(clean.chains) == 1
        [chain] = clean.chains
        assert (chain.chain_id, chain.ok, chain.rows_checked, chain.head_position) == (
            "sqlite",
            True,
            6,
            6,
        )
        assert chain.reason == a_pb2.CHAIN_BREAK_REASON_UNSPECIFIED and chain.head_hash

        db = sqlite3.connect(tmp_path / "single" / "audit.db")
        with db:
            db.execute("UPDATE agent_audit_log SET output_preview = 'x' WHERE sequence = 3")
        edited = await stub.VerifyLog(a_pb2.VerifyLogRequest())
        [chain] = edited.chains
        assert not edited.ok and not chain.ok
        assert (chain.reason, chain.first_broken_sequence, chain.first_broken_position) == (
            a_pb2.CHAIN_BREAK_REASON_ROW_EDITED,
            3,
            3,
        )
        with db:  # put it back as it was: restore the row by removing the end instead
            db.execute("DELETE FROM agent_audit_log WHERE sequence >= 3")
        db.close()
        cut = await stub.VerifyLog(a_pb2.VerifyLogRequest())
        [chain] = cut.chains
        # Rows removed from the end: no stored row is at fault, the position names the gap.
        assert (chain.reason, chain.first_broken_sequence, chain.first_broken_position) == (
            a_pb2.CHAIN_BREAK_REASON_TAIL_REMOVED,
            0,
            3,
        )


async def test_postgres_verify_log_reports_every_chain(tmp_path: Path, pg_dsn: str) -> None:
    async with (
        served(tmp_path, "replica-a", pg_dsn) as a,
        served(tmp_path, "replica-b", pg_dsn) as b,
    ):
        await record(a, "sa", 4)
        await record(b, "sb", 5)
        clean = await a.VerifyLog(a_pb2.VerifyLogRequest())
        assert clean.ok
        assert [(c.chain_id, c.ok, c.rows_checked) for c in clean.chains] == [
            ("replica-a", True, 4),
            ("replica-b", True, 5),
        ]

        conn = await asyncpg.connect(pg_dsn)
        try:
            victim = await conn.fetchval(
                "SELECT sequence FROM agent_audit_log WHERE chain_id = 'replica-b'"
                " AND chain_seq = 3"
            )
            await conn.execute(
                "UPDATE agent_audit_log SET elapsed_ms = 99 WHERE sequence = $1", victim
            )
            # Rows of a chain no replica ever wrote (no recorded head).
            await conn.execute(
                "INSERT INTO agent_audit_log (sequence, stored_ns, event_id, session_id, step,"
                " tool_name, status, elapsed_ms, output_preview, agent_name, time_ns, call_id,"
                " verdict, matched_rule, rule_source, conflict_log, trace_id,"
                " termination_reason, policy_version, arguments_json, chain_id, chain_seq,"
                " prev_hash, row_hash) SELECT 999, stored_ns, 'ghost-1', session_id, step,"
                " tool_name, status, elapsed_ms, output_preview, agent_name, time_ns, call_id,"
                " verdict, matched_rule, rule_source, conflict_log, trace_id,"
                " termination_reason, policy_version, arguments_json, 'ghost', 1, prev_hash,"
                " row_hash FROM agent_audit_log WHERE sequence = 1"
            )
        finally:
            await conn.close()

        verdict = await b.VerifyLog(a_pb2.VerifyLogRequest())
        assert not verdict.ok
        chains = {c.chain_id: c for c in verdict.chains}
        assert set(chains) == {"replica-a", "replica-b", "ghost"}
        assert chains["replica-a"].ok and chains["replica-a"].rows_checked == 4
        broken = chains["replica-b"]
        assert not broken.ok
        assert (broken.reason, broken.first_broken_sequence, broken.first_broken_position) == (
            a_pb2.CHAIN_BREAK_REASON_ROW_EDITED,
            victim,
            3,
        )
        assert "row_hash does not match" in broken.detail
        assert broken.head_position == 5 and broken.head_hash
        ghost = chains["ghost"]
        assert (ghost.ok, ghost.reason, ghost.first_broken_sequence) == (
            False,
            a_pb2.CHAIN_BREAK_REASON_UNKNOWN_CHAIN,
            999,
        )
        # The overall answer names the earliest broken row in the log.
        assert verdict.first_broken_sequence == min(victim, 999)


async def test_signed_heads_are_exported_as_otel_log_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OTel SDK's in-memory exporter receives one record per exported head, carrying
    every field; a head read back from the record verifies against the store, and a chain
    rewritten afterwards is caught by it."""
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # the suite turns the SDK off
    key = Ed25519PrivateKey.generate()
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    store = await AuditStore.open(tmp_path / "audit.db")
    try:
        core = AuditCore(store, head_key=key, head_sinks=[otel_head_sink(provider)])
        await store.append([AuditEventRow(f"e{n}", "s", n, "read_file", "OK") for n in range(1, 5)])
        head = await core.export_head()
        [exported] = exporter.get_finished_logs()
        record = exported.log_record
        assert record.event_name == HEAD_EVENT
        assert record.body == head.log_message()
        assert record.attributes is not None
        from_record = head_from_attributes(record.attributes)
        assert from_record == head and from_record.signature_holds(key.public_key())
        assert await check_heads([from_record], key.public_key(), store.row_hash_at) == []
    finally:
        await store.close()
    # The chain rewritten with fresh hashes: it verifies alone, not against the record.
    db = sqlite3.connect(tmp_path / "audit.db")
    with db:
        rows = db.execute(
            f"SELECT sequence, stored_ns, {', '.join(EVENT_FIELDS)} FROM agent_audit_log"
            " ORDER BY sequence"
        ).fetchall()
        prev = "0" * 64
        for row in rows:
            values = list(row)
            values[2 + EVENT_FIELDS.index("output_preview")] = "forged"
            digest = hash_values(prev, values)
            db.execute(
                "UPDATE agent_audit_log SET output_preview = 'forged', prev_hash = ?,"
                " row_hash = ? WHERE sequence = ?",
                (prev, digest, row[0]),
            )
            prev = digest
        db.execute("UPDATE audit_chain SET head_hash = ?", (prev,))
    db.close()
    store = await AuditStore.open(tmp_path / "audit.db")
    try:
        assert (await store.verify()).ok
        problems = await check_heads([from_record], key.public_key(), store.row_hash_at)
        assert problems and "rewritten" in problems[0]
    finally:
        await store.close()


async def test_an_audit_process_exports_its_heads_through_the_otel_logs_signal(
    stack_factory: type[LocalStack], tmp_path: Path
) -> None:
    """A real audit process with OTEL_LOGS_EXPORTER=console: the signed head leaves as an
    OpenTelemetry log record (the console exporter's JSON, event name and attributes),
    beside the plain log line."""
    key = Ed25519PrivateKey.generate()
    key_file = tmp_path / "head.pem"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    stack = stack_factory(
        tmp_path / "stack",
        env={
            "audit": {
                "STOCKADE_AUDIT_HEAD_SIGNING_KEY_FILE": str(key_file),
                "STOCKADE_AUDIT_HEAD_EXPORT_INTERVAL_S": "0.2",
                "OTEL_SDK_DISABLED": "false",
                "OTEL_LOGS_EXPORTER": "console",
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "none",
            }
        },
    )
    await stack.start(["audit"])
    log = stack.log_dir / "audit.log"
    for _ in range(1200):  # the batch processor flushes within seconds; poll generously
        text = log.read_text(errors="replace")
        if HEAD_EVENT in text and "stockade.audit.head_signature" in text:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"no head log record:\n{stack.log_tail('audit')}")
    lines = [json.loads(line) for line in text.splitlines() if line.startswith('{"ts"')]
    heads = parse_heads(line["msg"] for line in lines if line["logger"] == "stockade.audit.heads")
    assert heads and all(h.signature_holds(key.public_key()) for h in heads)
    # Each OTel record carries a head the log line also carried, signature and all.
    exported = set(re.findall(r'"stockade\.audit\.head_signature": "([^"]+)"', text))
    assert exported and exported <= {h.signature for h in heads}
