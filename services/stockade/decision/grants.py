"""Ed25519 grants (DEC-12): the decision service signs, the executor verifies.

A grant's payload is canonical JSON claims binding the session id, call id, tool name,
the SHA-256 of the canonical JSON arguments, an expiry and a random nonce. The executor
holds only the public key; ``GrantVerifier`` refuses forged, expired, replayed and
mismatched grants with the ``stockade.errors.GrantError`` family (PERMISSION_DENIED).

Arguments travel as ``google.protobuf.Struct``, which turns every number into a float;
the digest therefore writes integral floats as integers so ``{"n": 1}`` and
``{"n": 1.0}`` hash the same on both sides.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from stockade.errors import (
    GrantError,
    GrantExpired,
    GrantMismatch,
    GrantMissing,
    GrantReplayed,
    InvalidArgument,
)

DEFAULT_TTL_S = 60.0
PRIVATE_KEY_NAME = "grant_signing_key.pem"
PUBLIC_KEY_NAME = "grant_public_key.pem"


class GrantInvalid(GrantError):
    """The grant is malformed or its signature does not verify (forged or tampered)."""

    reason = "GRANT_INVALID"


def _canonical_value(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical_value(v) for v in value]
    return value


def _flat_strings(value: Mapping[str, Any]) -> bool:
    # The common case (string and bool arguments) needs no rewriting walk.
    return all(isinstance(v, str | bool) for v in value.values())


def canonical_json(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8, integral floats as integers."""
    if not (isinstance(value, dict) and _flat_strings(value)):
        return _dumps(_canonical_value(value))
    if all(isinstance(k, str) for k in value):
        return _flat_json(value)
    return _dumps(value)


def _flat_json(value: Mapping[str, str | bool]) -> bytes:
    """``_dumps`` of a dict of str keys to str/bool values, without the encoder's set-up.

    Sorted keys, ``,``/``:`` separators, the encoder's own string escaping; a test checks
    that the bytes equal ``_dumps``.
    """
    enc = _encode_str
    parts = []
    for k in sorted(value):
        v = value[k]
        parts.append(f"{enc(k)}:{'true' if v is True else 'false' if v is False else enc(v)}")
    return ("{" + ",".join(parts) + "}").encode()


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""One encoder for every payload (``json.dumps`` with options builds a new one per call)."""

_encode_str: Callable[[str], str] = json.encoder.encode_basestring
"""JSON string literal of a str, as ``_ENCODER`` writes it (ensure_ascii=False)."""


def _dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode("utf-8")


def _claims_payload(
    session_id: str, call_id: str, tool_name: str, digest: str, exp: float, nonce: str, kid: str
) -> bytes:
    """``_dumps`` of the claims dict, written directly (keys already in sorted order).

    The same bytes as ``_dumps({"v": 1, "sid": ..., ...})``: strings through the encoder's
    own escaping, the float through ``repr`` as ``json`` does; a test checks the equality.
    """
    return (
        f'{{"args":{_encode_str(digest)},"cid":{_encode_str(call_id)},"exp":{exp!r},'
        f'"kid":{_encode_str(kid)},"nonce":{_encode_str(nonce)},"sid":{_encode_str(session_id)},'
        f'"tool":{_encode_str(tool_name)},"v":1}}'
    ).encode()


def argument_digest(arguments: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a call's arguments."""
    return hashlib.sha256(canonical_json(dict(arguments))).hexdigest()


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short id of a public key, so a rotated key can be told apart."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class SignedGrant:
    """A grant as it travels: payload, signature, key id and expiry."""

    payload: bytes
    signature: bytes
    key_id: str
    expires_at: float


class GrantSigner:
    """Signs grants with the decision service's private key."""

    def __init__(
        self,
        private_key: Ed25519PrivateKey,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = private_key
        self.ttl_s = ttl_s
        self._clock = clock
        self.key_id = key_id(private_key.public_key())

    def sign(
        self,
        *,
        session_id: str,
        call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        ttl_s: float | None = None,
    ) -> SignedGrant:
        """Issue a grant for exactly this call."""
        expires = self._clock() + (self.ttl_s if ttl_s is None else ttl_s)
        # Claims v, sid, cid, tool, args (digest), exp, nonce, kid as canonical JSON.
        payload = _claims_payload(
            session_id,
            call_id,
            tool_name,
            argument_digest(arguments),
            int(expires * 1000) / 1000,
            secrets.token_hex(16),
            self.key_id,
        )
        return SignedGrant(payload, self._key.sign(payload), self.key_id, expires)


class GrantVerifier:
    """Verifies grants with the public key only; each grant verifies once (replay cache)."""

    def __init__(
        self, public_key: Ed25519PublicKey, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = public_key
        self._clock = clock
        self.key_id = key_id(public_key)
        self._used: dict[str, float] = {}
        self._expiries: list[tuple[float, str]] = []
        """The used nonces by expiry (a heap), so forgetting expired ones costs O(log n)."""
        self._lock = threading.Lock()

    def verify(
        self,
        grant_payload: bytes,
        signature: bytes,
        *,
        session_id: str,
        call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any],
    ) -> None:
        """Return if the grant allows exactly this call now; raise a ``GrantError`` if not.

        Checks run signature first (a forged payload says nothing), then expiry, then the
        binding, and only a grant that passes all of them is marked used.
        """
        if not grant_payload or not signature:
            raise GrantMissing("the call carries no grant from the decision service")
        try:
            self._key.verify(signature, grant_payload)
        except InvalidSignature as exc:
            raise GrantInvalid("grant signature does not verify (forged or tampered)") from exc
        try:
            claims = json.loads(grant_payload)
            expires = float(claims["exp"])
            nonce = str(claims["nonce"])
            bound = (claims["sid"], claims["cid"], claims["tool"], claims["args"])
        except (ValueError, KeyError, TypeError) as exc:
            raise GrantInvalid("grant payload is malformed") from exc
        now = self._clock()
        if now >= expires:
            raise GrantExpired(f"grant expired {now - expires:.1f}s ago", call_id=call_id)
        for name, want, got in (
            ("session", session_id, bound[0]),
            ("call", call_id, bound[1]),
            ("tool", tool_name, bound[2]),
            ("arguments", argument_digest(arguments), bound[3]),
        ):
            if want != got:
                raise GrantMismatch(f"grant was issued for another {name}", field=name)
        with self._lock:
            self._purge(now)
            if nonce in self._used:
                raise GrantReplayed("grant was already used", call_id=call_id)
            self._used[nonce] = expires
            heapq.heappush(self._expiries, (expires, nonce))

    def _purge(self, now: float) -> None:
        # An expired grant is refused for its expiry, so its nonce need not be kept.
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            del self._used[heapq.heappop(expiries)[1]]

    def remembered(self) -> int:
        """How many used grants the replay cache holds (those not yet expired)."""
        return len(self._used)


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """Read an Ed25519 private key (PEM, PKCS#8, unencrypted)."""
    data = _read(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except ValueError as exc:
        raise InvalidArgument(f"{path}: not a PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidArgument(f"{path}: not an Ed25519 private key")
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """Read an Ed25519 public key (PEM, SubjectPublicKeyInfo)."""
    data = _read(path)
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise InvalidArgument(f"{path}: not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidArgument(f"{path}: not an Ed25519 public key")
    return key


def _read(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read key file {path}: {exc.strerror}") from exc


def generate_keypair(directory: str | Path) -> tuple[Path, Path]:
    """Write a new key pair into ``directory``; return (private key path, public key path)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    priv = d / PRIVATE_KEY_NAME
    pub = d / PUBLIC_KEY_NAME
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Create with 0600 from the start: the private key is never world-readable, not even briefly.
    fd = os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return priv, pub
