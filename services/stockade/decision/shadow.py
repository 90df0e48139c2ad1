"""Shadow mode: a candidate policy decided beside the live one on real traffic.

With ``STOCKADE_DECISION_SHADOW_POLICY_FILE`` set, every Decide is decided a second time
under the candidate (same call, session mode, session rules, hook signals and executor
findings), never enforced. When the candidate's verdict, or the rule that decides,
differs from the live one the difference is recorded three ways: a log line, the
``stockade.decision.shadow.differences`` counter (by live and candidate verdict), and a
conflict entry on the decision itself ("shadow policy <version> would deny …"), which the
agent writes into the call's audit row (``conflict_log``) — so the audit trail shows,
call by call, what the rollout would change. It complements the after-the-fact
``stockade policy replay``.

The shadow evaluation can never change the live outcome: any failure in it is logged and
the live decision stands.
"""

from __future__ import annotations

import logging

from opentelemetry import metrics

from stockade.decision.engine import Conflict, Decision, DecisionRequest, decide
from stockade.decision.policy import PolicyStore

log = logging.getLogger(__name__)


class ShadowPolicy:
    """The candidate policy and what comparing with it records."""

    def __init__(self, policies: PolicyStore, meter: metrics.Meter | None = None) -> None:
        self.policies = policies
        meter = meter or metrics.get_meter("stockade.decision")
        self._differences = meter.create_counter(
            "stockade.decision.shadow.differences",
            unit="{decision}",
            description="Decisions the shadow (candidate) policy would have decided differently",
        )
        self._compared = meter.create_counter(
            "stockade.decision.shadow.decisions",
            unit="{decision}",
            description="Decisions also decided under the shadow policy",
        )

    def compare(self, live: Decision, request: DecisionRequest, session_id: str) -> Decision:
        """``live``, with a shadow conflict entry appended when the candidate differs."""
        try:
            candidate = decide(self.policies.current, request)
        except Exception:  # the candidate must never break live traffic
            log.warning("shadow policy evaluation failed; live decision stands", exc_info=True)
            return live
        self._compared.add(1)
        rule = candidate.winning_rule
        same_rule = (rule.pattern, rule.source) == (
            live.winning_rule.pattern,
            live.winning_rule.source,
        )
        if candidate.verdict is live.verdict and same_rule:
            return live
        live_v, cand_v = live.verdict.value, candidate.verdict.value
        self._differences.add(1, {"live": live_v, "candidate": cand_v})
        note = (
            f"shadow policy {candidate.policy_version} would {cand_v} "
            f"(live {live_v}) by {rule.pattern!r} [{rule.source.value}] at {candidate.step}: "
            f"{candidate.reason}"
        )
        log.info(
            "shadow difference: session %s tool %s: live %s by %r, candidate %s by %r (policy %s)",
            session_id,
            request.tool_name,
            live_v,
            live.winning_rule.pattern,
            cand_v,
            rule.pattern,
            candidate.policy_version,
        )
        return live._replace(conflicts=(*live.conflicts, Conflict(rule, note)))
