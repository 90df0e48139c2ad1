"""Signed chain heads (STORE-4): what catches a wholesale rewrite of the audit trail.

A hash chain detects edits, removals and reordering, but someone with write access to
the database can rewrite a whole chain and recompute every hash and the recorded head:
the rewritten chain verifies. So each replica signs its chain's head (chain id, position,
hash, time) with an Ed25519 key the database never sees and exports it at an interval as
a log line, which leaves the database's reach (a log pipeline, an OTel collector). Later,
``check_heads`` takes exported heads and the store: a head whose signature holds but
whose row in the store has another hash (or is missing) proves the chain was rewritten.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

#: A log message holding a signed head starts with this, then the head as compact JSON.
HEAD_PREFIX = "audit chain head "
_DOMAIN = "stockade.audit.head/v1"  # signatures of other messages never verify as heads


@dataclass(frozen=True, slots=True)
class SignedHead:
    """One exported chain head and its signature (base64)."""

    chain_id: str
    head_sequence: int
    head_hash: str
    time_ns: int
    signature: str = ""

    def message(self) -> bytes:
        """The bytes the signature covers."""
        fields = [_DOMAIN, self.chain_id, self.head_sequence, self.head_hash, self.time_ns]
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()

    def signed(self, key: Ed25519PrivateKey) -> SignedHead:
        """This head with its signature by ``key``."""
        signature = base64.b64encode(key.sign(self.message())).decode()
        return dataclasses.replace(self, signature=signature)

    def signature_holds(self, key: Ed25519PublicKey) -> bool:
        """True when the signature is ``key``'s over exactly these fields."""
        try:
            key.verify(base64.b64decode(self.signature, validate=True), self.message())
        except (InvalidSignature, ValueError):
            return False
        return True

    def log_message(self) -> str:
        """The log line's message: ``HEAD_PREFIX`` and the head as JSON."""
        return HEAD_PREFIX + json.dumps(dataclasses.asdict(self), separators=(",", ":"))


def parse_heads(lines: Iterable[str]) -> list[SignedHead]:
    """The signed heads in log lines (plain messages or Stockade's JSON log lines);
    other lines are ignored, malformed heads raise ``ValueError``."""
    heads: list[SignedHead] = []
    for line in lines:
        text = line.strip()
        if text.startswith("{"):
            try:
                text = str(json.loads(text).get("msg", ""))
            except (json.JSONDecodeError, AttributeError):
                continue
        if not text.startswith(HEAD_PREFIX):
            continue
        try:
            fields = json.loads(text[len(HEAD_PREFIX) :])
            heads.append(
                SignedHead(
                    chain_id=str(fields["chain_id"]),
                    head_sequence=int(fields["head_sequence"]),
                    head_hash=str(fields["head_hash"]),
                    time_ns=int(fields["time_ns"]),
                    signature=str(fields["signature"]),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"a malformed signed head: {text[:200]!r}") from err
    return heads


RowHashAt = Callable[[str, int], Awaitable[str | None]]


async def check_heads(
    heads: Iterable[SignedHead], key: Ed25519PublicKey, row_hash_at: RowHashAt
) -> list[str]:
    """Problems found comparing exported ``heads`` with the store (empty: all hold).

    ``row_hash_at(chain_id, position)`` gives the stored hash at that chain position, or
    None when no such row is stored. A head whose signature fails is reported and not
    trusted; a head at or below a retention anchor cannot be checked and is skipped by
    the caller's lookup returning ``""``.
    """
    problems: list[str] = []
    for head in heads:
        where = f"chain {head.chain_id!r} position {head.head_sequence}"
        if not head.signature_holds(key):
            problems.append(f"{where}: the exported head's signature does not verify")
            continue
        if head.head_sequence == 0:
            continue
        stored = await row_hash_at(head.chain_id, head.head_sequence)
        if stored == "":
            continue  # deleted by retention: nothing left to compare
        if stored is None:
            problems.append(f"{where}: the signed head's row is not in the store")
        elif stored != head.head_hash:
            problems.append(
                f"{where}: the stored hash differs from the signed head (the chain was rewritten)"
            )
    return problems
