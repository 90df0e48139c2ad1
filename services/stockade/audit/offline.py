"""Checks of a stored audit trail without the service (``stockade audit verify --db/--dsn``):
every chain of a PostgreSQL store, and exported signed heads against either store."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import asyncpg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from stockade.audit.heads import SignedHead, check_heads
from stockade.audit.model import VerifyResult
from stockade.audit.store.postgres import verify_chains
from stockade.db.postgres import connect
from stockade.errors import InvalidArgument


async def _connect(dsn: str) -> asyncpg.Connection:
    return await connect(dsn, what="audit")


async def verify_postgres(dsn: str) -> VerifyResult:
    """Every chain of the PostgreSQL audit store at ``dsn``, in one snapshot."""
    conn = await _connect(dsn)
    try:
        return await verify_chains(conn)
    except asyncpg.UndefinedTableError as err:
        raise InvalidArgument("no audit tables in that database", field="dsn") from err
    finally:
        await conn.close()


def load_head_public_key(path: Path) -> Ed25519PublicKey:
    """The public half of the head-signing key (PEM); refuses any other key."""
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as err:
        raise InvalidArgument(f"cannot load the head public key {path}: {err}") from err
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidArgument(f"{path} does not hold an Ed25519 public key")
    return key


async def check_heads_postgres(
    dsn: str, heads: Sequence[SignedHead], key: Ed25519PublicKey
) -> list[str]:
    """Problems between exported ``heads`` and the PostgreSQL store at ``dsn``."""
    conn = await _connect(dsn)
    try:

        async def row_hash_at(chain_id: str, position: int) -> str | None:
            found = await conn.fetchval(
                "SELECT row_hash FROM agent_audit_log WHERE chain_id = $1 AND chain_seq = $2",
                chain_id,
                position,
            )
            if found is not None:
                return str(found)
            anchor = await conn.fetchval(
                "SELECT anchor_sequence FROM audit_chain WHERE chain_id = $1", chain_id
            )
            return "" if anchor is not None and position <= int(anchor) else None

        return await check_heads(heads, key, row_hash_at)
    finally:
        await conn.close()


async def check_heads_sqlite(
    path: str | os.PathLike[str], heads: Sequence[SignedHead], key: Ed25519PublicKey
) -> list[str]:
    """Problems between exported ``heads`` and the SQLite file at ``path`` (read only)."""
    db = sqlite3.connect(f"file:{os.fspath(path)}?mode=ro", uri=True)
    try:

        async def row_hash_at(chain_id: str, position: int) -> str | None:
            if chain_id != "sqlite":
                return None
            found = db.execute(
                "SELECT row_hash FROM agent_audit_log WHERE sequence = ?", (position,)
            ).fetchone()
            if found is not None:
                return str(found[0])
            anchor = db.execute("SELECT anchor_sequence FROM audit_chain").fetchone()
            return "" if anchor is not None and position <= int(anchor[0]) else None

        return await check_heads(heads, key, row_hash_at)
    finally:
        db.close()
