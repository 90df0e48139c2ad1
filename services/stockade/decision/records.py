"""Decision records for the audit log (issue #10 item 6), in the spirit of OPA's decision log.

Every Decide — also those not made through the bundled agent — and every answered
approval becomes one audit event with status DECIDED: who asked about which call, the
verdict, the winning rule, the conflicts it overrode, the policy version, and how the call
was settled, as the grant's ``settle`` claim says it, flat in ``output_preview`` as JSON
(``{"by": "approval", "approval": ID, "resolver": "token:alice", ...}``: the resolver's
authenticated identity, never a typed name; the console reads ``resolver`` from there).

The call's arguments are not recorded here (they may hold secrets and the agent records
them after redaction); the record carries their SHA-256 instead, the same digest the grant
binds, so a record can be matched to a call. With no audit address configured the records
go to the log (logger ``stockade.decision.records``) and nowhere else.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from google.protobuf import timestamp_pb2

from stockade.contract.grant import argument_digest
from stockade.decision.store.model import ApprovalRecord, ApprovalState
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2

if TYPE_CHECKING:  # the core imports this module
    from stockade.decision.core import CallInput, Outcome

__all__ = ["RECORDS_LOGGER", "DecisionSink", "approval_record", "decision_record", "log_sink"]

RECORDS_LOGGER = "stockade.decision.records"
log = logging.getLogger(RECORDS_LOGGER)

DecisionSink = Callable[[a_pb2.AuditEvent], None]
"""Where decision records go (the spooling audit recorder's ``enqueue``, or the log)."""


def _now() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns())
    return ts


_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""One encoder for every record (``json.dumps`` with options builds a new one per call)."""


def _compact(value: Mapping[str, Any]) -> str:
    return _COMPACT.encode(value)


def decision_record(
    *, call: CallInput, outcome: Outcome, settle: Mapping[str, str] | None
) -> a_pb2.AuditEvent:
    """The record of one Decide: the decision typed exactly as the caller receives it
    (verdict, reason, winning rule, conflicts, policy version: the fields of the same
    ``DecideResponse``, through the same mappings).

    Every Decide builds one (with an audit service configured), so the event is made in
    one constructor call and the parts of the response it does not hold (explanation,
    grant) are not built.
    """
    # Imported here: convert imports the core, which imports this module.
    from stockade.decision.convert import VERDICT_TO_PB, _rule_pb_cached, conflicts_to_pb

    d = outcome.decision
    summary: dict[str, Any] = dict(settle) if settle is not None else {}
    # The grant (on ALLOW) already holds the digest of these very arguments.
    g = outcome.grant
    digest = g.args_digest if g is not None and g.args_digest else argument_digest(call.arguments)
    summary["args_sha256"] = digest[:16]
    if outcome.approval_id:
        summary["approval"] = outcome.approval_id  # the pending approval an ASK created
    now = time.time_ns()
    fields: dict[str, Any] = {
        "event_id": f"decision-{uuid.uuid4().hex}",
        "session_id": call.session_id,
        "tool_name": call.tool_name,
        "status": a_pb2.AUDIT_STATUS_DECIDED,
        "agent_name": call.agent_name or "lead",
        # Timestamp.FromNanoseconds, without building a message to copy.
        "time": {"seconds": now // 1_000_000_000, "nanos": now % 1_000_000_000},
        "call_id": call.call_id,
        "verdict": VERDICT_TO_PB[d.verdict],
        "winning_rule": _rule_pb_cached(d.winning_rule),
        "decision_reason": d.reason,
        "policy_version": d.policy_version,
        "output_preview": _compact(summary),
    }
    if d.conflicts:
        fields["conflicts"] = conflicts_to_pb(d)
    return a_pb2.AuditEvent(**fields)


def approval_record(rec: ApprovalRecord, policy_version: str, via: str = "") -> a_pb2.AuditEvent:
    """The record of an answered approval: the person's verdict and authenticated identity
    (and ``via``: the trusted caller that answered on that person's behalf, if any)."""
    allowed = rec.state is ApprovalState.ALLOWED
    summary = {
        "by": "approval",
        "approval": rec.approval_id,
        "resolver": rec.resolver,
        "resolution": rec.resolution or rec.state.value,
    }
    if via:
        summary["via"] = via
    return a_pb2.AuditEvent(
        event_id=f"approval-{rec.approval_id}-{rec.state.value}",
        session_id=rec.session_id,
        tool_name=rec.call.tool_name,
        status=a_pb2.AUDIT_STATUS_DECIDED,
        agent_name=rec.call.agent_name or "lead",
        time=_now(),
        call_id=rec.call.call_id,
        verdict=c_pb2.VERDICT_ALLOW if allowed else c_pb2.VERDICT_DENY,
        winning_rule=c_pb2.Rule(
            effect=c_pb2.RULE_EFFECT_ALLOW if allowed else c_pb2.RULE_EFFECT_DENY,
            pattern=f"approval:{rec.approval_id}",
        ),
        decision_reason=f"answered by {rec.resolver}" if rec.resolver else "",
        policy_version=policy_version,
        output_preview=_compact(summary),
    )


def log_sink(event: a_pb2.AuditEvent) -> None:
    """The sink without an audit service: one log line per record (nothing else keeps it)."""
    log.info(
        "decision record session=%s call=%s tool=%s verdict=%s rule=%s %s",
        event.session_id,
        event.call_id,
        event.tool_name,
        c_pb2.Verdict.Name(event.verdict),
        event.winning_rule.pattern,
        event.output_preview,
    )
