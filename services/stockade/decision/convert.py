"""Protobuf <-> decision domain types, in one place (the servicer maps with these only).

The Decide path is the hot one: ``decide_response`` builds the whole response in one
constructor call, rule messages of policy rules are cached per rule object, and flat
Struct arguments are read without ``json_format``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from stockade.decision.approvals import GrantScope, Resolution
from stockade.decision.core import CallInput, Outcome
from stockade.decision.engine import Decision, HookSignal, SignalKind
from stockade.decision.explain import Risk
from stockade.decision.grants import SignedGrant
from stockade.decision.lint import Finding as LintFinding
from stockade.decision.modes import Mode
from stockade.decision.rules import Effect, Rule, Source
from stockade.decision.store.model import ApprovalRecord, ApprovalState, GrantRecord, SessionRecord
from stockade.errors import InvalidArgument
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

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


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    """Seconds since the epoch as a protobuf Timestamp."""
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
        expires_at=timestamp(grant.expires_at),
    )


def conflicts_to_pb(decision: Decision) -> list[d_pb2.Conflict]:
    """The rules and signals a decision's winner overrode, as messages (the same list in
    the DecideResponse and in the decision's audit record)."""
    return [d_pb2.Conflict(rule=_rule_pb_cached(c.rule), note=c.note) for c in decision.conflicts]


def decide_response(outcome: Outcome) -> d_pb2.DecideResponse:
    """The whole DecideResponse in one constructor call (decision, grant, approval and
    halt), the hot path of every Decide.

    Sub-messages are given as dicts and unset fields are left out: protobuf builds them in
    place, which costs half as much as building each message and copying it in.
    """
    d = outcome.decision
    g = outcome.grant
    expl = d.explanation
    fields: dict[str, Any] = {
        "verdict": VERDICT_TO_PB[d.verdict],
        "reason": d.reason,
        "winning_rule": _rule_pb_cached(d.winning_rule),
        "policy_version": d.policy_version,
        "explanation": {"risk": RISK_TO_PB[expl.risk], "summary": expl.summary},
        "mode": MODE_TO_PB[d.mode],
    }
    if d.conflicts:
        fields["conflicts"] = conflicts_to_pb(d)
    if g is not None:
        nanos = int(g.expires_at * 1e9)
        fields["grant"] = {
            "payload": g.payload,
            "signature": g.signature,
            "key_id": g.key_id,
            # Timestamp.FromNanoseconds, without building a message to copy.
            "expires_at": {"seconds": nanos // 1_000_000_000, "nanos": nanos % 1_000_000_000},
        }
    if outcome.approval_id:
        fields["approval_id"] = outcome.approval_id
    if outcome.halt:
        fields["halt"] = True
    if outcome.halt_reason:
        fields["halt_reason"] = outcome.halt_reason
    if outcome.always_allow_applies:
        fields["always_allow_applies"] = True
    return d_pb2.DecideResponse(**fields)


def session_to_pb(s: SessionRecord) -> d_pb2.Session:
    """A session as protobuf."""
    return d_pb2.Session(
        session_id=s.session_id,
        mode=MODE_TO_PB[s.mode],
        create_time=timestamp(s.create_time),
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
        create_time=timestamp(a.create_time),
        expire_time=timestamp(a.expire_time),
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
        create_time=timestamp(g.create_time),
        resolver=g.resolver,
    )
    if g.expire_time is not None:
        msg.expire_time.CopyFrom(timestamp(g.expire_time))
    return msg


def mode_from_pb(value: int) -> Mode:
    """A requested mode; ``InvalidArgument`` when it is not set."""
    mode: Mode | None = MODE_FROM_PB.get(value)  # type: ignore[call-overload]
    if mode is None:
        raise InvalidArgument("mode must be set (DEFAULT, ACCEPT_EDITS, ...)")
    return mode


def call_from_pb(call: c_pb2.ToolCall) -> CallInput:
    """The call of a DecideRequest."""
    return CallInput(
        call.session_id,
        call.call_id,
        call.tool_name,
        struct_to_dict(call.arguments),
        call.from_subagent,
        call.agent_name,
    )


def effect_from_pb(value: int) -> Effect:
    """A session rule's effect; ``InvalidArgument`` unless DENY, ASK or ALLOW."""
    effect = EFFECT_FROM_PB.get(value)  # type: ignore[call-overload]
    if effect is None:
        raise InvalidArgument("rule.effect must be DENY, ASK or ALLOW")
    return effect  # type: ignore[no-any-return]


def resolution_from_pb(value: int) -> Resolution:
    """A resolver's answer; ``InvalidArgument`` when it is not set."""
    resolution = RESOLUTION_FROM_PB.get(value)  # type: ignore[call-overload]
    if resolution is None:
        raise InvalidArgument("resolution must be ALLOW_ONCE, DENY or ALWAYS_ALLOW")
    return resolution  # type: ignore[no-any-return]


def scope_from_pb(request: d_pb2.ResolveApprovalRequest) -> GrantScope | None:
    """How far an ALWAYS_ALLOW reaches (None: the rest of the session)."""
    if not request.HasField("scope"):
        return None
    expire = None
    if request.scope.HasField("expire_time"):
        expire = request.scope.expire_time.ToNanoseconds() / 1e9
    return GrantScope(request.scope.remaining_uses, expire)


def lint_finding_to_pb(f: LintFinding) -> d_pb2.LintFinding:
    """A lint finding as protobuf."""
    return d_pb2.LintFinding(
        rule=rule_to_pb(f.rule),
        shadowed_by=rule_to_pb(f.shadowed_by) if f.shadowed_by else None,
        reason=f.reason,
        fix=f.fix,
    )
