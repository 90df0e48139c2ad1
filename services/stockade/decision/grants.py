"""Ed25519 grants (DEC-12): the decision service's signer.

The format (canonical JSON claims, the argument and findings digests, the settlement) lives
in ``stockade.contract.grant``, shared with the executor's verifier
(``stockade.executor.grants``); this module signs. A grant binds the session id, call id,
tool name, the arguments' digest, the digest of the executor findings the decision relied
on and how any tool-level ASK was settled (DEC-12 rev 2), an expiry and a random nonce.

The key is loaded with ``cryptography`` (PEM, the same files as ever) and signatures are
made by libsodium (PyNaCl): Ed25519 is deterministic (RFC 8032), so the bytes are the same
OpenSSL would make and the executor verifies them as before, but libsodium signs in about
two thirds of the time, and much less when the CPU caches are cold, as they are between
two Decides that each cross the network stack (OpenSSL 3 fetches and builds its signature
and digest contexts anew for every signature). The signer checks at start-up that both
libraries derive the same public key and that a probe signature verifies with it, so a
mismatch cannot sign one grant.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nacl.bindings import crypto_sign, crypto_sign_seed_keypair

from stockade.contract.grant import (
    GrantInvalid,
    argument_digest,
    canonical_json,
    claims_payload,
    key_id,
    load_private_key,
    load_public_key,
)

__all__ = [
    "DEFAULT_TTL_S",
    "NO_SETTLEMENT",
    "PRIVATE_KEY_NAME",
    "PUBLIC_KEY_NAME",
    "GrantInvalid",
    "GrantSigner",
    "SignedGrant",
    "argument_digest",
    "canonical_json",
    "generate_keypair",
    "key_id",
    "load_private_key",
    "load_public_key",
]

DEFAULT_TTL_S = 60.0
PRIVATE_KEY_NAME = "grant_signing_key.pem"
PUBLIC_KEY_NAME = "grant_public_key.pem"


NO_SETTLEMENT: Mapping[str, str] = {"by": "none"}
"""The settlement of a call without any tool-level ASK."""


@dataclass(frozen=True)
class SignedGrant:
    """A grant as it travels: payload, signature, key id and expiry."""

    payload: bytes
    signature: bytes
    key_id: str
    expires_at: float
    args_digest: str = ""
    """The arguments' digest the payload binds (its ``args`` claim), kept so the decision's
    audit record need not hash the same arguments again."""


class GrantSigner:
    """Signs grants with the decision service's private key."""

    def __init__(
        self,
        private_key: Ed25519PrivateKey,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        public = private_key.public_key()
        seed = private_key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        sodium_public, self._sodium_key = crypto_sign_seed_keypair(seed)
        raw_public = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        if sodium_public != raw_public:
            raise GrantInvalid("libsodium and OpenSSL derive different public keys from the key")
        self.ttl_s = ttl_s
        self._clock = clock
        self.key_id = key_id(public)
        probe = b"stockade grant signer self-test"
        try:
            public.verify(self._sign_raw(probe), probe)
        except InvalidSignature as exc:  # never expected: refuse to sign anything
            raise GrantInvalid("a probe signature does not verify with the public key") from exc

    def _sign_raw(self, payload: bytes) -> bytes:
        """The Ed25519 signature of ``payload`` (libsodium's signed message starts with it)."""
        return crypto_sign(payload, self._sodium_key)[:64]

    def sign(
        self,
        *,
        session_id: str,
        call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        findings: str = "",
        settle: Mapping[str, str] = NO_SETTLEMENT,
        ttl_s: float | None = None,
    ) -> SignedGrant:
        """Issue a grant for exactly this call, binding the ``findings`` digest the decision
        relied on ("" for none) and how its tool-level ASK was ``settle``d."""
        expires = self._clock() + (self.ttl_s if ttl_s is None else ttl_s)
        digest = argument_digest(arguments)
        payload = claims_payload(
            session_id=session_id,
            call_id=call_id,
            tool_name=tool_name,
            args_digest=digest,
            findings=findings,
            settle=settle,
            exp=int(expires * 1000) / 1000,
            nonce=os.urandom(16).hex(),  # secrets.token_hex(16), one call less
            kid=self.key_id,
        )
        return SignedGrant(payload, self._sign_raw(payload), self.key_id, expires, digest)


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
