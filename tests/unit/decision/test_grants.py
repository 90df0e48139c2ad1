"""Ed25519 grants (DEC-12): sign, verify, and refuse every forgery, expiry, replay, swap."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format, struct_pb2

from stockade.decision.grants import (
    GrantInvalid,
    GrantSigner,
    argument_digest,
    generate_keypair,
    load_private_key,
    load_public_key,
)
from stockade.errors import (
    GrantExpired,
    GrantMismatch,
    GrantMissing,
    GrantReplayed,
    InvalidArgument,
)
from stockade.executor.grants import GrantVerifier

ARGS = {"command": "git status", "timeout": 5}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pair() -> tuple[GrantSigner, GrantVerifier, Clock]:
    key = Ed25519PrivateKey.generate()
    clock = Clock()
    return GrantSigner(key, clock=clock), GrantVerifier(key.public_key(), clock=clock), clock


def _verify(v: GrantVerifier, payload: bytes, sig: bytes, **over: object) -> None:
    kw: dict[str, object] = dict(
        session_id="s1", call_id="c1", tool_name="run_bash", arguments=ARGS
    )
    kw.update(over)
    v.verify(payload, sig, **kw)  # type: ignore[arg-type]


def test_valid_grant_verifies_once(pair: tuple[GrantSigner, GrantVerifier, Clock]) -> None:
    signer, verifier, _ = pair
    g = signer.sign(session_id="s1", call_id="c1", tool_name="run_bash", arguments=ARGS)
    _verify(verifier, g.payload, g.signature)
    with pytest.raises(GrantReplayed):
        _verify(verifier, g.payload, g.signature)


def test_missing_grant(pair: tuple[GrantSigner, GrantVerifier, Clock]) -> None:
    with pytest.raises(GrantMissing):
        _verify(pair[1], b"", b"")


def test_forged_by_another_key_or_tampered(pair: tuple[GrantSigner, GrantVerifier, Clock]) -> None:
    signer, verifier, clock = pair
    rogue = GrantSigner(Ed25519PrivateKey.generate(), clock=clock)
    g = rogue.sign(session_id="s1", call_id="c1", tool_name="run_bash", arguments=ARGS)
    with pytest.raises(GrantInvalid):
        _verify(verifier, g.payload, g.signature)
    good = signer.sign(session_id="s1", call_id="c1", tool_name="run_bash", arguments=ARGS)
    tampered = good.payload.replace(b'"exp":', b'"exp":9')
    with pytest.raises(GrantInvalid):
        _verify(verifier, tampered, good.signature)


def test_expired(pair: tuple[GrantSigner, GrantVerifier, Clock]) -> None:
    signer, verifier, clock = pair
    g = signer.sign(session_id="s1", call_id="c1", tool_name="run_bash", arguments=ARGS)
    clock.now += 60.0
    with pytest.raises(GrantExpired):
        _verify(verifier, g.payload, g.signature)


def test_replay_cache_forgets_only_expired_grants(
    pair: tuple[GrantSigner, GrantVerifier, Clock],
) -> None:
    signer, verifier, clock = pair
    first = signer.sign(session_id="s1", call_id="c1", tool_name="run_bash", arguments=ARGS)
    _verify(verifier, first.payload, first.signature)
    # Many later grants with later expiries: the first one is still remembered...
    clock.now += 10.0
    for i in range(2000):
        g = signer.sign(session_id="s1", call_id=f"x{i}", tool_name="run_bash", arguments=ARGS)
        _verify(verifier, g.payload, g.signature, call_id=f"x{i}")
    assert verifier.remembered() == 2001
    with pytest.raises(GrantReplayed):
        _verify(verifier, first.payload, first.signature)
    # ... until it expires: then it is refused for its age and forgotten; the rest stay.
    clock.now = first.expires_at
    with pytest.raises(GrantExpired):
        _verify(verifier, first.payload, first.signature)
    late = signer.sign(session_id="s1", call_id="c2", tool_name="run_bash", arguments=ARGS)
    _verify(verifier, late.payload, late.signature, call_id="c2")
    assert verifier.remembered() == 2001  # the first forgotten, the late one added
    clock.now += 10.0  # past every expiry but the late grant's
    again = signer.sign(session_id="s1", call_id="c3", tool_name="run_bash", arguments=ARGS)
    _verify(verifier, again.payload, again.signature, call_id="c3")
    assert verifier.remembered() == 2
    with pytest.raises(GrantReplayed):
        _verify(verifier, late.payload, late.signature, call_id="c2")


@pytest.mark.parametrize(
    "over",
    [
        {"session_id": "s2"},
        {"call_id": "c2"},
        {"tool_name": "read_file"},
        {"arguments": {"command": "rm -rf ~", "timeout": 5}},
        {"arguments": {"command": "git status"}},
    ],
)
def test_mismatch(pair: tuple[GrantSigner, GrantVerifier, Clock], over: dict[str, object]) -> None:
    signer, verifier, _ = pair
    g = signer.sign(session_id="s1", call_id="c1", tool_name="run_bash", arguments=ARGS)
    with pytest.raises(GrantMismatch):
        _verify(verifier, g.payload, g.signature, **over)
    # a refused attempt does not burn the grant for the real call
    _verify(verifier, g.payload, g.signature)


def test_digest_is_stable_across_struct_round_trip() -> None:
    """Struct turns ints into floats; both sides must still agree on the digest."""
    s = struct_pb2.Struct()
    s.update({"b": [1, 2, {"x": 3}], "a": "é", "n": 5})
    back = json_format.MessageToDict(s)
    assert argument_digest(back) == argument_digest({"a": "é", "n": 5, "b": [1, 2, {"x": 3}]})
    assert argument_digest({"n": 1.5}) != argument_digest({"n": 1})


def test_keypair_files(tmp_path: Path) -> None:
    priv, pub = generate_keypair(tmp_path / "keys")
    assert stat.S_IMODE(os.stat(priv).st_mode) == 0o600
    signer = GrantSigner(load_private_key(priv))
    verifier = GrantVerifier(load_public_key(pub))
    g = signer.sign(session_id="s", call_id="c", tool_name="t", arguments={})
    verifier.verify(
        g.payload, g.signature, session_id="s", call_id="c", tool_name="t", arguments={}
    )
    assert signer.key_id == verifier.key_id
    with pytest.raises(InvalidArgument):
        load_public_key(priv)
    with pytest.raises(InvalidArgument):
        load_private_key(tmp_path / "missing.pem")


@pytest.mark.parametrize("size", [0, 1, 63, 64, 350, 4096])
def test_signatures_are_openssl_s_bytes(size: int) -> None:
    # Ed25519 is deterministic: libsodium's signature of a payload must be the very bytes
    # OpenSSL makes with the same key, so any verifier accepts them.
    key = Ed25519PrivateKey.generate()
    signer = GrantSigner(key)
    payload = os.urandom(size)
    assert signer._sign_raw(payload) == key.sign(payload)
    grant = signer.sign(session_id="s", call_id="c", tool_name="run_bash", arguments=ARGS)
    assert grant.signature == key.sign(grant.payload)
    key.public_key().verify(grant.signature, grant.payload)


def test_a_signer_whose_libraries_disagree_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import stockade.decision.grants as grants

    other = grants.crypto_sign_seed_keypair(os.urandom(32))
    monkeypatch.setattr(grants, "crypto_sign_seed_keypair", lambda seed: other)
    with pytest.raises(GrantInvalid, match="different public keys"):
        GrantSigner(Ed25519PrivateKey.generate())


def test_a_signer_whose_probe_does_not_verify_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import stockade.decision.grants as grants

    monkeypatch.setattr(grants, "crypto_sign", lambda payload, sk: b"\0" * 64 + payload)
    with pytest.raises(GrantInvalid, match="probe signature"):
        GrantSigner(Ed25519PrivateKey.generate())
