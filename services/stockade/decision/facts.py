"""The executor's inspection, as sent to Decide, turned into engine facts (no gRPC).

One function for the ``Decide`` RPC and the offline ``stockade policy check``, so both give
the same answer for the same call and inspection (DEC-3 rev 2, DEC-15).

Trust (DEC-12 rev 2): the inspection comes from the caller. The decision binds its digest
into the grant, and the executor refuses a grant whose digest is not that of its own
findings, so a forged or stale inspection buys nothing at Execute. A Decide *without* an
inspection (or with an empty one) for an executor tool is decided as if the executor's
findings were unknown: a tool-level ASK, which only a person (approval), an allow rule or
a mode can settle, and the grant records which (docs/decisions/0001).
"""

from __future__ import annotations

from stockade.contract.grant import Finding, findings_digest
from stockade.contract.tools import EXECUTOR_TOOLS
from stockade.decision.engine import Facts
from stockade.decision.explain import Explanation, Risk
from stockade.decision.rules import Effect, Rule, Source
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

__all__ = ["UNKNOWN_FINDINGS_REASON", "facts_from_inspection", "facts_from_pb", "unknown_findings"]

UNKNOWN_FINDINGS_REASON = (
    "the executor's findings for this call are unknown (Decide carried no inspection), "
    "so it needs an approval, an allow rule or a mode"
)

_EFFECT = {c_pb2.RULE_EFFECT_DENY: Effect.DENY, c_pb2.RULE_EFFECT_ASK: Effect.ASK}
_RISK = {
    c_pb2.RISK_LEVEL_LOW: Risk.LOW,
    c_pb2.RISK_LEVEL_MEDIUM: Risk.MEDIUM,
    c_pb2.RISK_LEVEL_HIGH: Risk.HIGH,
}
_EXECUTOR_TOOLS = frozenset(EXECUTOR_TOOLS)


def unknown_findings(tool_name: str) -> Facts:
    """Facts for an executor tool whose inspection is missing: one tool-level ASK."""
    return Facts(tool_rules=(Rule(Effect.ASK, tool_name, Source.TOOL, UNKNOWN_FINDINGS_REASON),))


def facts_from_pb(tool_name: str, request: d_pb2.DecideRequest) -> Facts:
    """The request's inspection as engine facts (see ``facts_from_inspection``)."""
    return facts_from_inspection(
        tool_name, request.inspection if request.HasField("inspection") else None
    )


def facts_from_inspection(tool_name: str, insp: d_pb2.ToolInspection | None) -> Facts:
    """The executor's inspection as engine facts (absent fields stay unknown).

    For an executor tool, a missing or empty inspection gives ``unknown_findings``; a
    present one also yields the digest the grant binds. For other tools the read-only
    trait comes from the declarations (the engine's), never from the caller.
    """
    executor_tool = tool_name in _EXECUTOR_TOOLS
    if insp is None or insp.ByteSize() == 0:
        return unknown_findings(tool_name) if executor_tool else Facts()
    # Each optional part is looked at only when present: a read's inspection has no tool
    # rules and no analysis, and every Decide pays for what is looked at.
    given_rules = insp.tool_rules
    rules: tuple[Rule, ...] = (
        tuple(
            Rule(
                _EFFECT[r.effect],
                r.pattern or tool_name,
                Source.TOOL,
                r.reason,
                r.rule_id,
                r.bypass_immune,
            )
            for r in given_rules
            if r.effect in _EFFECT
        )  # fmt: skip
        if given_rules
        else ()
    )
    subs: tuple[str, ...] | None = None
    needs_network = False
    reasons: tuple[str, ...] = ()
    texts: list[str] = []
    if insp.HasField("analysis"):
        analysis = insp.analysis
        texts = list(analysis.sub_command_texts)
        given = texts or list(analysis.sub_commands)
        if given:
            subs = tuple(given)
        needs_network = analysis.needs_network
        reasons = tuple(analysis.reasons)
    explanation = None
    if insp.HasField("explanation"):
        given_expl = insp.explanation
        summary = given_expl.summary
        if summary:
            explanation = Explanation(_RISK.get(given_expl.risk, Risk.MEDIUM), summary)
    if not executor_tool:
        # Only the executor's findings are bound by a grant; for any other tool the caller's
        # read-only claim is ignored (the engine uses the declared trait).
        return Facts(rules, subs, None, None, needs_network, reasons, explanation)
    read_only = insp.read_only
    inside = insp.inside_working_dir
    digest = findings_digest(
        [Finding(r.effect.value, r.bypass_immune, r.reason) for r in rules] if rules else (),
        read_only=read_only,
        inside_working_dir=inside,
        sub_commands=texts,
    )
    return Facts(rules, subs, inside, read_only, needs_network, reasons, explanation, digest)
