"""Checking a log file's hash chain, with or without a running service (AUD-5).

``verify_file`` reads the retained rows in sequence order inside one read transaction
(a consistent snapshot while a writer goes on) and feeds them to ``ChainChecker``; it
also counts the stand-in rows of refused events and the rows holding a cut marker, so
``stockade audit verify`` shows what the trail holds only in part. The
audit service runs it in a worker thread for ``VerifyLog``; ``stockade audit verify
--db`` runs it directly on a copy of the database.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from pathlib import Path

from stockade.audit.chain import ChainChecker
from stockade.audit.model import (
    EVENT_FIELDS,
    SQLITE_CHAIN,
    ChainBreak,
    ChainVerification,
    VerifyResult,
)
from stockade.audit.store.reads import marker_kind
from stockade.audit.store.schema import select_row_sql
from stockade.errors import InvalidArgument

_N_HASHED = 2 + len(EVENT_FIELDS)  # sequence, stored_ns, event fields
_ARGUMENTS = 2 + EVENT_FIELDS.index("arguments_json")
_CONFLICTS = 2 + EVENT_FIELDS.index("conflict_log")


def verify_file(path: str | os.PathLike[str], chunk: int = 2000) -> VerifyResult:
    """Check the chain in the SQLite file at ``path``; name the first broken link."""
    if not Path(path).is_file():
        raise InvalidArgument(f"no audit database at {os.fspath(path)}", field="path")
    db = sqlite3.connect(os.fspath(path), isolation_level=None)
    try:
        db.execute("PRAGMA query_only = 1")
        db.execute("BEGIN")
        try:
            meta = db.execute(
                "SELECT anchor_sequence, anchor_hash, head_sequence, head_hash FROM audit_chain"
            ).fetchone()
        except sqlite3.OperationalError:
            meta = None
        if meta is None:
            detail = "the chain's anchor record is missing"
            missing = ChainVerification(
                SQLITE_CHAIN, False, 0, 0, 1, ChainBreak.UNKNOWN_CHAIN, detail
            )
            return VerifyResult(False, 0, 1, detail, chains=(missing,))
        anchor_sequence, anchor_hash, head_sequence, head_hash = meta
        checker = ChainChecker(int(anchor_sequence), str(anchor_hash))
        cursor = db.execute(f"{select_row_sql(db)} ORDER BY sequence")
        refused = cut = 0
        while checker.broken is None and (batch := cursor.fetchmany(chunk)):
            for values in batch:
                if not checker.feed(values[:_N_HASHED], values[-2], values[-1]):
                    break
                kind = marker_kind(values[_ARGUMENTS], values[_CONFLICTS])
                refused += kind == "refused"
                cut += kind == "cut"
        result = checker.finish(int(head_sequence), str(head_hash))
        # On SQLite a row's position in the chain is its log sequence; rows removed from
        # the end leave no stored row at fault.
        at_fault = 0 if checker.reason is ChainBreak.TAIL_REMOVED else result.first_broken_sequence
        chain = checker.chain_result(
            SQLITE_CHAIN,
            result,
            head=(int(head_sequence), str(head_hash)),
            anchor_position=int(anchor_sequence),
            broken_sequence=at_fault,
        )
        return dataclasses.replace(
            result,
            head_sequence=int(head_sequence),
            head_hash=str(head_hash),
            anchor_sequence=int(anchor_sequence),
            refused_rows=refused,
            cut_rows=cut,
            chains=(chain,),
        )
    finally:
        db.close()
