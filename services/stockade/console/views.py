"""What the pages show, as plain frozen dataclasses built from the services' messages.

Every argument and output passes through the shared redaction (``stockade.contract``)
here, once, so no template can show a secret by forgetting to mask it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format, timestamp_pb2

from stockade.contract.redaction import redact_arguments, redact_text
from stockade.v1 import agent_service_pb2 as ag_pb2
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

MAX_SHOWN_CHARS = 4000
"""Longest argument text shown in a page (the rest is cut with a marker)."""


def _name(enum: Any, value: int, prefix: str) -> str:
    try:
        return str(enum.Name(value)).removeprefix(prefix).lower()
    except ValueError:
        return "unknown"


def when(ts: timestamp_pb2.Timestamp) -> dt.datetime | None:
    """A protobuf time as an aware UTC datetime (None when unset)."""
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return ts.ToDatetime(tzinfo=dt.UTC)


def shown_arguments(args: Any) -> str:
    """Arguments as indented JSON with secrets masked, cut to ``MAX_SHOWN_CHARS``."""
    text = json.dumps(redact_arguments(args), indent=2, ensure_ascii=False, sort_keys=True)
    if len(text) > MAX_SHOWN_CHARS:
        text = text[:MAX_SHOWN_CHARS] + f"\n… ({len(text) - MAX_SHOWN_CHARS} more characters)"
    return text


@dataclass(frozen=True)
class RuleView:
    """One rule."""

    rule_id: str
    effect: str
    pattern: str
    source: str
    reason: str


def rule_view(rule: c_pb2.Rule) -> RuleView:
    """A rule message as a view."""
    return RuleView(
        rule.rule_id,
        _name(c_pb2.RuleEffect, rule.effect, "RULE_EFFECT_"),
        rule.pattern,
        _name(c_pb2.RuleSource, rule.source, "RULE_SOURCE_"),
        rule.reason,
    )


def asking_rule(a: d_pb2.Approval) -> RuleView | None:
    """The approval's asking rule with its texts masked, or None when it has none."""
    if not a.HasField("rule"):
        return None
    r = rule_view(a.rule)
    return RuleView(r.rule_id, r.effect, redact_text(r.pattern), r.source, redact_text(r.reason))


@dataclass(frozen=True)
class ApprovalView:
    """One approval as the approvals page shows it."""

    approval_id: str
    session_id: str
    agent_name: str
    tool_name: str
    arguments: str
    """Masked, indented JSON."""
    reason: str
    """Why it asks: the asking rule's reason or ``rule PATTERN requires approval``."""
    rule: RuleView | None
    """The rule that asked (None for an approval stored before the rule was kept)."""
    risk: str
    summary: str
    state: str
    """pending, allowed, denied or expired."""
    resolver: str
    create_time: dt.datetime | None
    expire_time: dt.datetime | None
    always_allow_applies: bool
    from_subagent: bool

    @property
    def pending(self) -> bool:
        """Still waiting for an answer."""
        return self.state == "pending"


def approval_view(a: d_pb2.Approval) -> ApprovalView:
    """An approval message as a view (arguments masked)."""
    return ApprovalView(
        approval_id=a.approval_id,
        session_id=a.session_id,
        agent_name=a.call.agent_name or "lead",
        tool_name=a.call.tool_name,
        arguments=shown_arguments(json_format.MessageToDict(a.call.arguments)),
        reason=redact_text(a.reason),
        rule=asking_rule(a),
        risk=_name(c_pb2.RiskLevel, a.explanation.risk, "RISK_LEVEL_"),
        summary=redact_text(a.explanation.summary),
        state=_name(d_pb2.ApprovalState, a.state, "APPROVAL_STATE_"),
        resolver=a.resolver,
        create_time=when(a.create_time),
        expire_time=when(a.expire_time),
        always_allow_applies=a.always_allow_applies,
        from_subagent=a.call.from_subagent,
    )


@dataclass(frozen=True)
class GrantView:
    """One "always allow" grant."""

    grant_id: str
    session_id: str
    rule: RuleView
    remaining_uses: int
    """0 means unlimited."""
    expire_time: dt.datetime | None
    create_time: dt.datetime | None
    resolver: str


def grant_view(g: d_pb2.SessionGrant) -> GrantView:
    """A session grant message as a view."""
    return GrantView(
        g.grant_id,
        g.session_id,
        rule_view(g.rule),
        g.remaining_uses,
        when(g.expire_time) if g.HasField("expire_time") else None,
        when(g.create_time),
        g.resolver,
    )


@dataclass(frozen=True)
class SessionView:
    """A decision session."""

    session_id: str
    mode: str
    """The mode's name as the CLI and policy files write it (``acceptEdits`` ...)."""
    create_time: dt.datetime | None
    consecutive_denials: int
    total_denials: int


MODES: dict[str, int] = {
    "default": c_pb2.PERMISSION_MODE_DEFAULT,
    "acceptEdits": c_pb2.PERMISSION_MODE_ACCEPT_EDITS,
    "plan": c_pb2.PERMISSION_MODE_PLAN,
    "dontAsk": c_pb2.PERMISSION_MODE_DONT_ASK,
    "auto": c_pb2.PERMISSION_MODE_AUTO,
    "bypassPermissions": c_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS,
}
"""Mode names (as in policy files) and their protobuf values."""
_MODE_NAMES = {v: k for k, v in MODES.items()}


def session_view(s: d_pb2.Session) -> SessionView:
    """A session message as a view."""
    return SessionView(
        s.session_id,
        _MODE_NAMES.get(s.mode, "unknown"),
        when(s.create_time),
        s.consecutive_denials,
        s.total_denials,
    )


@dataclass(frozen=True)
class ConflictView:
    """A rule the winner overrode."""

    rule: str
    note: str


@dataclass(frozen=True)
class AuditRowView:
    """One audit row with its full decision."""

    sequence: int
    time: dt.datetime | None
    session_id: str
    agent_name: str
    tool_name: str
    call_id: str
    status: str
    verdict: str
    rule: str
    rule_source: str
    conflicts: tuple[ConflictView, ...]
    policy_version: str
    approver: str
    """Who settled the call's approval, when one did (empty otherwise)."""
    arguments: str
    output_preview: str
    termination_reason: str
    trace_id: str
    row_hash: str


def _conflicts(conflicts: Iterable[d_pb2.Conflict], cut: str) -> tuple[ConflictView, ...]:
    out: list[ConflictView] = []
    for c in conflicts:
        effect = _name(c_pb2.RuleEffect, c.rule.effect, "RULE_EFFECT_") if c.rule.effect else ""
        source = _name(c_pb2.RuleSource, c.rule.source, "RULE_SOURCE_") if c.rule.source else ""
        rule = " ".join(p for p in (effect, c.rule.pattern) if p)
        if source:
            rule += f" ({source})"
        out.append(ConflictView(redact_text(rule), redact_text(c.note)))
    if not out and cut.startswith('{"$stockade_cut"'):
        out.append(ConflictView("(too many to keep: cut)", ""))
    return tuple(out[:50])


def _arguments(e: a_pb2.AuditEvent) -> str:
    if e.HasField("arguments"):
        return shown_arguments(json_format.MessageToDict(e.arguments))
    return redact_text(e.arguments_json[:MAX_SHOWN_CHARS])


def _termination(e: a_pb2.AuditEvent) -> str:
    if e.termination:
        return _name(ag_pb2.TerminationReason, e.termination, "TERMINATION_REASON_")
    return redact_text(e.termination_reason)


def audit_row_view(r: a_pb2.AuditRecord) -> AuditRowView:
    """An audit record as a view (arguments and output masked again: defence in depth)."""
    e = r.event
    return AuditRowView(
        sequence=r.sequence,
        time=when(e.time),
        session_id=e.session_id,
        agent_name=e.agent_name,
        tool_name=e.tool_name,
        call_id=e.call_id,
        status=_name(a_pb2.AuditStatus, e.status, "AUDIT_STATUS_"),
        verdict=_name(c_pb2.Verdict, e.verdict, "VERDICT_") if e.verdict else "",
        rule=redact_text(e.winning_rule.pattern),
        rule_source=_name(c_pb2.RuleSource, e.winning_rule.source, "RULE_SOURCE_")
        if e.winning_rule.source
        else "",
        conflicts=_conflicts(e.conflicts, e.conflict_log),
        policy_version=e.policy_version,
        approver=_approver(e),
        arguments=_arguments(e),
        output_preview=redact_text(e.output_preview),
        termination_reason=_termination(e),
        trace_id=e.trace_id,
        row_hash=r.row_hash,
    )


def _approver(e: a_pb2.AuditEvent) -> str:
    """Who settled the call through an approval: the decision service's decision record
    carries its settlement as JSON in ``output_preview`` (``{"by": "approval", "resolver":
    IDENTITY, …}``). Read before masking: an identity such as ``token:NAME`` is no secret."""
    raw = e.output_preview
    if not raw.startswith("{"):
        return ""
    try:
        data = json.loads(raw)
    except ValueError:
        return ""
    if not isinstance(data, dict) or not isinstance(data.get("resolver"), str):
        return ""
    # "via": the trusted caller (the console) that answered on the person's behalf.
    via = data.get("via")
    shown = data["resolver"] + (f" via {via}" if isinstance(via, str) and via else "")
    return str(shown)[:300]


@dataclass(frozen=True)
class VerifyView:
    """The hash chain's state."""

    ok: bool
    rows_checked: int
    first_broken_sequence: int
    detail: str
    head_sequence: int
    head_hash: str
    error: str = ""
    """Set when the check could not run (the audit service was unreachable ...)."""


def verify_view(v: a_pb2.VerifyLogResponse) -> VerifyView:
    """A VerifyLog answer as a view."""
    return VerifyView(
        v.ok, v.rows_checked, v.first_broken_sequence, v.detail, v.head_sequence, v.head_hash
    )
