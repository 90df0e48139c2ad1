"""The decision procedure: precedence (DEC-3), modes (DEC-4), subagents (DEC-5).

``decide`` is a pipeline of small named steps. Collecting what matched happens once;
then the precedence steps run in order and the first that settles the call wins:

    P0 policy DENY → P1 tool DENY → P2 session DENY → P3 hook Block        (DENY)
    P4 hook PermissionRequired → P5 policy/session ASK                     (ASK)
    P6 tool ASK, settled by an explicit ALLOW (P7) unless bypass-immune    (ASK/ALLOW)
    P7 explicit ALLOW → P8 implicit default                                (ALLOW)

after which the mode and the subagent rule may change ASK (and plan mode non-read-only
calls). Every other thing that matched goes into the conflict log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from stockade.contract.tools import EDIT_TOOLS, READ_ONLY_TOOLS, SEED_TOOLS, ToolTraits
from stockade.decision.explain import Explanation, explain_call
from stockade.decision.modes import Mode
from stockade.decision.rules import (
    BASH_TOOL,
    CallContent,
    CompiledRule,
    Effect,
    Rule,
    RuleIndex,
    RuleTier,
    Source,
    call_content,
)


class SignalKind(Enum):
    """What a PreToolUse hook signalled."""

    BLOCK = "block"
    PERMISSION_REQUIRED = "permission_required"


@dataclass(frozen=True)
class HookSignal:
    """A hook's Block (P3) or PermissionRequired (P4)."""

    kind: SignalKind
    hook_name: str
    message: str = ""

    def as_rule(self) -> Rule:
        """The signal as a HOOK-sourced rule, for the winner field and conflict log."""
        effect = Effect.DENY if self.kind is SignalKind.BLOCK else Effect.ASK
        return Rule(effect=effect, pattern=self.hook_name, source=Source.HOOK, reason=self.message)


@dataclass(frozen=True)
class Facts:
    """What the executor's Inspect found about the call (all optional)."""

    tool_rules: tuple[Rule, ...] = ()
    """Tool-level DENY/ASK rules for this exact call (source TOOL)."""
    sub_commands: tuple[str, ...] | None = None
    """run_bash: each simple command's text; None when no analysis is available."""
    inside_working_dir: bool | None = None
    """The call's path lies inside the working directory (acceptEdits)."""
    read_only: bool | None = None
    """The call has no side effects (plan mode); None means unknown."""
    needs_network: bool = False
    """run_bash: the command needs the network."""
    analysis_reasons: tuple[str, ...] = ()
    """run_bash: the analyser's findings."""
    explanation: Explanation | None = None
    """The executor's own explanation, preferred over one derived here."""
    findings: str = ""
    """SHA-256 of the executor findings these facts came from (the grant's ``insp``); ""
    when there was no inspection (DEC-12 rev 2)."""


@dataclass(frozen=True)
class DecisionRequest:
    """One call to decide, with everything that bears on it."""

    tool_name: str
    arguments: Mapping[str, Any]
    mode: Mode = Mode.DEFAULT
    from_subagent: bool = False
    facts: Facts = field(default_factory=Facts)
    hook_signals: tuple[HookSignal, ...] = ()
    session_rules: RuleIndex | None = None
    """The session's own rules (SESSION source, including ALWAYS_ALLOW grants)."""


class Conflict(NamedTuple):
    """A matching rule or signal the winner overrode."""

    rule: Rule
    note: str


class Decision(NamedTuple):
    """The outcome: data, never an error."""

    verdict: Effect
    reason: str
    winning_rule: Rule
    step: str
    """Which step settled it: P0..P8, ``mode`` or ``subagent``."""
    conflicts: tuple[Conflict, ...]
    policy_version: str
    explanation: Explanation
    mode: Mode
    allow_rules_used: tuple[Rule, ...] = ()
    """The ALLOW rules that made the call allowed (grants among them lose a use)."""
    classifiable: bool = False
    """auto mode: an ask no rule settled, which the classifier may turn into ALLOW or
    DENY (the verdict here is what stands without a classifier: ASK, or DENY for a
    subagent)."""


DEFAULT_RULE = Rule(Effect.ALLOW, "*", Source.DEFAULT, "no rule matched; allowed by default")
UNKNOWN_TOOL_RULE = Rule(
    Effect.ASK,
    "*",
    Source.DEFAULT,
    "unknown tool: nobody declared its traits, so no rule allows it by default",
)
"""P8 for a tool nobody declared (DEC-3 rev 2): ASK, never the implicit ALLOW."""


class _Matches:
    """Everything that matched one call, split by precedence tier."""

    __slots__ = (
        "policy_deny", "tool_deny", "session_deny", "hook_block", "hook_ask", "explicit_ask",
        "tool_ask", "allow", "allow_covers", "total",
    )  # fmt: skip

    def __init__(
        self,
        policy_deny: list[Rule],
        tool_deny: list[Rule],
        session_deny: list[Rule],
        hook_block: list[Rule],
        hook_ask: list[Rule],
        explicit_ask: list[Rule],
        tool_ask: list[Rule],
        allow: list[Rule],
        allow_covers: bool,
    ) -> None:
        self.policy_deny = policy_deny
        self.tool_deny = tool_deny
        self.session_deny = session_deny
        self.hook_block = hook_block
        self.hook_ask = hook_ask
        self.explicit_ask = explicit_ask
        self.tool_ask = tool_ask
        self.allow = allow
        self.allow_covers = allow_covers
        """True when the ALLOW rules cover the whole call (every sub-command for run_bash)."""
        self.total = (
            len(policy_deny) + len(tool_deny) + len(session_deny) + len(hook_block)
            + len(hook_ask) + len(explicit_ask) + len(tool_ask) + len(allow)
        )  # fmt: skip
        """How many rules and signals matched."""

    def tiers(self) -> list[tuple[str, list[Rule]]]:
        """(step label, rules) in precedence order."""
        return [
            ("P0", self.policy_deny),
            ("P1", self.tool_deny),
            ("P2", self.session_deny),
            ("P3", self.hook_block),
            ("P4", self.hook_ask),
            ("P5", self.explicit_ask),
            ("P6", self.tool_ask),
            ("P7", self.allow),
        ]


class _Outcome(NamedTuple):
    verdict: Effect
    winner: Rule
    step: str
    reason: str
    classifiable: bool = False
    """auto mode: the classifier may settle this outcome (see ``_auto_step``)."""


_NO_RULES = RuleTier(())
_NO_TIERS = (_NO_RULES, _NO_RULES, _NO_RULES)


def _rules(hits: list[CompiledRule]) -> list[Rule]:
    return [c.rule for c in hits] if hits else []


def _collect(
    req: DecisionRequest,
    p_deny: list[Rule],
    s_deny: list[Rule],
    ask: list[Rule],
    allow: tuple[list[Rule], bool],
) -> _Matches:
    """Every policy, session, tool and hook rule that matches the call, by tier."""
    tool_rules = req.facts.tool_rules
    hooks = req.hook_signals
    return _Matches(
        policy_deny=p_deny,
        tool_deny=[r for r in tool_rules if r.effect is Effect.DENY] if tool_rules else [],
        session_deny=s_deny,
        hook_block=[s.as_rule() for s in hooks if s.kind is SignalKind.BLOCK] if hooks else [],
        hook_ask=[s.as_rule() for s in hooks if s.kind is SignalKind.PERMISSION_REQUIRED]
        if hooks
        else [],
        explicit_ask=ask,
        tool_ask=[r for r in tool_rules if r.effect is Effect.ASK] if tool_rules else [],
        allow=allow[0],
        allow_covers=allow[1],
    )


def _allow_matches(
    policy: RuleTier, session: RuleTier, content: CallContent
) -> tuple[list[Rule], bool]:
    """ALLOW rules that match, and whether they cover the call (DEC-2 for run_bash).

    Policy ALLOW rules come before session ones (their orders restart per index).
    """
    if not (policy.rules or session.rules):
        return [], False
    if content.tool_name != BASH_TOOL or "command" not in content.fields:
        hits = _rules(policy.allowing(content))
        if session.rules:
            hits += _rules(session.allowing(content))
        return hits, bool(hits)
    # An ALLOW written for the whole command (e.g. an ALWAYS_ALLOW grant) covers it as is.
    whole = content.whole_command
    p_whole = policy.allowing_command(whole)
    s_whole = session.allowing_command(whole) if session.rules else []
    for c in p_whole:
        if c.is_literal:
            return [c.rule], True
    for c in s_whole:
        if c.is_literal:
            return [c.rule], True
    subs = content.allow_sub_commands
    if not subs or (len(subs) == 1 and subs[0] == whole and not (p_whole or s_whole)):
        return [], False  # nothing to cover, or one simple command no rule allows
    used: list[Rule] = []
    covered = True
    for sub in subs:
        # a single simple command is the whole command: already looked up
        hit = p_whole if sub == whole else policy.allowing_command(sub)
        if not hit and session.rules:
            hit = s_whole if sub == whole else session.allowing_command(sub)
        if not hit:
            covered = False
        elif hit[0].rule not in used:
            used.append(hit[0].rule)
    return used, covered and bool(used)


_DENY_WHAT = {"P0": "policy rule", "P1": "tool check", "P2": "session rule", "P3": "hook"}


def _step_deny(m: _Matches) -> _Outcome | None:
    """P0–P3: any DENY wins and can never be overridden."""
    if m.policy_deny:
        step, r = "P0", m.policy_deny[0]
    elif m.tool_deny:
        step, r = "P1", m.tool_deny[0]
    elif m.session_deny:
        step, r = "P2", m.session_deny[0]
    elif m.hook_block:
        step, r = "P3", m.hook_block[0]
    else:
        return None
    return _Outcome(Effect.DENY, r, step, r.reason or f"denied by {_DENY_WHAT[step]} {r.pattern}")


def _step_explicit_ask(m: _Matches) -> _Outcome | None:
    """P4 hook PermissionRequired, then P5 policy/session ASK: ASK even if an ALLOW matches."""
    if m.hook_ask:
        r = m.hook_ask[0]
        return _Outcome(Effect.ASK, r, "P4", _reason(r, f"hook {r.pattern} requires approval"))
    if m.explicit_ask:
        r = m.explicit_ask[0]
        return _Outcome(Effect.ASK, r, "P5", _reason(r, f"rule {r.pattern} requires approval"))
    return None


def _step_tool_ask(m: _Matches) -> _Outcome | None:
    """P6: a tool-level ASK stands unless an explicit ALLOW settles it (not if bypass-immune)."""
    if not m.tool_ask:
        return None
    immune = [r for r in m.tool_ask if r.bypass_immune]
    if immune:
        r = immune[0]
        return _Outcome(Effect.ASK, r, "P6", _reason(r, "tool check requires approval"))
    if m.allow_covers:
        return None
    r = m.tool_ask[0]
    return _Outcome(Effect.ASK, r, "P6", _reason(r, "tool check requires approval"))


def _step_allow(m: _Matches, declared: bool) -> _Outcome:
    """P7 explicit ALLOW, else P8 the implicit default: ALLOW for a declared tool, ASK for
    one nobody declared (DEC-3 rev 2)."""
    if m.allow_covers:
        r = m.allow[0]
        return _Outcome(Effect.ALLOW, r, "P7", _reason(r, f"allowed by rule {r.pattern}"))
    if not declared:
        return _Outcome(Effect.ASK, UNKNOWN_TOOL_RULE, "P8", UNKNOWN_TOOL_RULE.reason)
    return _Outcome(Effect.ALLOW, DEFAULT_RULE, "P8", DEFAULT_RULE.reason)


def _precedence(m: _Matches, declared: bool = True) -> _Outcome:
    """The steps in order (P0–P3, P4–P5, P6, then P7/P8); the first that settles wins."""
    return _step_deny(m) or _step_explicit_ask(m) or _step_tool_ask(m) or _step_allow(m, declared)


def _reason(rule: Rule, fallback: str) -> str:
    return rule.reason or fallback


def _is_read_only(req: DecisionRequest, tools: Mapping[str, ToolTraits]) -> bool:
    if req.facts.read_only is not None:
        return req.facts.read_only
    traits = tools.get(req.tool_name)
    return traits is not None and traits.read_only


def _mode_step(
    req: DecisionRequest, m: _Matches, out: _Outcome, tools: Mapping[str, ToolTraits]
) -> _Outcome:
    """DEC-4: the session's mode changes the verdict after precedence."""
    mode = req.mode
    if mode is Mode.DEFAULT and out.verdict is not Effect.ASK:
        return out  # the common case: default mode changes nothing but ASK (handled below)
    immune = any(r.bypass_immune for r in m.tool_ask) if m.tool_ask else False
    if mode is Mode.PLAN and out.verdict is not Effect.DENY and not _is_read_only(req, tools):
        return _mode_outcome(Effect.DENY, mode, f"plan mode: {req.tool_name} is not read-only")
    if out.verdict is not Effect.ASK:
        return out
    if mode is Mode.DONT_ASK:
        return _mode_outcome(Effect.DENY, mode, f"dontAsk mode: {out.reason}")
    if (
        mode is Mode.BYPASS_PERMISSIONS
        and not immune
        and not (req.from_subagent and out.winner is UNKNOWN_TOOL_RULE)
    ):
        # (A subagent's unknown tool stays ASK, which the subagent rule makes DENY.)
        return _mode_outcome(Effect.ALLOW, mode, "bypassPermissions mode settles the approval")
    if (
        mode is Mode.ACCEPT_EDITS
        and not immune
        and req.tool_name in EDIT_TOOLS
        and req.facts.inside_working_dir is True
    ):
        return _mode_outcome(
            Effect.ALLOW, mode, "acceptEdits mode: edit inside the working directory"
        )
    if mode is Mode.AUTO and not immune and out.step in CLASSIFIABLE_STEPS:
        return _auto_step(req, out)
    return out


CLASSIFIABLE_STEPS = frozenset({"P6", "P8"})
"""Asks auto mode may settle: the tool's own ask (P6) and an undeclared tool's (P8). Never
a DENY, a hook's or an explicit rule's ask (P4/P5: somebody asked for a person), nor a
bypass-immune one."""


def _auto_step(req: DecisionRequest, out: _Outcome) -> _Outcome:
    """DEC-17: fast paths without a model, else an ASK the classifier may settle.

    The engine has no model: it marks the outcome classifiable and the core asks the
    classifier. Offline (``policy check``) and when no classifier is configured, the ASK
    stands, so auto mode never allows more than its fast paths without a model.
    """
    if req.tool_name in EDIT_TOOLS and req.facts.inside_working_dir is True:
        return _mode_outcome(
            Effect.ALLOW, Mode.AUTO, "auto mode: edit inside the working directory"
        )
    if req.tool_name in READ_ONLY_TOOLS:
        return _mode_outcome(Effect.ALLOW, Mode.AUTO, f"auto mode: {req.tool_name} is read-only")
    return out._replace(classifiable=True)


def _mode_outcome(verdict: Effect, mode: Mode, reason: str) -> _Outcome:
    rule = Rule(verdict, f"mode:{mode.value}", Source.MODE, reason)
    return _Outcome(verdict, rule, "mode", reason)


def _subagent_step(req: DecisionRequest, out: _Outcome) -> _Outcome:
    """DEC-5: subagents cannot ask the user, so their ASK becomes DENY."""
    if not req.from_subagent or out.verdict is not Effect.ASK:
        return out
    reason = f"subagents cannot ask the user ({out.reason})"
    rule = Rule(Effect.DENY, "subagent", Source.MODE, reason)
    # Still classifiable: auto mode's classifier may allow or block a subagent's call;
    # only when it is unsure does this denial stand.
    return _Outcome(Effect.DENY, rule, "subagent", reason, out.classifiable)


def _conflicts(m: _Matches, final: _Outcome, precedence: _Outcome) -> tuple[Conflict, ...]:
    """Everything that matched but did not decide, with why it lost."""
    if final.winner is precedence.winner and (
        m.total == 0 or (m.total == 1 and final.step != "P8")
    ):
        return ()  # the common cases: nothing matched, or one rule matched and it decided
    out: list[Conflict] = []
    win = f"{final.verdict.name} ({final.step})"
    for step, rules in m.tiers():
        for r in rules:
            if r is final.winner:
                continue
            if step == "P7" and not m.allow_covers:
                note = f"ALLOW ({step}) did not cover every part of the call"
            elif step == "P7" and final.step == "P7":
                note = "ALLOW (P7) also matched part of the call"
            else:
                note = f"{r.effect.name} ({step}) overridden by {win}"
            out.append(Conflict(r, note))
    if final.winner is not precedence.winner and precedence.winner.source is not Source.DEFAULT:
        if all(c.rule is not precedence.winner for c in out):
            note = f"{precedence.verdict.name} ({precedence.step}) changed by {win}"
            out.append(Conflict(precedence.winner, note))
    return tuple(out)


def _explanation(req: DecisionRequest, content: CallContent) -> Explanation:
    f = req.facts
    if f.explanation is not None and f.explanation.summary:
        return f.explanation
    return explain_call(
        req.tool_name,
        req.arguments,
        sub_commands=content.sub_commands,
        read_only=f.read_only,
        needs_network=f.needs_network,
        inside_working_dir=f.inside_working_dir,
        analysis_reasons=f.analysis_reasons,
    )


@dataclass(frozen=True)
class CompiledPolicy:
    """The rules and settings of one loaded policy, compiled and versioned."""

    index: RuleIndex
    mode: Mode
    version: str
    denial_max_consecutive: int = 3
    denial_max_total: int = 20
    approval_timeout_seconds: float = 120.0
    cwd: str = "/"
    origin: str = ""
    """Where the policy came from (file path, or "environment")."""
    tools: Mapping[str, ToolTraits] = field(default_factory=lambda: dict(SEED_TOOLS))
    """The declared tools (the seed's table plus the policy's ``[tools]``): P8 allows only
    these, and their read-only trait serves plan mode (DEC-3 rev 2)."""

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The policy rules in evaluation order."""
        return self.index.rules


def decide(policy: CompiledPolicy, req: DecisionRequest) -> Decision:
    """Decide one call under ``policy``: precedence, then mode, then the subagent rule."""
    facts = req.facts
    tool = req.tool_name
    content = call_content(tool, req.arguments, cwd=policy.cwd, sub_commands=facts.sub_commands)
    p_deny, p_ask, p_allow = policy.index.tiers(tool)
    sess = req.session_rules
    s_deny, s_ask, s_allow = sess.tiers(tool) if sess is not None else _NO_TIERS
    # Each tier says which of its rules match with one pattern-set look-up per content
    # string (RuleTier): the cost does not grow with the number of rules.
    # (An empty tier is skipped here: most tools have no DENY or no ASK rule.)
    ask = p_ask.matching_rules(content) if p_ask.rules else []
    if s_ask.rules:
        ask += s_ask.matching_rules(content)
    policy_deny = p_deny.matching_rules(content) if p_deny.rules else []
    session_deny = s_deny.matching_rules(content) if s_deny.rules else []
    allow = _allow_matches(p_allow, s_allow, content)
    if not (ask or facts.tool_rules or req.hook_signals or policy_deny or session_deny):
        # Nothing but ALLOW rules applies (the common case): the full pipeline would settle
        # at P7/P8, so skip building the tiers; _decide_allow_only keeps the result exact.
        return _decide_allow_only(policy, req, content, allow)
    matches = _collect(req, policy_deny, session_deny, ask, allow)
    return _finish(policy, req, content, matches)


def _finish(
    policy: CompiledPolicy, req: DecisionRequest, content: CallContent, matches: _Matches
) -> Decision:
    """The general path: precedence, mode, subagent, conflicts over every tier."""
    precedence = _precedence(matches, req.tool_name in policy.tools)
    final = _subagent_step(req, _mode_step(req, matches, precedence, policy.tools))
    allow_used: tuple[Rule, ...] = ()
    if final.verdict is Effect.ALLOW and precedence.step == "P7":
        allow_used = tuple(matches.allow)
    return Decision(
        final.verdict,
        final.reason,
        final.winner,
        final.step,
        _conflicts(matches, final, precedence),
        policy.version,
        _explanation(req, content),
        req.mode,
        allow_used,
        final.classifiable,
    )


def _decide_allow_only(
    policy: CompiledPolicy,
    req: DecisionRequest,
    content: CallContent,
    allow_matches: tuple[list[Rule], bool],
) -> Decision:
    """``decide`` when no DENY/ASK rule matches and no tool check or hook signal came.

    Precedence then reduces to P7 (the ALLOW rules cover the call) or P8 (the default);
    neither is ASK, so only plan mode can change the verdict (the subagent rule and the
    other modes act on ASK alone). Anything beyond the trivial conflict cases falls back
    to the general path with the same matches.
    """
    allow, covers = allow_matches
    mode = req.mode
    if (
        len(allow) > 1
        or (allow and not covers)
        or (mode is Mode.PLAN and not _is_read_only(req, policy.tools))
        or (not covers and req.tool_name not in policy.tools)
    ):
        matches = _Matches([], [], [], [], [], [], [], allow, covers)
        return _finish(policy, req, content, matches)
    if covers:
        r = allow[0]
        return Decision(
            Effect.ALLOW,
            r.reason or f"allowed by rule {r.pattern}",
            r,
            "P7",
            (),
            policy.version,
            _explanation(req, content),
            mode,
            (r,),
        )
    return Decision(
        Effect.ALLOW,
        DEFAULT_RULE.reason,
        DEFAULT_RULE,
        "P8",
        (),
        policy.version,
        _explanation(req, content),
        mode,
        (),
    )
