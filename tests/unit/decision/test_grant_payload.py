"""The hand-written grant payload and flat argument JSON must equal the json module's bytes.

The executor recomputes the argument digest from the call it receives, so any byte of
difference between the fast and the general encoding would refuse good grants, or worse
let two different argument sets share a digest.
"""

from __future__ import annotations

import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.decision.grants import (
    GrantSigner,
    GrantVerifier,
    _claims_payload,
    _dumps,
    argument_digest,
    canonical_json,
)

# Any text protobuf can carry: every code point except lone surrogates.
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(sid=texts, cid=texts, tool=texts, nonce=texts, exp=st.floats(0, 4e9))
def test_claims_payload_equals_json_dumps(
    sid: str, cid: str, tool: str, nonce: str, exp: float
) -> None:
    exp = int(exp * 1000) / 1000
    claims = {
        "v": 1, "sid": sid, "cid": cid, "tool": tool, "args": "d" * 64, "exp": exp,
        "nonce": nonce, "kid": "k1",
    }  # fmt: skip
    want = json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert _claims_payload(sid, cid, tool, "d" * 64, exp, nonce, "k1") == want.encode()


@settings(max_examples=300, deadline=None)
@given(args=st.dictionaries(texts, st.one_of(texts, st.booleans()), max_size=6))
def test_flat_arguments_encode_like_json_dumps(args: dict[str, str | bool]) -> None:
    want = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(args) == want.encode() == _dumps(args)


def test_quotes_and_control_characters_cannot_merge_two_argument_sets() -> None:
    a = {"command": 'ls", "x": "y'}
    b = {"command": "ls", "x": "y"}
    assert argument_digest(a) != argument_digest(b)
    assert argument_digest({"a": "1\n"}) != argument_digest({"a": "1"})
    assert argument_digest({"flag": True}) != argument_digest({"flag": "true"})


def test_numbers_and_nesting_still_take_the_general_path() -> None:
    assert canonical_json({"n": 1.0, "m": {"k": [2.0, "x"]}}) == b'{"m":{"k":[2,"x"]},"n":1}'


def test_signed_payload_verifies_and_binds_unusual_text() -> None:
    key = Ed25519PrivateKey.generate()
    signer, verifier = GrantSigner(key), GrantVerifier(key.public_key())
    call = {"session_id": 's"1', "call_id": "c\u2028", "tool_name": "t\\", "arguments": {"p": "é"}}
    g = signer.sign(**call)  # type: ignore[arg-type]
    claims = json.loads(g.payload)
    assert (claims["sid"], claims["cid"], claims["tool"]) == ('s"1', "c\u2028", "t\\")
    verifier.verify(g.payload, g.signature, **call)  # type: ignore[arg-type]
