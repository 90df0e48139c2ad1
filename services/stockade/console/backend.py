"""The console's calls to the decision and audit services, with its own credentials.

The console authenticates to the decision service as itself (its mTLS certificate, or an
admin token for local use) and names the person it acts for in the
``x-stockade-on-behalf-of`` metadata; the decision service records the resolver from
those authenticated facts, never from a name typed into a form. Every call has a deadline;
a failure becomes a ``BackendError`` with a message fit for a page (no stack, no secret).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from stockade.console.people import Person
from stockade.console.views import (
    MODES,
    AuditRowView,
    GrantView,
    RuleView,
    SessionView,
    VerifyView,
    audit_row_view,
    grant_view,
    rule_view,
    session_view,
    verify_view,
)
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

VERIFY_REUSE_S = 10.0
"""How long one hash-chain check is shown before the next page load checks again."""
ON_BEHALF_OF = "x-stockade-on-behalf-of"
"""Metadata naming the person a delegate (the console) acts for."""

RESOLUTIONS = {
    "allow_once": d_pb2.RESOLUTION_ALLOW_ONCE,
    "always_allow": d_pb2.RESOLUTION_ALWAYS_ALLOW,
    "deny": d_pb2.RESOLUTION_DENY,
}
EFFECTS = {
    "deny": c_pb2.RULE_EFFECT_DENY,
    "ask": c_pb2.RULE_EFFECT_ASK,
    "allow": c_pb2.RULE_EFFECT_ALLOW,
}
VERDICTS = {
    "allow": c_pb2.VERDICT_ALLOW,
    "ask": c_pb2.VERDICT_ASK,
    "deny": c_pb2.VERDICT_DENY,
}
STATUSES: dict[str, int] = {
    name.removeprefix("AUDIT_STATUS_").lower(): number
    for name, number in a_pb2.AuditStatus.items()
    if number != a_pb2.AUDIT_STATUS_UNSPECIFIED
}
"""Audit outcomes the filter offers: every status the contract defines (ok, fail, denied,
cancelled, session_stop, and the decision records and unknown outcomes where defined)."""


class BackendError(Exception):
    """A call to a service failed; ``message`` is fit for a page, ``code`` is the gRPC code
    name (``FAILED_PRECONDITION`` when another resolver answered first ...)."""

    def __init__(self, message: str, code: str = "UNAVAILABLE") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _error(service: str, err: grpc.aio.AioRpcError) -> BackendError:
    code = err.code().name if err.code() is not None else "UNKNOWN"
    details = (err.details() or "").strip()
    if code == "UNAVAILABLE" or code == "DEADLINE_EXCEEDED":
        return BackendError(f"the {service} service cannot be reached right now ({code})", code)
    return BackendError(details or f"the {service} service answered {code}", code)


def _ts(moment: dt.datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(moment.astimezone(dt.UTC))
    return ts


@dataclass(frozen=True)
class Resolution:
    """What the person asked for in the approvals page."""

    approval_id: str
    action: str
    """allow_once, always_allow or deny."""
    remaining_uses: int = 0
    """For always_allow: 0 = unlimited."""
    until: dt.datetime | None = None
    """For always_allow: when the grant ends (None: with the session)."""
    note: str = ""


@dataclass(frozen=True)
class Resolved:
    """The service's answer to a resolution."""

    state: str
    resolver: str
    note: str
    grant: GrantView | None


@dataclass(frozen=True)
class AuditFilters:
    """The audit page's filters."""

    session_id: str = ""
    tool_name: str = ""
    status: str = ""
    agent_name: str = ""
    verdict: str = ""
    since: dt.datetime | None = None
    until: dt.datetime | None = None


@dataclass(frozen=True)
class AuditPage:
    """One page of audit rows, newest first."""

    rows: tuple[AuditRowView, ...]
    next_token: str


class Backend:
    """Typed calls to DecisionService and AuditService for the console's pages."""

    def __init__(
        self,
        decision: grpc.aio.Channel,
        audit: grpc.aio.Channel,
        *,
        admin_token: str = "",
        deadline_s: float = 10.0,
    ) -> None:
        self.decision: d_grpc.DecisionServiceAsyncStub = d_grpc.DecisionServiceStub(decision)
        self.audit: a_grpc.AuditServiceAsyncStub = a_grpc.AuditServiceStub(audit)
        self._auth: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {admin_token}"),) if admin_token else ()
        )
        self._deadline = deadline_s
        self._verified: tuple[float, VerifyView] | None = None

    @property
    def credentials(self) -> tuple[tuple[str, str], ...]:
        """The console's own admin metadata (empty under mTLS: the certificate is it)."""
        return self._auth

    def _as(self, person: Person) -> tuple[tuple[str, str], ...]:
        """Admin metadata naming the person the console acts for."""
        return (*self._auth, (ON_BEHALF_OF, person.name))

    async def _call(
        self, service: str, rpc: Any, request: Any, metadata: Sequence[tuple[str, str]] = ()
    ) -> Any:
        try:
            return await rpc(request, timeout=self._deadline, metadata=tuple(metadata))
        except grpc.aio.AioRpcError as err:
            raise _error(service, err) from None

    # -- approvals and grants ---------------------------------------------------------

    async def resolve(self, person: Person, r: Resolution) -> Resolved:
        """Answer an approval as ``person``. ``BackendError`` with FAILED_PRECONDITION when
        it was already answered (its message names who answered)."""
        req = d_pb2.ResolveApprovalRequest(
            approval_id=r.approval_id,
            resolution=RESOLUTIONS[r.action],
            # No resolver field: the decision service takes the resolver from the
            # authenticated caller (the console, a configured delegate) and the person it
            # names in x-stockade-on-behalf-of (``_as``).
            reason=r.note,
        )
        if r.action == "always_allow":
            req.scope.remaining_uses = r.remaining_uses
            if r.until is not None:
                req.scope.expire_time.CopyFrom(_ts(r.until))
        resp = await self._call("decision", self.decision.ResolveApproval, req, self._as(person))
        state = d_pb2.ApprovalState.Name(resp.approval.state).removeprefix("APPROVAL_STATE_")
        grant = grant_view(resp.session_grant) if resp.HasField("session_grant") else None
        return Resolved(state.lower(), resp.approval.resolver, resp.note, grant)

    async def grants(self, session_id: str) -> list[GrantView]:
        """A session's live "always allow" grants."""
        resp = await self._call(
            "decision", self.decision.ListGrants, d_pb2.ListGrantsRequest(session_id=session_id)
        )
        return [grant_view(g) for g in resp.grants]

    async def revoke_grant(self, person: Person, grant_id: str) -> bool:
        """Revoke a grant as ``person``; False when it was already gone."""
        resp = await self._call(
            "decision",
            self.decision.RevokeGrant,
            d_pb2.RevokeGrantRequest(grant_id=grant_id),
            self._as(person),
        )
        return bool(resp.revoked)

    # -- sessions -----------------------------------------------------------------------

    async def session(self, session_id: str) -> SessionView:
        """One session (``BackendError`` NOT_FOUND when unknown)."""
        resp = await self._call(
            "decision", self.decision.GetSession, d_pb2.GetSessionRequest(session_id=session_id)
        )
        return session_view(resp.session)

    async def rules(self, session_id: str) -> list[RuleView]:
        """The session's own rules (policy rules are not changed here)."""
        resp = await self._call(
            "decision",
            self.decision.ListRules,
            d_pb2.ListRulesRequest(session_id=session_id, include_policy=False),
        )
        return [rule_view(r) for r in resp.rules]

    async def set_mode(self, person: Person, session_id: str, mode: str) -> SessionView:
        """Change a session's mode as ``person`` (an admin)."""
        resp = await self._call(
            "decision",
            self.decision.SetMode,
            d_pb2.SetModeRequest(session_id=session_id, mode=MODES[mode]),  # type: ignore[arg-type]
            self._as(person),
        )
        return session_view(resp.session)

    async def add_rule(
        self, person: Person, session_id: str, effect: str, pattern: str, reason: str
    ) -> RuleView:
        """Add a session rule as ``person`` (an admin)."""
        resp = await self._call(
            "decision",
            self.decision.AddRule,
            d_pb2.AddRuleRequest(
                session_id=session_id,
                rule=c_pb2.Rule(effect=EFFECTS[effect], pattern=pattern, reason=reason),
            ),
            self._as(person),
        )
        return rule_view(resp.rule)

    async def remove_rule(self, person: Person, session_id: str, rule_id: str) -> bool:
        """Remove a session rule as ``person`` (an admin)."""
        resp = await self._call(
            "decision",
            self.decision.RemoveRule,
            d_pb2.RemoveRuleRequest(session_id=session_id, rule_id=rule_id),
            self._as(person),
        )
        return bool(resp.removed)

    # -- audit ----------------------------------------------------------------------------

    async def audit_page(self, f: AuditFilters, page_size: int, token: str = "") -> AuditPage:
        """One page of the trail, newest first."""
        req = a_pb2.QueryRequest(
            session_id=f.session_id,
            tool_name=f.tool_name,
            status=STATUSES.get(f.status, a_pb2.AUDIT_STATUS_UNSPECIFIED),  # type: ignore[arg-type]
            agent_name=f.agent_name,
            verdict=VERDICTS.get(f.verdict, c_pb2.VERDICT_UNSPECIFIED),
            page_size=page_size,
            page_token=token,
        )
        if f.since is not None:
            req.start_time.CopyFrom(_ts(f.since))
        if f.until is not None:
            req.end_time.CopyFrom(_ts(f.until))
        resp = await self._call("audit", self.audit.Query, req)
        return AuditPage(tuple(audit_row_view(r) for r in resp.records), resp.next_page_token)

    async def verify(self) -> VerifyView:
        """The hash chain's state; an unreachable service is reported, not raised.

        VerifyLog reads the whole log, so one answer serves every audit page shown within
        ``VERIFY_REUSE_S`` (people paging through the trail do not each re-read it)."""
        now = time.monotonic()
        if self._verified is not None and now - self._verified[0] < VERIFY_REUSE_S:
            return self._verified[1]
        try:
            resp = await self.audit.VerifyLog(a_pb2.VerifyLogRequest(), timeout=self._deadline)
        except grpc.aio.AioRpcError as err:
            return VerifyView(False, 0, 0, "", 0, "", error=_error("audit", err).message)
        view = verify_view(resp)
        self._verified = (now, view)
        return view

    async def recent_sessions(self, limit: int = 200) -> list[str]:
        """Session ids seen in the newest audit rows, newest first (the decision service
        has no session listing; the trail is where sessions show up)."""
        resp = await self._call("audit", self.audit.Query, a_pb2.QueryRequest(page_size=limit))
        seen: dict[str, None] = {}
        for r in resp.records:
            if r.event.session_id:
                seen.setdefault(r.event.session_id, None)
        return list(seen)
