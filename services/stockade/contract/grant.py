"""The grant format, in one place (DEC-12, DEC-12 rev 2).

The decision service signs and the executor verifies the same bytes; both build and read
them here, so the two sides cannot drift. A grant's payload is canonical JSON claims:

=========  ==============================================================================
``v``      format version, 2
``sid``    session id
``cid``    call id
``tool``   tool name
``args``   SHA-256 hex of the canonical JSON arguments
``insp``   SHA-256 hex of the canonical findings the decision relied on (``findings_json``);
           "" when the decision had no inspection (it then treated the findings as unknown,
           that is ASK, and something below settled it)
``settle`` how a tool-level ASK was settled: ``{"by": "none"}``, ``{"by": "rule", "rule":
           PATTERN, "source": SOURCE}``, ``{"by": "mode", "mode": NAME}``, ``{"by":
           "approval", "approval": ID, "resolver": IDENTITY}`` or ``{"by": "classifier",
           "model": NAME, "reason": TEXT}``
``exp``    expiry (Unix seconds, millisecond precision)
``nonce``  random, one use
``kid``    signing key id
=========  ==============================================================================

On Execute the executor recomputes its own findings from the arguments and accepts a grant
only if ``insp`` equals their digest (or is "") and ``settle`` covers its own ASKs
(``settlement_covers``): a bypass-immune ASK only by an approval, any other ASK by a rule,
a mode, an approval or a classifier.

Arguments travel as ``google.protobuf.Struct``, which turns every number into a float;
the digest therefore writes integral floats as integers so ``{"n": 1}`` and
``{"n": 1.0}`` hash the same on both sides. No gRPC, no service imports.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from stockade.errors import GrantError, InvalidArgument

__all__ = [
    "CLAIMS_VERSION",
    "SETTLED_BY",
    "Claims",
    "Finding",
    "GrantInvalid",
    "argument_digest",
    "canonical_json",
    "claims_payload",
    "findings_digest",
    "findings_json",
    "key_id",
    "load_private_key",
    "load_public_key",
    "parse_claims",
    "public_key_from_pem",
    "settlement_covers",
]

CLAIMS_VERSION = 2
SETTLED_BY = frozenset({"none", "rule", "mode", "approval", "classifier"})
"""The ways a tool-level ASK can be settled (``settle.by``)."""
_SETTLE_KEYS = {
    "none": (),
    "rule": ("rule", "source"),
    "mode": ("mode",),
    "approval": ("approval", "resolver"),
    "classifier": ("model", "reason"),
}


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
    if isinstance(value, dict):
        flat = _flat_text(value)
        if flat is not None:
            return flat.encode()
        if _flat_strings(value):
            return _dumps(value)
    return _dumps(_canonical_value(value))


def _flat_text(value: Mapping[Any, Any]) -> str | None:
    """``_dumps`` of ``value`` (as text) without the encoder's set-up, when every key is a
    str and every value a str or bool (a call's usual arguments, every settlement); None
    otherwise.

    One pass; sorted keys, ``,``/``:`` separators, the encoder's own string escaping. A
    test checks that the bytes equal ``_dumps``.
    """
    enc = _encode_str
    items = []
    for k, v in value.items():
        if not isinstance(k, str):
            return None
        if v is True:
            text = "true"
        elif v is False:
            text = "false"
        elif isinstance(v, str):
            text = enc(v)
        else:
            return None
        items.append((k, text))
    items.sort()  # by key: keys are distinct, so the texts are never compared
    return "{" + ",".join([f"{enc(k)}:{text}" for k, text in items]) + "}"


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""One encoder for every payload (``json.dumps`` with options builds a new one per call)."""

_encode_str: Callable[[str], str] = json.encoder.encode_basestring
"""JSON string literal of a str, as ``_ENCODER`` writes it (ensure_ascii=False)."""


def _dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode("utf-8")


def argument_digest(arguments: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a call's arguments."""
    value = arguments if type(arguments) is dict else dict(arguments)
    return hashlib.sha256(canonical_json(value)).hexdigest()


@dataclass(frozen=True)
class Finding:
    """One tool-level rule of the executor's findings, as the digest sees it."""

    effect: str
    """"deny" or "ask"."""
    bypass_immune: bool
    reason: str


def findings_json(
    rules: Sequence[Finding],
    *,
    read_only: bool,
    inside_working_dir: bool,
    sub_commands: Sequence[str],
) -> bytes:
    """The canonical JSON of the executor findings a decision relies on.

    Exactly what changes a verdict: the tool rules (effect, bypass-immune flag, reason),
    read-only (plan mode), inside-working-dir (acceptEdits) and the sub-command texts the
    rules were matched against. Explanations and risk levels are left out (they only
    describe).

    Written directly (keys in sorted order, strings through the encoder's own escaping):
    every Decide of an executor tool and every Execute pays for it, and the encoder costs
    ten times as much. A test checks that the bytes equal ``_dumps`` of the same object
    (``_findings_object``).
    """
    enc = _encode_str
    listed = (
        ",".join(
            f'{{"bypass_immune":{"true" if r.bypass_immune else "false"},'
            f'"effect":{enc(r.effect)},"reason":{enc(r.reason)}}}'
            for r in rules
        )
        if rules
        else ""
    )
    subs = ",".join(map(enc, sub_commands)) if sub_commands else ""
    return (
        f'{{"inside_working_dir":{"true" if inside_working_dir else "false"},'
        f'"read_only":{"true" if read_only else "false"},'
        f'"rules":[{listed}],"sub_commands":[{subs}]}}'
    ).encode()


def _findings_object(
    rules: Sequence[Finding],
    *,
    read_only: bool,
    inside_working_dir: bool,
    sub_commands: Sequence[str],
) -> dict[str, Any]:
    """The object ``findings_json`` writes (the reference its test encodes with ``_dumps``)."""
    return {
        "inside_working_dir": bool(inside_working_dir),
        "read_only": bool(read_only),
        "rules": [
            {"bypass_immune": bool(r.bypass_immune), "effect": r.effect, "reason": r.reason}
            for r in rules
        ],
        "sub_commands": list(sub_commands),
    }


def findings_digest(
    rules: Sequence[Finding],
    *,
    read_only: bool,
    inside_working_dir: bool,
    sub_commands: Sequence[str],
) -> str:
    """SHA-256 hex of ``findings_json``: the grant's ``insp`` claim."""
    if not rules and not sub_commands:
        # Most calls (reads, edits, searches) carry neither tool rules nor sub-commands:
        # their digest is one of four constants, looked up instead of hashed anew.
        return _BARE_FINDINGS[bool(read_only), bool(inside_working_dir)]
    return _digest_of_findings(rules, read_only, inside_working_dir, sub_commands)


def _digest_of_findings(
    rules: Sequence[Finding], read_only: bool, inside_working_dir: bool, sub_commands: Sequence[str]
) -> str:
    return hashlib.sha256(
        findings_json(
            rules,
            read_only=read_only,
            inside_working_dir=inside_working_dir,
            sub_commands=sub_commands,
        )
    ).hexdigest()


_BARE_FINDINGS: dict[tuple[bool, bool], str] = {
    (ro, inside): _digest_of_findings((), ro, inside, ())
    for ro in (False, True)
    for inside in (False, True)
}
"""The digests of findings without tool rules or sub-commands, by (read-only, inside the
working directory); a test checks each against the hash of ``findings_json``."""


def _check_settle(settle: Mapping[str, Any]) -> dict[str, str]:
    by = settle.get("by")
    if by not in _SETTLE_KEYS:
        raise GrantInvalid(f"grant settlement {by!r} is not one of {sorted(SETTLED_BY)}")
    out = {"by": str(by)}
    for key in _SETTLE_KEYS[by]:
        value = settle.get(key, "")
        if not isinstance(value, str):
            raise GrantInvalid(f"grant settlement field {key!r} must be a string")
        out[key] = value
    if by == "approval" and not (out["approval"] and out["resolver"]):
        raise GrantInvalid("an approval settlement names the approval and its resolver")
    return out


def claims_payload(
    *,
    session_id: str,
    call_id: str,
    tool_name: str,
    args_digest: str,
    findings: str,
    settle: Mapping[str, str],
    exp: float,
    nonce: str,
    kid: str,
) -> bytes:
    """The signed bytes: canonical JSON of the claims (sorted keys, no spaces).

    Written directly (keys in sorted order, strings through the encoder's own escaping,
    the float through ``repr`` as ``json`` does): the same bytes as ``_dumps`` of the
    claims dict, which a test checks.
    """
    enc = _encode_str
    checked = _check_settle(settle)  # str keys and values: _flat_text writes them
    return (
        f'{{"args":{enc(args_digest)},"cid":{enc(call_id)},"exp":{exp!r},'
        f'"insp":{enc(findings)},"kid":{enc(kid)},"nonce":{enc(nonce)},'
        f'"settle":{_flat_text(checked) or _dumps(checked).decode()},"sid":{enc(session_id)},'
        f'"tool":{enc(tool_name)},"v":{CLAIMS_VERSION}}}'
    ).encode()


@dataclass(frozen=True)
class Claims:
    """A grant's claims, parsed (the signature is checked before parsing)."""

    session_id: str
    call_id: str
    tool_name: str
    args_digest: str
    findings: str
    settle: Mapping[str, str]
    exp: float
    nonce: str
    kid: str


def parse_claims(payload: bytes) -> Claims:
    """Parse a verified payload; ``GrantInvalid`` for anything but a v2 claims object."""
    try:
        raw = json.loads(payload)
        if not isinstance(raw, dict) or raw.get("v") != CLAIMS_VERSION:
            raise GrantInvalid(f"grant format is not version {CLAIMS_VERSION}")
        strings = [raw[k] for k in ("sid", "cid", "tool", "args", "insp", "nonce", "kid")]
        if not all(isinstance(v, str) for v in strings):
            raise GrantInvalid("grant claims must be strings")
        settle = raw["settle"]
        if not isinstance(settle, dict):
            raise GrantInvalid("grant settlement must be an object")
        return Claims(
            session_id=raw["sid"],
            call_id=raw["cid"],
            tool_name=raw["tool"],
            args_digest=raw["args"],
            findings=raw["insp"],
            settle=_check_settle(settle),
            exp=float(raw["exp"]),
            nonce=raw["nonce"],
            kid=raw["kid"],
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise GrantInvalid("grant payload is malformed") from exc


def settlement_covers(settle: Mapping[str, str], asks: Sequence[Finding]) -> str | None:
    """None if ``settle`` covers every ASK in ``asks``; else why not.

    A bypass-immune ASK is settled only by a person (an approval); any other ASK by an
    allow rule, a mode, an approval or a classifier. ``none`` settles nothing.
    """
    by = settle.get("by", "none")
    for ask in asks:
        if ask.effect != "ask":
            continue
        if ask.bypass_immune and by != "approval":
            return f"a bypass-immune ask ({ask.reason}) needs an approval, the grant says {by!r}"
        if by == "none":
            return f"the executor asks ({ask.reason}) and the grant settles no ask"
    return None


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short id of a public key, so a rotated key can be told apart."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


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
    return public_key_from_pem(_read(path), str(path))


def public_key_from_pem(data: bytes, source: str) -> Ed25519PublicKey:
    """The Ed25519 public key in ``data`` (PEM, SubjectPublicKeyInfo) read from ``source``;
    ``InvalidArgument`` naming ``source`` when it holds none (empty, truncated, another
    kind of key)."""
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise InvalidArgument(f"{source}: not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidArgument(f"{source}: not an Ed25519 public key")
    return key


def _read(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read key file {path}: {exc.strerror}") from exc
