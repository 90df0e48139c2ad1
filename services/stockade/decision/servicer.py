"""DecisionService: maps protobuf to ``DecisionCore`` and back (kept thin).

Admin RPCs (DeleteSession, AddRule, RemoveRule, SetMode, ResolveApproval, RevokeGrant)
need an authorised caller: ``authorization: Bearer <token>`` metadata matching one of
``admin_tokens``, or an mTLS client identity listed in ``admin_identities``. Decide and
the read-only RPCs do not.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2, timestamp_pb2

from stockade.decision.approvals import GrantScope, Resolution
from stockade.decision.core import CallInput, DecisionCore, Outcome, settlement
from stockade.decision.engine import HookSignal, SignalKind
from stockade.decision.explain import Risk
from stockade.decision.facts import facts_from_pb
from stockade.decision.grants import SignedGrant
from stockade.decision.lint import lint_rules
from stockade.decision.metrics import DecisionMetrics
from stockade.decision.modes import Mode
from stockade.decision.policy import compile_policy, parse_policy_text
from stockade.decision.records import DecisionSink, approval_record, decision_record
from stockade.decision.rules import Effect, Rule, Source
from stockade.decision.sessions import ApprovalRecord, ApprovalState, GrantRecord, SessionRecord
from stockade.errors import InvalidArgument, NotAuthorized, ResourceExhausted
from stockade.server.interceptors import peer_identity
from stockade.server.lifecycle import until_stopping
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

Context = grpc.aio.ServicerContext[Any, Any]

EFFECT_TO_PB = {
    Effect.DENY: c_pb2.RULE_EFFECT_DENY,
    Effect.ASK: c_pb2.RULE_EFFECT_ASK,
    Effect.ALLOW: c_pb2.RULE_EFFECT_ALLOW,
}
EFFECT_FROM_PB = {v: k for k, v in EFFECT_TO_PB.items()}
VERDICT_TO_PB = {
    Effect.DENY: c_pb2.VERDICT_DENY,
    Effect.ASK: c_pb2.VERDICT_ASK,
    Effect.ALLOW: c_pb2.VERDICT_ALLOW,
}
SOURCE_TO_PB = {
    Source.MANAGED: c_pb2.RULE_SOURCE_MANAGED,
    Source.ENV: c_pb2.RULE_SOURCE_ENV,
    Source.PROJECT: c_pb2.RULE_SOURCE_PROJECT,
    Source.SESSION: c_pb2.RULE_SOURCE_SESSION,
    Source.TOOL: c_pb2.RULE_SOURCE_TOOL,
    Source.HOOK: c_pb2.RULE_SOURCE_HOOK,
    Source.DEFAULT: c_pb2.RULE_SOURCE_DEFAULT,
    Source.MODE: c_pb2.RULE_SOURCE_MODE,
}
MODE_TO_PB = {
    Mode.DEFAULT: c_pb2.PERMISSION_MODE_DEFAULT,
    Mode.ACCEPT_EDITS: c_pb2.PERMISSION_MODE_ACCEPT_EDITS,
    Mode.BYPASS_PERMISSIONS: c_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS,
    Mode.DONT_ASK: c_pb2.PERMISSION_MODE_DONT_ASK,
    Mode.PLAN: c_pb2.PERMISSION_MODE_PLAN,
    Mode.AUTO: c_pb2.PERMISSION_MODE_AUTO,
}
MODE_FROM_PB = {v: k for k, v in MODE_TO_PB.items()}
RISK_TO_PB = {
    Risk.LOW: c_pb2.RISK_LEVEL_LOW,
    Risk.MEDIUM: c_pb2.RISK_LEVEL_MEDIUM,
    Risk.HIGH: c_pb2.RISK_LEVEL_HIGH,
}
RISK_FROM_PB = {v: k for k, v in RISK_TO_PB.items()}
STATE_TO_PB = {
    ApprovalState.PENDING: d_pb2.APPROVAL_STATE_PENDING,
    ApprovalState.ALLOWED: d_pb2.APPROVAL_STATE_ALLOWED,
    ApprovalState.DENIED: d_pb2.APPROVAL_STATE_DENIED,
    ApprovalState.EXPIRED: d_pb2.APPROVAL_STATE_EXPIRED,
}
RESOLUTION_FROM_PB = {
    d_pb2.RESOLUTION_ALLOW_ONCE: Resolution.ALLOW_ONCE,
    d_pb2.RESOLUTION_DENY: Resolution.DENY,
    d_pb2.RESOLUTION_ALWAYS_ALLOW: Resolution.ALWAYS_ALLOW,
}


def struct_to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """``json_format.MessageToDict`` of a Struct; flat string/bool arguments (the usual
    case) are read directly, anything else goes through ``json_format``."""
    out: dict[str, Any] = {}
    fields = struct.fields
    for key in fields:
        value = fields[key]
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            out[key] = value.string_value
        elif kind == "bool_value":
            out[key] = value.bool_value
        else:
            return json_format.MessageToDict(struct)
    return out


def _ts(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


_RULE_PB: dict[int, tuple[Rule, c_pb2.Rule]] = {}


def _rule_pb_cached(rule: Rule) -> c_pb2.Rule:
    """``rule_to_pb`` kept per rule object (policy rules and the default recur on every
    Decide).

    Keyed by identity, not by value (hashing a dataclass of enums costs more than the
    message): each entry holds its rule, so the id cannot be reused while cached, and the
    ``is`` check makes a stale entry impossible. The cached messages are never mutated
    (protobuf copies a message assigned to a field). Mode, tool and hook rules are made
    per call and not kept; the map is bounded.
    """
    hit = _RULE_PB.get(id(rule))
    if hit is not None and hit[0] is rule:
        return hit[1]
    msg = rule_to_pb(rule)
    if rule.source not in _PER_CALL_SOURCES:
        if len(_RULE_PB) >= 4096:
            _RULE_PB.clear()  # e.g. after many policy reloads: start over with live rules
        _RULE_PB[id(rule)] = (rule, msg)
    return msg


_PER_CALL_SOURCES = frozenset({Source.MODE, Source.TOOL, Source.HOOK})
"""Rules made afresh for one call; caching them would only crowd out the others."""


def rule_to_pb(rule: Rule) -> c_pb2.Rule:
    """A core rule as protobuf."""
    return c_pb2.Rule(
        effect=EFFECT_TO_PB[rule.effect],
        pattern=rule.pattern,
        source=SOURCE_TO_PB[rule.source],
        reason=rule.reason,
        rule_id=rule.rule_id,
        bypass_immune=rule.bypass_immune,
    )


def hooks_from_pb(signals: Sequence[d_pb2.HookSignal]) -> tuple[HookSignal, ...]:
    """Hook signals as engine signals (UNSPECIFIED ones are rejected)."""
    out = []
    for s in signals:
        if s.kind == d_pb2.HookSignal.KIND_BLOCK:
            out.append(HookSignal(SignalKind.BLOCK, s.hook_name or "hook", s.message))
        elif s.kind == d_pb2.HookSignal.KIND_PERMISSION_REQUIRED:
            out.append(HookSignal(SignalKind.PERMISSION_REQUIRED, s.hook_name or "hook", s.message))
        else:
            raise InvalidArgument(f"hook_signals: kind of {s.hook_name!r} is not set")
    return tuple(out)


def grant_to_pb(grant: SignedGrant | None) -> d_pb2.Grant | None:
    """A signed grant as protobuf."""
    if grant is None:
        return None
    return d_pb2.Grant(
        payload=grant.payload,
        signature=grant.signature,
        key_id=grant.key_id,
        expires_at=_ts(grant.expires_at),
    )


def _decide_response(outcome: Outcome) -> d_pb2.DecideResponse:
    """The whole DecideResponse in one constructor call (decision, grant, approval and
    halt), the hot path of every Decide."""
    d = outcome.decision
    g = outcome.grant
    expl = d.explanation
    return d_pb2.DecideResponse(
        verdict=VERDICT_TO_PB[d.verdict],
        reason=d.reason,
        winning_rule=_rule_pb_cached(d.winning_rule),
        conflicts=[d_pb2.Conflict(rule=_rule_pb_cached(c.rule), note=c.note) for c in d.conflicts]
        if d.conflicts
        else None,
        policy_version=d.policy_version,
        explanation=c_pb2.Explanation(risk=RISK_TO_PB[expl.risk], summary=expl.summary),
        mode=MODE_TO_PB[d.mode],
        grant=None
        if g is None
        else d_pb2.Grant(
            payload=g.payload, signature=g.signature, key_id=g.key_id, expires_at=_ts(g.expires_at)
        ),
        approval_id=outcome.approval_id,
        halt=outcome.halt,
        halt_reason=outcome.halt_reason,
        always_allow_applies=outcome.always_allow_applies,
    )


def session_to_pb(s: SessionRecord) -> d_pb2.Session:
    """A session as protobuf."""
    return d_pb2.Session(
        session_id=s.session_id,
        mode=MODE_TO_PB[s.mode],
        create_time=_ts(s.create_time),
        consecutive_denials=s.consecutive_denials,
        task=s.task,
        total_denials=s.total_denials,
    )


def approval_to_pb(a: ApprovalRecord) -> d_pb2.Approval:
    """An approval as protobuf."""
    args = struct_pb2.Struct()
    args.update(dict(a.call.arguments))
    return d_pb2.Approval(
        approval_id=a.approval_id,
        session_id=a.session_id,
        call=c_pb2.ToolCall(
            call_id=a.call.call_id,
            tool_name=a.call.tool_name,
            arguments=args,
            session_id=a.session_id,
            from_subagent=a.call.from_subagent,
            agent_name=a.call.agent_name,
        ),
        reason=a.reason,
        explanation=c_pb2.Explanation(
            risk=RISK_TO_PB.get(Risk(a.risk), c_pb2.RISK_LEVEL_MEDIUM), summary=a.summary
        ),
        state=STATE_TO_PB[a.state],
        create_time=_ts(a.create_time),
        expire_time=_ts(a.expire_time),
        resolver=a.resolver,
        always_allow_applies=a.always_allow_applies,
        rule=None if a.rule is None else rule_to_pb(a.rule),
    )


def grant_record_to_pb(g: GrantRecord) -> d_pb2.SessionGrant:
    """A session grant as protobuf."""
    msg = d_pb2.SessionGrant(
        grant_id=g.grant_id,
        session_id=g.session_id,
        rule=rule_to_pb(g.rule),
        remaining_uses=g.remaining_uses,
        create_time=_ts(g.create_time),
        resolver=g.resolver,
    )
    if g.expire_time is not None:
        msg.expire_time.CopyFrom(_ts(g.expire_time))
    return msg


def _mode(value: int) -> Mode:
    mode: Mode | None = MODE_FROM_PB.get(value)  # type: ignore[call-overload]
    if mode is None:
        raise InvalidArgument("mode must be set (DEFAULT, ACCEPT_EDITS, ...)")
    return mode


ON_BEHALF_OF = "x-stockade-on-behalf-of"
"""Metadata naming the person a trusted admin caller (the console) acts for."""

_TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]{0,63}")


def parse_admin_tokens(entries: Sequence[str]) -> list[tuple[str, bytes]]:
    """``name=token`` entries (the name is the caller's identity in approvals and audit),
    or a bare token, named ``token-N`` by its position (the old form keeps working).

    A bare token whose text contains ``=`` after a valid name would read as named; write
    such a token with an explicit name.
    """
    out: list[tuple[str, bytes]] = []
    for i, entry in enumerate(e for e in entries if e):
        name, sep, token = entry.partition("=")
        if sep and token and not token.startswith("=") and _TOKEN_NAME.fullmatch(name):
            out.append((name, token.encode()))
        else:
            out.append((f"token-{i + 1}", entry.encode()))
    return out


class AdminAuth:
    """Decides whether a caller may use admin RPCs (X-3), and who the caller is."""

    def __init__(
        self,
        tokens: Sequence[str],
        identities: Sequence[str] = (),
        delegates: Sequence[str] = (),
    ) -> None:
        self._tokens = parse_admin_tokens(tokens)
        self._identities = {i for i in identities if i}
        self._delegates = {d for d in delegates if d}

    def resolver_identity(self, context: Context, rpc: str) -> tuple[str, str]:
        """(who answers, through whom) for an admin RPC that records a person.

        The caller must be an admin (``check``). A trusted admin caller — one listed in the
        delegate identities, or any admin when none are listed — may name the person it acts
        for in ``x-stockade-on-behalf-of`` metadata (the approval console, which signed that
        person in); that person is then the resolver and the caller is kept as the "via".
        Anything else is the caller's own authenticated identity; a name typed into the
        request is never an identity.
        """
        caller = self.check(context, rpc)
        person = ""
        for key, value in context.invocation_metadata() or ():
            if key == ON_BEHALF_OF and isinstance(value, str):
                person = value.strip()
        if not person or (self._delegates and caller not in self._delegates):
            return caller, ""
        if len(person) > 256 or not person.isprintable():
            raise InvalidArgument(f"{ON_BEHALF_OF} must be a printable name of at most 256 chars")
        return person, caller

    def caller_identity(self, context: Context) -> str | None:
        """The caller's authenticated identity, or None when it has none.

        The one place an identity comes from (approval resolvers, audit rows): ``token:NAME``
        for a configured admin token, ``mtls:IDENTITY`` for a verified client certificate,
        never anything the caller merely types.
        """
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):
                scheme, _, token = value.partition(" ")
                if scheme.lower() == "bearer":
                    given = token.strip().encode()
                    for name, want in self._tokens:
                        if hmac.compare_digest(given, want):
                            return f"token:{name}"
        who = peer_identity(context)
        if who is not None:
            return f"mtls:{who}"
        return None

    def check(self, context: Context, rpc: str) -> str:
        """Return the caller's identity; raise ``NotAuthorized`` if it may not call ``rpc``."""
        who = self.caller_identity(context)
        if who is not None:
            if who.startswith("token:"):
                return who
            if who.removeprefix("mtls:") in self._identities:
                return who
        if not self._tokens and not self._identities:
            raise NotAuthorized(
                f"{rpc} is an admin RPC and no admin callers are configured "
                "(set STOCKADE_DECISION_ADMIN_TOKENS or STOCKADE_DECISION_ADMIN_IDENTITIES)",
                rpc=rpc,
            )
        raise NotAuthorized(
            f"{rpc} is an admin RPC: send 'authorization: Bearer <token>' with a configured "
            "admin token, or connect with an admin mTLS identity",
            rpc=rpc,
        )


def _with_note(reason: str, typed: str, caller: str) -> str:
    if not typed or f"{typed}" == caller:
        return reason
    note = f"(resolver says: {typed[:200]})"
    return f"{reason} {note}".strip()


class DecisionServicer(d_grpc.DecisionServiceServicer):
    """The decision service over gRPC."""

    def __init__(
        self,
        core: DecisionCore,
        auth: AdminAuth,
        metrics: DecisionMetrics | None = None,
        records: DecisionSink | None = None,
    ) -> None:
        """``records`` receives a decision record for every Decide and every answered
        approval (the audit recorder's ``enqueue``, or ``log_sink``)."""
        self.core = core
        self.auth = auth
        self.metrics = metrics or DecisionMetrics()
        self.records = records

    def _record(self, event: a_pb2.AuditEvent) -> None:
        if self.records is None:
            return
        try:
            self.records(event)
        except Exception as exc:
            raise ResourceExhausted(
                f"the decision could not be recorded in the audit log ({exc}); refusing it",
                limit="audit",
            ) from exc

    async def Decide(self, request: d_pb2.DecideRequest, context: Context) -> d_pb2.DecideResponse:
        started = time.perf_counter()
        call = request.call
        tool_name = call.tool_name
        signals = request.hook_signals
        outcome = await self.core.decide(
            CallInput(
                call.session_id,
                call.call_id,
                tool_name,
                struct_to_dict(call.arguments),
                call.from_subagent,
                call.agent_name,
            ),
            facts_from_pb(tool_name, request),
            hooks_from_pb(signals) if signals else (),
        )
        d = outcome.decision
        if self.records is not None:
            self._record(
                decision_record(
                    session_id=call.session_id,
                    call_id=call.call_id,
                    tool_name=tool_name,
                    agent_name=call.agent_name,
                    arguments=struct_to_dict(call.arguments),
                    decision=d,
                    settle=settlement(d) if outcome.grant is not None else None,
                    approval_id=outcome.approval_id,
                )
            )
        resp = _decide_response(outcome)
        self.metrics.record(
            d.verdict.value, d.step, time.perf_counter() - started, halt=outcome.halt
        )
        return resp

    async def CreateSession(
        self, request: d_pb2.CreateSessionRequest, context: Context
    ) -> d_pb2.CreateSessionResponse:
        default = self.core.default_mode
        mode = default if request.mode == c_pb2.PERMISSION_MODE_UNSPECIFIED else _mode(request.mode)
        if mode is not default:
            # Any other mode than the configured default needs SetMode's rights (DEC-6 rev 2).
            self.auth.check(context, "CreateSession")
        rec, _ = await self.core.store.create_session(
            request.session_id or None, mode, task=request.task
        )
        return d_pb2.CreateSessionResponse(session=session_to_pb(rec))

    async def GetSession(
        self, request: d_pb2.GetSessionRequest, context: Context
    ) -> d_pb2.GetSessionResponse:
        rec = await self.core.store.get_session(request.session_id)
        return d_pb2.GetSessionResponse(session=session_to_pb(rec))

    async def DeleteSession(
        self, request: d_pb2.DeleteSessionRequest, context: Context
    ) -> d_pb2.DeleteSessionResponse:
        self.auth.check(context, "DeleteSession")
        return d_pb2.DeleteSessionResponse(
            deleted=await self.core.store.delete_session(request.session_id)
        )

    async def AddRule(
        self, request: d_pb2.AddRuleRequest, context: Context
    ) -> d_pb2.AddRuleResponse:
        self.auth.check(context, "AddRule")
        effect = EFFECT_FROM_PB.get(request.rule.effect)
        if effect is None:
            raise InvalidArgument("rule.effect must be DENY, ASK or ALLOW")
        rule = await self.core.store.add_rule(
            request.session_id,
            effect,
            request.rule.pattern,
            request.rule.reason,
            request.request_id,
        )
        return d_pb2.AddRuleResponse(rule=rule_to_pb(rule))

    async def RemoveRule(
        self, request: d_pb2.RemoveRuleRequest, context: Context
    ) -> d_pb2.RemoveRuleResponse:
        self.auth.check(context, "RemoveRule")
        removed = await self.core.store.remove_rule(request.session_id, request.rule_id)
        return d_pb2.RemoveRuleResponse(removed=removed)

    async def ListRules(
        self, request: d_pb2.ListRulesRequest, context: Context
    ) -> d_pb2.ListRulesResponse:
        policy = self.core.policy
        rules: list[Rule] = list(policy.rules) if request.include_policy else []
        if request.session_id:
            await self.core.store.get_session(request.session_id)
            rules += await self.core.store.list_rules(request.session_id)
        return d_pb2.ListRulesResponse(
            rules=[rule_to_pb(r) for r in rules], policy_version=policy.version
        )

    async def SetMode(
        self, request: d_pb2.SetModeRequest, context: Context
    ) -> d_pb2.SetModeResponse:
        self.auth.check(context, "SetMode")
        rec = await self.core.store.set_mode(request.session_id, _mode(request.mode))
        return d_pb2.SetModeResponse(session=session_to_pb(rec))

    async def WatchApprovals(
        self, request: d_pb2.WatchApprovalsRequest, context: Context
    ) -> AsyncIterator[d_pb2.WatchApprovalsResponse]:
        # Headers go out at once, so a watcher knows its stream is established even while
        # nothing is pending (the console reports itself ready only then).
        await context.send_initial_metadata(())
        async for rec in until_stopping(self.core.broker.watch(request.session_id)):
            yield d_pb2.WatchApprovalsResponse(approval=approval_to_pb(rec))

    async def ResolveApproval(
        self, request: d_pb2.ResolveApprovalRequest, context: Context
    ) -> d_pb2.ResolveApprovalResponse:
        caller, via = self.auth.resolver_identity(context, "ResolveApproval")
        resolution = RESOLUTION_FROM_PB.get(request.resolution)
        if resolution is None:
            raise InvalidArgument("resolution must be ALLOW_ONCE, DENY or ALWAYS_ALLOW")
        scope = None
        if request.HasField("scope"):
            expire = None
            if request.scope.HasField("expire_time"):
                expire = request.scope.expire_time.ToNanoseconds() / 1e9
            scope = GrantScope(request.scope.remaining_uses, expire)
        rec, grant, note = await self.core.broker.resolve(
            request.approval_id,
            resolution,
            # The authenticated identity, never the free text the caller typed (it is kept
            # in the reason, marked as such).
            resolver=caller,
            reason=_with_note(request.reason, request.resolver, caller),
            scope=scope,
        )
        if rec.state in (ApprovalState.ALLOWED, ApprovalState.DENIED):
            self._record(approval_record(rec, self.core.policy.version, via=via))
        resp = d_pb2.ResolveApprovalResponse(approval=approval_to_pb(rec), note=note)
        if grant is not None:
            resp.session_grant.CopyFrom(grant_record_to_pb(grant))
        return resp

    async def AwaitApproval(
        self, request: d_pb2.AwaitApprovalRequest, context: Context
    ) -> d_pb2.AwaitApprovalResponse:
        out = await self.core.await_approval(request.approval_id)
        resp = d_pb2.AwaitApprovalResponse(
            verdict=VERDICT_TO_PB[out.verdict],
            reason=out.reason,
            approval=approval_to_pb(out.approval),
        )
        grant = grant_to_pb(out.grant)
        if grant is not None:
            resp.grant.CopyFrom(grant)
        return resp

    async def ListGrants(
        self, request: d_pb2.ListGrantsRequest, context: Context
    ) -> d_pb2.ListGrantsResponse:
        await self.core.store.get_session(request.session_id)
        grants = await self.core.store.list_grants(request.session_id)
        return d_pb2.ListGrantsResponse(grants=[grant_record_to_pb(g) for g in grants])

    async def RevokeGrant(
        self, request: d_pb2.RevokeGrantRequest, context: Context
    ) -> d_pb2.RevokeGrantResponse:
        self.auth.check(context, "RevokeGrant")
        return d_pb2.RevokeGrantResponse(
            revoked=await self.core.store.revoke_grant(request.grant_id)
        )

    async def LintPolicy(
        self, request: d_pb2.LintPolicyRequest, context: Context
    ) -> d_pb2.LintPolicyResponse:
        if request.policy_text:
            doc = parse_policy_text(request.policy_text, request.format or "toml")
            rules: Sequence[Rule] = doc.rules
            version = compile_policy(doc).version
        else:
            rules, version = self.core.policy.rules, self.core.policy.version
        return d_pb2.LintPolicyResponse(
            findings=[
                d_pb2.LintFinding(
                    rule=rule_to_pb(f.rule),
                    shadowed_by=rule_to_pb(f.shadowed_by) if f.shadowed_by else None,
                    reason=f.reason,
                    fix=f.fix,
                )
                for f in lint_rules(rules)
            ],
            policy_version=version,
        )
