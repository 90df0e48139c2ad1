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
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from opentelemetry._logs import LoggerProvider, SeverityNumber, get_logger_provider

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


#: The OpenTelemetry event name of an exported head, and its attribute keys.
HEAD_EVENT = "stockade.audit.chain_head"
_ATTRIBUTES = {
    "chain_id": "stockade.audit.chain_id",
    "head_sequence": "stockade.audit.head_sequence",
    "head_hash": "stockade.audit.head_hash",
    "time_ns": "stockade.audit.head_time_ns",
    "signature": "stockade.audit.head_signature",
}


def otel_head_sink(provider: LoggerProvider | None = None) -> Callable[[SignedHead], None]:
    """A head sink that emits each signed head as an OpenTelemetry log record (event
    ``HEAD_EVENT``; body: the same text as the log line; every field as an attribute), so
    a collector can keep heads where the database's owner cannot reach them. Without an
    SDK logger provider (``OTEL_LOGS_EXPORTER`` none) the records go nowhere."""
    logger = (provider or get_logger_provider()).get_logger("stockade.audit.heads")

    def emit(head: SignedHead) -> None:
        logger.emit(
            timestamp=head.time_ns,
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body=head.log_message(),
            attributes={key: getattr(head, field) for field, key in _ATTRIBUTES.items()},
            event_name=HEAD_EVENT,
        )

    return emit


def head_from_attributes(attributes: Mapping[str, object]) -> SignedHead:
    """The signed head an exported log record's attributes carry (raises ``ValueError``
    when one is missing or of the wrong type)."""
    try:
        return SignedHead(
            chain_id=str(attributes[_ATTRIBUTES["chain_id"]]),
            head_sequence=int(attributes[_ATTRIBUTES["head_sequence"]]),  # type: ignore[call-overload]
            head_hash=str(attributes[_ATTRIBUTES["head_hash"]]),
            time_ns=int(attributes[_ATTRIBUTES["time_ns"]]),  # type: ignore[call-overload]
            signature=str(attributes[_ATTRIBUTES["signature"]]),
        )
    except (KeyError, TypeError) as err:
        raise ValueError(f"not an exported chain head: {err}") from err
