"""The hand-written grant payload and flat argument JSON must equal the json module's bytes.

The executor recomputes the argument digest from the call it receives, so any byte of
difference between the fast and the general encoding would refuse good grants, or worse
let two different argument sets share a digest.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.contract.grant import (
    Finding,
    _dumps,
    _findings_object,
    argument_digest,
    canonical_json,
    claims_payload,
    findings_digest,
    findings_json,
)
from stockade.decision.grants import GrantSigner
from stockade.executor.grants import GrantVerifier

# Any text protobuf can carry: every code point except lone surrogates.
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40)


settles = st.one_of(
    st.just({"by": "none"}),
    st.builds(lambda r, s: {"by": "rule", "rule": r, "source": s}, texts, texts),
    st.builds(lambda m: {"by": "mode", "mode": m}, texts),
    st.builds(
        lambda a, r: {"by": "approval", "approval": "a" + a, "resolver": "r" + r}, texts, texts
    ),
    st.builds(lambda m, r: {"by": "classifier", "model": m, "reason": r}, texts, texts),
)


@settings(max_examples=300, deadline=None)
@given(
    sid=texts, cid=texts, tool=texts, nonce=texts, insp=texts, settle=settles,
    exp=st.floats(0, 4e9),
)  # fmt: skip
def test_claims_payload_equals_json_dumps(
    sid: str, cid: str, tool: str, nonce: str, insp: str, settle: dict[str, str], exp: float
) -> None:
    exp = int(exp * 1000) / 1000
    claims = {
        "v": 2, "sid": sid, "cid": cid, "tool": tool, "args": "d" * 64, "exp": exp,
        "nonce": nonce, "kid": "k1", "insp": insp, "settle": settle,
    }  # fmt: skip
    want = json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    got = claims_payload(
        session_id=sid, call_id=cid, tool_name=tool, args_digest="d" * 64, findings=insp,
        settle=settle, exp=exp, nonce=nonce, kid="k1",
    )  # fmt: skip
    assert got == want.encode()


@settings(max_examples=300, deadline=None)
@given(args=st.dictionaries(texts, st.one_of(texts, st.booleans()), max_size=6))
def test_flat_arguments_encode_like_json_dumps(args: dict[str, str | bool]) -> None:
    want = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(args) == want.encode() == _dumps(args)


findings = st.lists(
    st.builds(Finding, st.sampled_from(["deny", "ask"]), st.booleans(), texts), max_size=4
)


@settings(max_examples=300, deadline=None)
@given(rules=findings, ro=st.booleans(), inside=st.booleans(), subs=st.lists(texts, max_size=4))
def test_findings_json_equals_the_encoder(
    rules: list[Finding], ro: bool, inside: bool, subs: list[str]
) -> None:
    # The executor recomputes this digest from its own inspection: one byte of difference
    # from the encoder's output refuses every good grant.
    kw = {"read_only": ro, "inside_working_dir": inside, "sub_commands": subs}
    want = json.dumps(
        _findings_object(rules, **kw), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert findings_json(rules, **kw) == want.encode() == _dumps(_findings_object(rules, **kw))


def test_findings_json_keeps_rules_and_commands_apart() -> None:
    base = {"read_only": False, "inside_working_dir": False}
    one = findings_json([Finding("ask", False, 'x","effect":"deny')], sub_commands=[], **base)
    two = findings_json([Finding("deny", False, "x")], sub_commands=[], **base)
    assert one != two
    assert json.loads(one)["rules"] == [
        {"bypass_immune": False, "effect": "ask", "reason": 'x","effect":"deny'}
    ]
    assert findings_json([], sub_commands=["a,b"], **base) != findings_json(
        [], sub_commands=["a", "b"], **base
    )


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


@pytest.mark.parametrize("ro", [False, True])
@pytest.mark.parametrize("inside", [False, True])
def test_bare_findings_digests_are_the_hash_of_their_json(ro: bool, inside: bool) -> None:
    kw = {"read_only": ro, "inside_working_dir": inside}
    want = hashlib.sha256(findings_json([], sub_commands=[], **kw)).hexdigest()
    assert findings_digest([], sub_commands=[], **kw) == want
    assert findings_digest((), sub_commands=(), **kw) == want
    # Any rule or sub-command takes the hashing path and changes the digest.
    assert findings_digest([], sub_commands=["ls"], **kw) != want
    assert findings_digest([Finding("ask", False, "")], sub_commands=[], **kw) != want
