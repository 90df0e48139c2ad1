"""Signed chain heads (STORE-4): a wholesale rewrite of a chain with recomputed hashes
verifies on its own, and is caught by comparing the store with heads exported before."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from pathlib import Path

import asyncpg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from stockade.audit.app import load_head_key
from stockade.audit.chain import hash_values
from stockade.audit.core import AuditCore
from stockade.audit.heads import HEAD_PREFIX, SignedHead, check_heads, parse_heads
from stockade.audit.model import EVENT_FIELDS
from stockade.audit.store.base import AuditBackend
from stockade.audit.store.postgres import PostgresAuditStore
from stockade.audit.store.sqlite import AuditStore
from stockade.errors import InvalidArgument

from .conftest import EventFactory

KEY = Ed25519PrivateKey.generate()


async def _exported(store: AuditBackend, caplog: pytest.LogCaptureFixture) -> list[SignedHead]:
    """Export the head through the service's function and read it back from the log."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="stockade.audit.heads"):
        await AuditCore(store, head_key=KEY).export_head()
    return parse_heads(record.getMessage() for record in caplog.records)


async def test_an_exported_head_matches_the_store_on_both_backends(
    store: AuditBackend, make_event: EventFactory, caplog: pytest.LogCaptureFixture
) -> None:
    await store.append([make_event(i) for i in range(5)])
    (head,) = await _exported(store, caplog)
    assert head.head_sequence == 5 and head.signature_holds(KEY.public_key())
    await store.append([make_event(i) for i in range(5, 9)])  # the chain moved on: fine
    assert await check_heads([head], KEY.public_key(), store.row_hash_at) == []
    (later,) = await _exported(store, caplog)
    assert later.head_sequence == 9
    assert await check_heads([head, later], KEY.public_key(), store.row_hash_at) == []


async def test_forged_or_foreign_signatures_are_not_trusted(
    store: AuditBackend, make_event: EventFactory, caplog: pytest.LogCaptureFixture
) -> None:
    await store.append([make_event(i) for i in range(3)])
    (head,) = await _exported(store, caplog)
    moved = SignedHead(head.chain_id, 2, head.head_hash, head.time_ns, head.signature)
    other = SignedHead(head.chain_id, 3, head.head_hash, head.time_ns).signed(
        Ed25519PrivateKey.generate()
    )
    garbage = SignedHead(head.chain_id, 3, head.head_hash, head.time_ns, "%%not base64%%")
    problems = await check_heads([moved, other, garbage], KEY.public_key(), store.row_hash_at)
    assert len(problems) == 3
    assert all("signature does not verify" in p for p in problems)


async def test_a_rewritten_sqlite_chain_verifies_but_its_signed_head_catches_it(
    sqlite_store: AuditStore,
    db_path: Path,
    make_event: EventFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await sqlite_store.append([make_event(i) for i in range(6)])
    heads = await _exported(sqlite_store, caplog)
    with sqlite3.connect(db_path) as db:  # rewrite row 2 and recompute every hash after it
        rows = db.execute("SELECT * FROM agent_audit_log ORDER BY sequence").fetchall()
        names = [c[0] for c in db.execute("SELECT * FROM agent_audit_log").description]
        preview = names.index("output_preview")
        prev = rows[0][-1]
        for row in rows[1:]:
            values = list(row[:-2])
            if row[0] == 2:
                values[preview] = "nothing happened here"
            digest = hash_values(prev, values)
            db.execute(
                "UPDATE agent_audit_log SET output_preview = ?, prev_hash = ?, row_hash = ?"
                " WHERE sequence = ?",
                (values[preview], prev, digest, row[0]),
            )
            prev = digest
        db.execute("UPDATE audit_chain SET head_hash = ?", (prev,))
    assert (await sqlite_store.verify()).ok  # the chain alone cannot tell
    problems = await check_heads(heads, KEY.public_key(), sqlite_store.row_hash_at)
    assert problems == [
        "chain 'sqlite' position 6: the stored hash differs from the signed head"
        " (the chain was rewritten)"
    ]


async def test_a_rewritten_postgres_chain_is_named_by_its_signed_head(
    pg_dsn: str, make_event: EventFactory, caplog: pytest.LogCaptureFixture
) -> None:
    a = await PostgresAuditStore.open(pg_dsn, chain_id="replica-a")
    b = await PostgresAuditStore.open(pg_dsn, chain_id="replica-b")
    try:
        await a.append([make_event(i, session="sa") for i in range(4)])
        await b.append([make_event(i, session="sb") for i in range(4)])
        heads = await _exported(a, caplog) + await _exported(b, caplog)
        conn = await asyncpg.connect(pg_dsn)
        try:  # drop b's second row and re-chain the rest with fresh hashes
            await conn.execute(
                "DELETE FROM agent_audit_log WHERE chain_id = 'replica-b' AND chain_seq = 2"
            )
            rows = await conn.fetch(
                "SELECT * FROM agent_audit_log WHERE chain_id = 'replica-b' ORDER BY chain_seq"
            )
            prev = "0" * 64
            for position, row in enumerate(rows, start=1):
                event = [row[k] for k in EVENT_FIELDS]
                digest = hash_values(prev, [position, row["stored_ns"], *event])
                await conn.execute(
                    "UPDATE agent_audit_log SET chain_seq = $1, prev_hash = $2, row_hash = $3"
                    " WHERE sequence = $4",
                    position,
                    prev,
                    digest,
                    row["sequence"],
                )
                prev = digest
            await conn.execute(
                "UPDATE audit_chain SET head_sequence = $1, head_hash = $2"
                " WHERE chain_id = 'replica-b'",
                len(rows),
                prev,
            )
        finally:
            await conn.close()
        assert (await a.verify()).ok  # both chains still link up
        problems = await check_heads(heads, KEY.public_key(), a.row_hash_at)
        assert problems == [
            "chain 'replica-b' position 4: the signed head's row is not in the store"
        ]
    finally:
        await a.close()
        await b.close()


def test_heads_are_read_from_json_log_lines_and_malformed_ones_refused() -> None:
    head = SignedHead("replica-a", 3, "ab" * 32, 1).signed(KEY)
    line = json.dumps({"level": "INFO", "msg": head.log_message()})
    assert parse_heads(["unrelated", '{"msg": "other"}', "{not json", line]) == [head]
    with pytest.raises(ValueError, match="malformed signed head"):
        parse_heads([HEAD_PREFIX + '{"chain_id": "x"}'])


def test_the_signing_key_must_be_an_ed25519_private_key(tmp_path: Path) -> None:
    good = tmp_path / "head.pem"
    good.write_bytes(
        KEY.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    assert load_head_key(good).public_key() == KEY.public_key()
    wrong = tmp_path / "ec.pem"
    wrong.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    for path in (wrong, tmp_path / "missing.pem"):
        with pytest.raises(InvalidArgument):
            load_head_key(path)


async def test_the_cli_checks_every_postgres_chain_and_the_signed_heads_offline(
    pg_dsn: str,
    tmp_path: Path,
    make_event: EventFactory,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from stockade.cli.main import build_parser

    a = await PostgresAuditStore.open(pg_dsn, chain_id="replica-a")
    b = await PostgresAuditStore.open(pg_dsn, chain_id="replica-b")
    try:
        await a.append([make_event(i, session="sa") for i in range(3)])
        await b.append([make_event(i, session="sb") for i in range(2)])
        heads = await _exported(a, caplog) + await _exported(b, caplog)
    finally:
        await a.close()
        await b.close()
    log_file = tmp_path / "heads.log"
    log_file.write_text("".join(json.dumps({"msg": h.log_message()}) + "\n" for h in heads))
    public = tmp_path / "head.pub"
    public.write_bytes(
        KEY.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )

    def cli(*argv: str) -> int:
        args = build_parser().parse_args(["audit", "verify", *argv])
        return int(args.func(args))

    keys = ("--heads", str(log_file), "--head-public-key", str(public))
    assert await asyncio.to_thread(cli, "--dsn", pg_dsn, *keys) == 0
    out = capsys.readouterr().out
    assert "ok: 5 rows" in out and "'replica-a': 3 rows ok" in out
    assert "signed heads: 2 checked, every one matches the store" in out
    conn = await asyncpg.connect(pg_dsn)
    try:  # replace b's last row and its recorded head with a forgery that links up
        row = await conn.fetchrow(
            "SELECT * FROM agent_audit_log WHERE chain_id = 'replica-b' AND chain_seq = 2"
        )
        assert row is not None
        event = [row[k] for k in EVENT_FIELDS]
        event[EVENT_FIELDS.index("output_preview")] = "forged"
        digest = hash_values(row["prev_hash"], [2, row["stored_ns"], *event])
        await conn.execute(
            "UPDATE agent_audit_log SET output_preview = 'forged', row_hash = $1"
            " WHERE sequence = $2",
            digest,
            row["sequence"],
        )
        await conn.execute(
            "UPDATE audit_chain SET head_hash = $1 WHERE chain_id = 'replica-b'", digest
        )
    finally:
        await conn.close()
    assert await asyncio.to_thread(cli, "--dsn", pg_dsn) == 0  # the chains alone still hold
    assert await asyncio.to_thread(cli, "--dsn", pg_dsn, *keys) == 1
    assert (
        "HEADS BROKEN: chain 'replica-b' position 2: the stored hash differs from the signed"
        in capsys.readouterr().out
    )
    assert await asyncio.to_thread(cli, "--dsn", pg_dsn, "--heads", str(log_file)) == 2
    assert await asyncio.to_thread(cli, "--heads", str(log_file), "--head-public-key", "x") == 2
