"""The decision service's use cases, without gRPC: decide, approvals, sessions, denial limits.

``DecisionCore`` ties the policy, the session store, the approval broker, the grant
signer and the decision records together. It is the only object the servicer calls, with
one method per RPC, so the servicer only maps protobuf to these calls and back.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from stockade.decision.approvals import (
    ApprovalBroker,
    ApprovalLimits,
    GrantScope,
    Resolution,
    Resolved,
)
from stockade.decision.auto import apply_verdict, classifier_call, classifier_settlement
from stockade.decision.classifier import Classifier
from stockade.decision.engine import (
    CompiledPolicy,
    Decision,
    DecisionRequest,
    Facts,
    HookSignal,
    decide,
)
from stockade.decision.grants import GrantSigner, SignedGrant
from stockade.decision.lint import Finding, lint_rules
from stockade.decision.metrics import DecisionMetrics
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyStore, compile_policy, parse_policy_text
from stockade.decision.records import DecisionSink, approval_record, decision_record
from stockade.decision.rules import Effect, Rule, Source
from stockade.decision.shadow import ShadowPolicy
from stockade.decision.store.base import DecisionStore
from stockade.decision.store.model import (
    ApprovalRecord,
    ApprovalState,
    GrantRecord,
    PendingCall,
    SessionRecord,
)
from stockade.errors import DependencyUnavailable, InvalidArgument, ResourceExhausted


class Caller(Protocol):
    """The authenticated caller of an admin RPC (``stockade.server.access.Caller``; the
    interceptor works it out before the servicer runs)."""

    def require_admin(self, rpc: str) -> str:
        """The caller's identity; ``NotAuthorized`` unless the caller is an admin."""
        ...

    def resolver(self, rpc: str) -> tuple[str, str]:
        """(who answers, through whom): the person a trusted delegate acts for, else the
        caller's own authenticated identity."""
        ...


@dataclass(frozen=True)
class CallInput:
    """One tool call as the agent sends it."""

    session_id: str
    call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    from_subagent: bool = False
    agent_name: str = ""


@dataclass(frozen=True)
class Outcome:
    """A decision plus what the service attached to it."""

    decision: Decision
    halt: bool = False
    halt_reason: str = ""
    grant: SignedGrant | None = None
    approval_id: str = ""
    always_allow_applies: bool = False
    """On ASK: whether an ALWAYS_ALLOW answer to the approval can take effect."""


@dataclass(frozen=True)
class AwaitOutcome:
    """The end of an ask flow."""

    verdict: Effect
    reason: str
    approval: ApprovalRecord
    grant: SignedGrant | None = None


def settlement(decision: Decision) -> dict[str, str]:
    """How an ALLOW decision settled any tool-level ASK, as the grant's ``settle`` claim.

    P7: the allow rule (pattern and source); ``mode``: the mode; auto mode's classifier: the
    model and its reason; P8 (no ask at all): none. An approval's settlement is made when
    the approval is answered (``await_approval``).
    """
    by_classifier = classifier_settlement(decision)
    if by_classifier is not None:
        return by_classifier
    if decision.step == "P7":
        rule = decision.winning_rule
        return {"by": "rule", "rule": rule.pattern, "source": rule.source.value}
    if decision.step == "mode":
        return {"by": "mode", "mode": decision.mode.value}
    return {"by": "none"}


class DecisionCore:
    """Decides calls for sessions and runs the ask flow."""

    def __init__(
        self,
        policies: PolicyStore,
        store: DecisionStore,
        signer: GrantSigner,
        *,
        default_mode: Mode | None = None,
        approval_limits: ApprovalLimits | None = None,
        shadow: ShadowPolicy | None = None,
        classifier: Classifier | None = None,
        records: DecisionSink | None = None,
        metrics: DecisionMetrics | None = None,
    ) -> None:
        """``records`` receives a decision record for every Decide and every answered
        approval (the audit recorder's ``enqueue``, or ``log_sink``); None: no records."""
        self.policies = policies
        self.store = store
        self.signer = signer
        self.broker = ApprovalBroker(store, limits=approval_limits)
        self._default_mode = default_mode
        self.shadow = shadow
        """A candidate policy decided beside the live one, never enforced (shadow mode)."""
        self.classifier = classifier
        """auto mode's classifier (DEC-17); None: classifiable asks go to a person."""
        self.records = records
        self.metrics = metrics or DecisionMetrics()

    @property
    def policy(self) -> CompiledPolicy:
        """The policy in force."""
        return self.policies.current

    @property
    def default_mode(self) -> Mode:
        """Mode of new sessions: the configured one, else the policy's."""
        return self._default_mode or self.policy.mode

    async def decide(
        self, call: CallInput, facts: Facts, hook_signals: tuple[HookSignal, ...] = ()
    ) -> Outcome:
        """Decide one call; attach a grant (ALLOW), an approval (ASK) and the halt flag;
        record the decision (refused if it cannot be recorded) and count it."""
        started = time.perf_counter()
        outcome = await self._decide(call, facts, hook_signals)
        d = outcome.decision
        if self.records is not None:
            self._record(
                decision_record(
                    call=call,
                    outcome=outcome,
                    settle=settlement(d) if outcome.grant is not None else None,
                )
            )
        self.metrics.record(
            d.verdict.value, d.step, time.perf_counter() - started, halt=outcome.halt
        )
        return outcome

    def _record(self, event: Any) -> None:
        """Hand a decision record to the sink; a sink that refuses refuses the decision."""
        if self.records is None:
            return
        try:
            self.records(event)
        except Exception as exc:
            raise ResourceExhausted(
                f"the decision could not be recorded in the audit log ({exc}); refusing it",
                limit="audit",
            ) from exc

    async def _decide(
        self,
        call: CallInput,
        facts: Facts,
        hook_signals: tuple[HookSignal, ...],
        *,
        _attempt: int = 0,
    ) -> Outcome:
        if not call.tool_name:
            raise InvalidArgument("call.tool_name is required")
        if not call.session_id:
            raise InvalidArgument("call.session_id is required")
        policy = self.policy
        # Unknown sessions are created on first use, so an agent need not pre-register.
        session, _ = await self.store.create_session(call.session_id, self.default_mode)
        rules = await self.store.session_rules(session.session_id, cwd=policy.cwd)
        request = DecisionRequest(
            tool_name=call.tool_name,
            arguments=call.arguments,
            mode=session.mode,
            from_subagent=call.from_subagent,
            facts=facts,
            hook_signals=hook_signals,
            session_rules=rules,
        )
        decision = decide(policy, request)
        if self.shadow is not None:
            decision = self.shadow.compare(decision, request, session.session_id)
        if decision.classifiable and self.classifier is not None:
            decision = await self._classify(call, facts, session.task, decision)
        grant = None
        approval_id = ""
        always_allow_applies = False
        if decision.verdict is Effect.ALLOW:
            used = decision.allow_rules_used
            # Only session rules can be counted grants; policy ALLOWs spend nothing.
            if (
                used
                and any(r.source is Source.SESSION for r in used)
                and not await self.store.use_grants(session.session_id, used)
            ):
                # Another replica spent the grant's last use first: this ALLOW no longer
                # stands; decide again on the session's rules as they are now.
                if _attempt >= 3:
                    raise DependencyUnavailable(
                        "session grants kept changing while deciding; try again"
                    )
                return await self._decide(call, facts, hook_signals, _attempt=_attempt + 1)
            grant = self.signer.sign(
                session_id=call.session_id,
                call_id=call.call_id,
                tool_name=call.tool_name,
                arguments=call.arguments,
                findings=facts.findings,
                settle=settlement(decision),
            )
        elif decision.verdict is Effect.ASK:
            # A retried Decide for the same call reuses its pending approval (no duplicates).
            existing = await self.store.pending_for_call(session.session_id, call.call_id)
            if existing is not None and (
                existing.call.tool_name != call.tool_name
                or dict(existing.call.arguments) != dict(call.arguments)
                or existing.call.findings != facts.findings
            ):
                existing = None  # same call id, different call: ask about this one
            approval = existing or await self.broker.create(
                session.session_id,
                PendingCall(
                    call.call_id,
                    call.tool_name,
                    dict(call.arguments),
                    call.from_subagent,
                    call.agent_name,
                    facts.findings,
                ),
                reason=decision.reason,
                risk=decision.explanation.risk.value,
                summary=decision.explanation.summary,
                timeout_s=policy.approval_timeout_seconds,
                # Only the tool's own ask (P6) gives way to an allow rule, unless immune.
                always_allow_applies=decision.step == "P6"
                and not decision.winning_rule.bypass_immune,
                rule=decision.winning_rule,
            )
            approval_id = approval.approval_id
            always_allow_applies = approval.always_allow_applies
        if decision.verdict is not Effect.ASK:
            session = await self.store.record_outcome(
                session.session_id, denied=decision.verdict is Effect.DENY
            )
        halt, halt_reason = self.halt_state(
            session.consecutive_denials, session.total_denials, policy
        )
        return Outcome(decision, halt, halt_reason, grant, approval_id, always_allow_applies)

    async def _classify(
        self, call: CallInput, facts: Facts, task: str, decision: Decision
    ) -> Decision:
        """DEC-17: put an ask no rule settled to the classifier; only a clean verdict
        changes the decision (see ``stockade.decision.auto``)."""
        assert self.classifier is not None
        asked = classifier_call(call.tool_name, dict(call.arguments), facts, decision, task)
        verdict = await self.classifier.classify(call.session_id, asked)
        return apply_verdict(decision, verdict)

    @staticmethod
    def halt_state(consecutive: int, total: int, policy: CompiledPolicy) -> tuple[bool, str]:
        """DEC-9: whether a denial limit is reached, and which."""
        if consecutive >= policy.denial_max_consecutive:
            return True, (
                f"{consecutive} denials in a row (limit {policy.denial_max_consecutive}): "
                "end the turn and ask the user how to proceed"
            )
        if total >= policy.denial_max_total:
            return True, (
                f"{total} denials in this session (limit {policy.denial_max_total}): "
                "end the turn and ask the user how to proceed"
            )
        return False, ""

    async def await_approval(self, approval_id: str) -> AwaitOutcome:
        """Wait for an approval's answer; ALLOW carries a grant, a timeout is DENY."""
        rec = await self.broker.wait(approval_id)
        if rec.state is ApprovalState.ALLOWED:
            grant = self.signer.sign(
                session_id=rec.session_id,
                call_id=rec.call.call_id,
                tool_name=rec.call.tool_name,
                arguments=rec.call.arguments,
                findings=rec.call.findings,
                settle={
                    "by": "approval",
                    "approval": rec.approval_id,
                    "resolver": rec.resolver or "unknown",
                },
            )
            return AwaitOutcome(
                Effect.ALLOW, f"approved by {rec.resolver or 'a resolver'}", rec, grant
            )
        if rec.state is ApprovalState.EXPIRED:
            return AwaitOutcome(Effect.DENY, "nobody answered the approval in time", rec)
        why = f": {rec.resolve_reason}" if rec.resolve_reason else ""
        return AwaitOutcome(Effect.DENY, f"denied by {rec.resolver or 'a resolver'}{why}", rec)

    # -- sessions -------------------------------------------------------------------------

    async def create_session(
        self, session_id: str, mode: Mode | None, task: str, caller: Caller
    ) -> SessionRecord:
        """Create a session (or return the existing one); ``mode`` None: the default.

        Any other mode than the configured default needs SetMode's rights (DEC-6 rev 2).
        """
        default = self.default_mode
        chosen = default if mode is None else mode
        if chosen is not default:
            caller.require_admin("CreateSession")
        rec, _ = await self.store.create_session(session_id or None, chosen, task=task)
        return rec

    async def get_session(self, session_id: str) -> SessionRecord:
        """The session; ``SessionNotFound`` if absent."""
        return await self.store.get_session(session_id)

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session with its rules, grants and approvals."""
        return await self.store.delete_session(session_id)

    async def set_mode(self, session_id: str, mode: Mode) -> SessionRecord:
        """Change a session's mode."""
        return await self.store.set_mode(session_id, mode)

    # -- rules ----------------------------------------------------------------------------

    async def add_rule(
        self, session_id: str, effect: Effect, pattern: str, reason: str, request_id: str
    ) -> Rule:
        """Add a session rule (idempotent by ``request_id``)."""
        return await self.store.add_rule(session_id, effect, pattern, reason, request_id)

    async def remove_rule(self, session_id: str, rule_id: str) -> bool:
        """Remove a session rule by id."""
        return await self.store.remove_rule(session_id, rule_id)

    async def list_rules(self, session_id: str, include_policy: bool) -> tuple[list[Rule], str]:
        """The policy's rules (if asked) then the session's, and the policy version."""
        policy = self.policy
        rules: list[Rule] = list(policy.rules) if include_policy else []
        if session_id:
            await self.store.get_session(session_id)
            rules += await self.store.list_rules(session_id)
        return rules, policy.version

    def lint_policy(self, policy_text: str, fmt: str) -> tuple[list[Finding], str]:
        """Rules that can never take effect, in the given policy text or (empty) the
        policy in force, and that policy's version."""
        rules: Sequence[Rule]
        if policy_text:
            doc = parse_policy_text(policy_text, fmt or "toml")
            rules, version = doc.rules, compile_policy(doc).version
        else:
            rules, version = self.policy.rules, self.policy.version
        return lint_rules(rules), version

    # -- approvals and grants -------------------------------------------------------------

    def watch_approvals(self, session_id: str) -> AsyncGenerator[ApprovalRecord, None]:
        """The pending approvals now, then every change (see ``ApprovalBroker.watch``)."""
        return self.broker.watch(session_id)

    async def resolve_approval(
        self,
        approval_id: str,
        resolution: Resolution,
        caller: Caller,
        *,
        reason: str = "",
        typed_resolver: str = "",
        scope: GrantScope | None = None,
    ) -> Resolved:
        """Answer an approval as the authenticated caller (or the person a trusted delegate
        acts for); record the answer. A name typed into the request is never the resolver:
        it is kept in the reason, marked as such."""
        resolver, via = caller.resolver("ResolveApproval")
        resolved = await self.broker.resolve(
            approval_id,
            resolution,
            resolver=resolver,
            reason=_with_note(reason, typed_resolver, resolver),
            scope=scope,
        )
        rec = resolved.approval
        if rec.state in (ApprovalState.ALLOWED, ApprovalState.DENIED):
            self._record(approval_record(rec, self.policy.version, via=via))
        return resolved

    async def list_grants(self, session_id: str) -> list[GrantRecord]:
        """A session's live "always allow" grants; ``SessionNotFound`` if absent."""
        await self.store.get_session(session_id)
        return await self.store.list_grants(session_id)

    async def revoke_grant(self, grant_id: str) -> bool:
        """Delete a grant; True if it existed."""
        return await self.store.revoke_grant(grant_id)


def _with_note(reason: str, typed: str, caller: str) -> str:
    if not typed or f"{typed}" == caller:
        return reason
    note = f"(resolver says: {typed[:200]})"
    return f"{reason} {note}".strip()
