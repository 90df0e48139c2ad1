"""Grant verification on Execute (DEC-12, DEC-12 rev 2): the executor's side of the format
in ``stockade.contract.grant``.

The executor holds only the decision service's public key. A grant must verify, be
unexpired, unused, issued for exactly this session, call, tool and arguments, and it must
bind the executor's own findings: its ``insp`` digest equals the digest of the findings the
executor computes now (or is "" when the decision had none and treated them as unknown),
and its settlement covers every ASK the executor finds. Whoever reaches Decide and Execute
directly therefore cannot run a call the executor would ask about without an approval, an
allow rule or a mode the decision service recorded.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from stockade.contract.grant import (
    Claims,
    Finding,
    GrantInvalid,
    argument_digest,
    findings_digest,
    key_id,
    parse_claims,
    public_key_from_pem,
    settlement_covers,
)
from stockade.errors import (
    DependencyUnavailable,
    GrantAskUnsettled,
    GrantExpired,
    GrantFindingsMismatch,
    GrantMismatch,
    GrantMissing,
    GrantReplayed,
    InvalidArgument,
)
from stockade.executor.confine.policy import Layer
from stockade.executor.core import CallSpec, GrantCheck
from stockade.executor.inspect import Inspection
from stockade.executor.settings import ExecutorSettings
from stockade.executor.state import ExecutorState, MemoryExecutorState

__all__ = [
    "MAX_KEY_FILE",
    "GrantKeyFiles",
    "GrantVerifier",
    "StoreGrantCheck",
    "grant_check_from_settings",
    "grant_layer",
    "inspection_findings",
    "refuse_all",
]


def inspection_findings(inspection: Inspection) -> tuple[str, tuple[Finding, ...]]:
    """The digest of the executor's findings (the grant's ``insp``) and its tool rules."""
    rules = tuple(Finding(r.effect, r.bypass_immune, r.reason) for r in inspection.rules)
    analysis = inspection.analysis
    subs = [c.text for c in analysis.commands] if analysis is not None else []
    digest = findings_digest(
        rules,
        read_only=inspection.read_only,
        inside_working_dir=inspection.inside_working_dir,
        sub_commands=subs,
    )
    return digest, rules


#: A grant's claims are about a kilobyte; anything much larger is refused before parsing.
MAX_GRANT_PAYLOAD = 64 * 1024


def _claimed_kid(grant_payload: bytes) -> str | None:
    """The ``kid`` the (not yet verified) payload names, only to pick the key to verify
    with; None when the payload is not a JSON object with a string ``kid``."""
    try:
        raw = json.loads(grant_payload)
    except (ValueError, UnicodeDecodeError):
        return None
    kid = raw.get("kid") if isinstance(raw, dict) else None
    return kid if isinstance(kid, str) else None


class GrantVerifier:
    """Verifies grants with public keys only.

    ``public_keys`` may hold several keys during a rotation: a grant is verified by the
    key its ``kid`` names, and refused when that key is not (or no longer) listed. The
    single-use rule is enforced by :meth:`verify` in this process (a replay cache), or
    by the caller through a shared store after :meth:`check` (the executor service does,
    so a grant is spent once across replicas and restarts, STORE-3).
    """

    def __init__(
        self,
        public_keys: Ed25519PublicKey | Sequence[Ed25519PublicKey],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        keys = [public_keys] if isinstance(public_keys, Ed25519PublicKey) else list(public_keys)
        self._clock = clock
        self._keys: dict[str, Ed25519PublicKey] = {}
        self.key_ids: tuple[str, ...] = ()
        """The ids of the accepted keys, in the order given."""
        self.key_id = ""
        """The first accepted key's id."""
        self.set_keys(keys)
        self._used: dict[str, float] = {}
        self._expiries: list[tuple[float, str]] = []
        """The used nonces by expiry (a heap), so forgetting expired ones costs O(log n)."""
        self._lock = threading.Lock()

    def set_keys(self, public_keys: Sequence[Ed25519PublicKey]) -> None:
        """Accept exactly ``public_keys`` from now on (a reload after a rotation): a grant
        signed by a key no longer listed is refused from the next check on."""
        if not public_keys:
            raise ValueError("a grant verifier needs at least one public key")
        keys = {key_id(key): key for key in public_keys}
        # One assignment: a check running in another thread sees the old set or the new.
        self._keys = keys
        self.key_ids = tuple(keys)
        self.key_id = self.key_ids[0]

    def check(
        self,
        grant_payload: bytes,
        signature: bytes,
        *,
        session_id: str,
        call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        inspection: Inspection | None = None,
    ) -> Claims:
        """Return the claims if the grant allows exactly this call now, not counting
        whether it was used before; raise a ``GrantError`` if not.

        Checks run signature first (a forged payload says nothing), then expiry, then the
        binding, then (given the executor's ``inspection``) the findings and their
        settlement. A tool-level DENY in ``inspection`` is left to the caller (it refuses
        the call as a result).
        """
        if not grant_payload or not signature:
            raise GrantMissing("the call carries no grant from the decision service")
        key = self._key_for(grant_payload)
        try:
            key.verify(signature, grant_payload)
        except InvalidSignature as exc:
            raise GrantInvalid("grant signature does not verify (forged or tampered)") from exc
        claims = parse_claims(grant_payload)
        now = self._clock()
        if now >= claims.exp:
            raise GrantExpired(f"grant expired {now - claims.exp:.1f}s ago", call_id=call_id)
        for name, want, got in (
            ("session", session_id, claims.session_id),
            ("call", call_id, claims.call_id),
            ("tool", tool_name, claims.tool_name),
            ("arguments", argument_digest(arguments), claims.args_digest),
        ):
            if want != got:
                raise GrantMismatch(f"grant was issued for another {name}", field=name)
        if inspection is not None and not inspection.denied:
            self._check_findings(claims, inspection)
        return claims

    def _key_for(self, grant_payload: bytes) -> Ed25519PublicKey:
        """The accepted key the payload's ``kid`` names; a grant signed by a key that is
        not (or no longer) listed is refused here, before any other check."""
        if len(grant_payload) > MAX_GRANT_PAYLOAD:
            raise GrantInvalid(f"grant payload is larger than {MAX_GRANT_PAYLOAD} bytes")
        kid = _claimed_kid(grant_payload)
        key = self._keys.get(kid) if kid is not None else None
        if key is None:
            raise GrantInvalid(
                "grant was signed by a key this executor does not accept (not among its "
                "grant public keys: forged, or a key retired after a rotation)"
            )
        return key

    def verify(
        self,
        grant_payload: bytes,
        signature: bytes,
        *,
        session_id: str,
        call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        inspection: Inspection | None = None,
    ) -> Claims:
        """:meth:`check`, then spend the grant in this process's replay cache (raises
        ``GrantReplayed`` the second time). Only a grant that passes every check is spent."""
        claims = self.check(
            grant_payload,
            signature,
            session_id=session_id,
            call_id=call_id,
            tool_name=tool_name,
            arguments=arguments,
            inspection=inspection,
        )
        now = self._clock()
        with self._lock:
            self._purge(now)
            if claims.nonce in self._used:
                raise GrantReplayed("grant was already used", call_id=call_id)
            self._used[claims.nonce] = claims.exp
            heapq.heappush(self._expiries, (claims.exp, claims.nonce))
        return claims

    @staticmethod
    def _check_findings(claims: Claims, inspection: Inspection) -> None:
        digest, rules = inspection_findings(inspection)
        if claims.findings and claims.findings != digest:
            raise GrantFindingsMismatch(
                "the grant was issued for other executor findings than this executor's own "
                "for these arguments (forged or stale inspection)",
                call_id=claims.call_id,
            )
        why = settlement_covers(claims.settle, rules)
        if why is not None:
            raise GrantAskUnsettled(why, call_id=claims.call_id)

    def _purge(self, now: float) -> None:
        # An expired grant is refused for its expiry, so its nonce need not be kept.
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            del self._used[heapq.heappop(expiries)[1]]

    def remembered(self) -> int:
        """How many used grants the replay cache holds (those not yet expired)."""
        return len(self._used)


#: A PEM Ed25519 public key is about 113 bytes; a larger key file is refused unread.
MAX_KEY_FILE = 64 * 1024


def _read_key_file(path: Path) -> bytes:
    """The bytes of key file ``path`` (symlinks followed, as a Kubernetes Secret volume
    needs); ``InvalidArgument`` naming the file when it cannot be read or is too large."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > MAX_KEY_FILE:
                raise InvalidArgument(f"{path}: larger than {MAX_KEY_FILE} bytes")
            return f.read(MAX_KEY_FILE + 1)
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path}: {exc.strerror or exc}") from exc


class GrantKeyFiles:
    """The grant public keys in the configured files, one key per file, re-read on demand
    (:meth:`reload`) so a rotation needs no restart.

    A file whose content changed to another valid Ed25519 public key gives that key, and
    the key it held before is dropped at once (never accepted again). A file that cannot
    be read, or whose new content is no valid key (empty, half-written, another kind of
    key, gone), keeps the key it last held: the executor keeps verifying with known keys
    and says what is wrong (:attr:`problems`) instead of accepting anything new or
    refusing everything.
    """

    def __init__(self, paths: Sequence[Path]) -> None:
        """Read every file; ``InvalidArgument`` naming the first that holds no valid key
        (at start a bad file stops the executor, as before)."""
        if not paths:
            raise ValueError("no grant public key files")
        self.paths = tuple(paths)
        self._held: dict[Path, tuple[bytes, Ed25519PublicKey]] = {}
        for path in self.paths:
            data = _read_key_file(path)
            self._held[path] = (data, public_key_from_pem(data, str(path)))
        self.problems: dict[Path, str] = {}
        """Files whose current content could not be used, and why (their last good key is
        still in force)."""

    def keys(self) -> list[Ed25519PublicKey]:
        """The key each file holds (its last good one), in the configured order."""
        return [key for _, key in self._held.values()]

    def reload(self) -> bool:
        """Re-read every file (blocking: call it from a worker thread); True when a file
        now holds another key. Updates :attr:`problems`."""
        changed = False
        problems: dict[Path, str] = {}
        for path in self.paths:
            try:
                data = _read_key_file(path)
                if data == self._held[path][0]:
                    continue
                key = public_key_from_pem(data, str(path))
            except InvalidArgument as exc:
                problems[path] = exc.message
                continue
            self._held[path] = (data, key)
            changed = True
        self.problems = problems
        return changed


async def refuse_all(
    call: CallSpec, payload: bytes, signature: bytes, inspection: Inspection
) -> None:
    """The grant check of an executor without a grant public key: every call refused."""
    raise GrantMissing(
        "this executor has no grant public key (STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE), "
        "so it cannot verify grants and refuses every call"
    )


class StoreGrantCheck:
    """The grant check of Execute: every check of the grant itself, then spending it in
    the executor state shared by the replicas (single use across replicas and restarts,
    STORE-3). A store that cannot answer refuses the call (UNAVAILABLE), never runs it."""

    def __init__(
        self,
        verifier: GrantVerifier,
        state: ExecutorState,
        key_files: GrantKeyFiles | None = None,
    ) -> None:
        """Check with ``verifier``, spend in ``state``; ``key_files`` are where the
        verifier's keys come from (for :meth:`reload_keys`)."""
        self.verifier = verifier
        self.state = state
        self.key_files = key_files

    async def reload_keys(self) -> tuple[set[str], set[str]]:
        """Re-read the key files and put their keys in force: (ids added, ids removed)."""
        if self.key_files is None:
            return set(), set()
        files = self.key_files
        if not await asyncio.to_thread(files.reload):
            return set(), set()
        before = set(self.verifier.key_ids)
        self.verifier.set_keys(files.keys())
        after = set(self.verifier.key_ids)
        return after - before, before - after

    async def __call__(
        self, call: CallSpec, payload: bytes, signature: bytes, inspection: Inspection
    ) -> None:
        """Raise unless the grant allows ``call`` now and was never spent."""
        claims = self.verifier.check(
            payload,
            signature,
            session_id=call.session_id,
            call_id=call.call_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            inspection=inspection,
        )
        try:
            fresh = await self.state.spend_grant(claims.nonce, claims.exp)
        except DependencyUnavailable as exc:
            raise DependencyUnavailable(
                f"grant refused: the record of spent grants cannot be reached ({exc.message})"
            ) from exc
        if not fresh:
            raise GrantReplayed("grant was already used", call_id=call.call_id)


def grant_check_from_settings(
    settings: ExecutorSettings, state: ExecutorState | None = None
) -> GrantCheck | None:
    """A grant verifier from the configured grant public key(s), spending grants in
    ``state`` (this process's memory when None). Without a key every Execute is refused
    (fail closed), unless ``allow_ungranted`` says this is a development setup, where None
    (no verification) is returned."""
    files = settings.grant_key_files()
    if not files:
        return None if settings.allow_ungranted else refuse_all
    # The grant format comes from the neutral contract package (never the decision
    # service's internals): one implementation of the format on both sides.
    key_files = GrantKeyFiles(files)
    verifier = GrantVerifier(key_files.keys())
    return StoreGrantCheck(
        verifier, state if state is not None else MemoryExecutorState(), key_files
    )


def grant_layer(check: GrantCheck | None) -> Layer:
    """How ``check`` verifies grants, as a confinement layer (EXE-9: never pretend)."""
    if check is None:
        return Layer(
            "grant_verification",
            False,
            "allow_ungranted with no grant_public_key_file: Execute runs calls "
            "without a grant (development only)",
        )
    if check is refuse_all:
        return Layer(
            "grant_verification",
            True,
            "no grant_public_key_file configured: every Execute is refused",
        )
    if isinstance(check, StoreGrantCheck):
        detail = (
            f"Ed25519 grants required on Execute ({len(check.verifier.key_ids)} "
            f"accepted key(s): {', '.join(check.verifier.key_ids)}); spent grants recorded "
            f"in {check.state.description}"
        )
        problems = check.key_files.problems if check.key_files is not None else {}
        if problems:
            detail += "; KEY FILE PROBLEM, each keeps its last good key: " + "; ".join(
                problems.values()
            )
        return Layer("grant_verification", True, detail)
    return Layer("grant_verification", True, "Ed25519 grants required on Execute")
