"""auto mode's last step (DEC-17): what the classifier sees of a call, and what its verdict
does to the engine's decision. Pure functions; the core makes the model call between them.

The engine has already decided everything a rule, the executor or a hook settles; it
marks as classifiable only the asks nobody wrote a rule for (the tool's own non-immune ask,
an undeclared tool's ask). Here a clean ``allow`` becomes ALLOW and a clean ``block``
becomes DENY, both naming the model and its reason in the winning rule (pattern
``auto:classifier:<model>``, source MODE), so the approvals stream, the agent's events and
the audit log say who decided and why; anything else leaves the engine's decision (ASK for
a person, DENY for a subagent) with the classifier's note added to its reason.
"""

from __future__ import annotations

from stockade.contract.redaction import redact_value
from stockade.decision.classifier import ClassifierCall, ClassifierVerdict, Verdict
from stockade.decision.engine import Conflict, Decision, Facts
from stockade.decision.rules import Effect, Rule, Source

CLASSIFIER_STEP = "classifier"
"""``Decision.step`` of a decision the classifier made."""
RULE_PREFIX = "auto:classifier:"
"""Winning-rule pattern of a classifier decision: the prefix, then the model name."""


def classifier_call(
    tool_name: str, arguments: dict[str, object], facts: Facts, decision: Decision, task: str
) -> ClassifierCall:
    """The call as the classifier may see it: arguments with secrets masked, the executor's
    findings, the session's task. Never the tool's earlier outputs."""
    reasons = (decision.reason, *facts.analysis_reasons)
    return ClassifierCall(
        tool_name=tool_name,
        arguments=redact_value(dict(arguments)),
        sub_commands=tuple(facts.sub_commands or ()),
        risk=decision.explanation.risk.value,
        explanation=decision.explanation.summary,
        reasons=tuple(dict.fromkeys(r for r in reasons if r)),
        task=task,
    )


def apply_verdict(decision: Decision, verdict: ClassifierVerdict) -> Decision:
    """The decision after the classifier: ALLOW or DENY for a clean verdict, else unchanged
    but for a note in its reason. Never called for a decision that is not classifiable."""
    assert decision.classifiable
    if verdict.verdict is Verdict.UNSURE:
        who = f"the classifier ({verdict.model})" if verdict.model else "the classifier"
        note = f"auto mode: {who} left it to a person: {verdict.reason}"
        return decision._replace(reason=f"{decision.reason} ({note})", classifiable=False)
    effect = Effect.ALLOW if verdict.verdict is Verdict.ALLOW else Effect.DENY
    word = "allowed" if effect is Effect.ALLOW else "blocked"
    reason = f"auto mode: the classifier ({verdict.model}) {word} it: {verdict.reason}"
    rule = Rule(effect, f"{RULE_PREFIX}{verdict.model}", Source.MODE, verdict.reason)
    settled = Conflict(
        decision.winning_rule,
        f"{decision.verdict.name} ({decision.step}) settled by the classifier",
    )
    return decision._replace(
        verdict=effect,
        reason=reason,
        winning_rule=rule,
        step=CLASSIFIER_STEP,
        conflicts=(*decision.conflicts, settled),
        allow_rules_used=(),
        classifiable=False,
    )


def classifier_settlement(decision: Decision) -> dict[str, str] | None:
    """The grant's ``settle`` claim of a classifier ALLOW (None for other decisions)."""
    if decision.step != CLASSIFIER_STEP or decision.verdict is not Effect.ALLOW:
        return None
    rule = decision.winning_rule
    return {
        "by": "classifier",
        "model": rule.pattern.removeprefix(RULE_PREFIX),
        "reason": rule.reason,
    }
