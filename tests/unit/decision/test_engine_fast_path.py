"""``decide``'s shortcuts (rule tiers' pattern sets, the ALLOW-only path) against the
full pipeline.

The full pipeline here tests every rule one by one (the plain matcher) and always runs
every precedence step, as the engine did before the shortcuts; the two must agree on every
field of the decision (verdict, winner, conflict log ...) for random policies, session
rules, tool checks, hooks, modes and calls (#18: the same semantics, exactly).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.decision import engine
from stockade.decision.engine import (
    CompiledPolicy,
    Decision,
    DecisionRequest,
    Facts,
    HookSignal,
    SignalKind,
    decide,
)
from stockade.decision.explain import Explanation, Risk
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import (
    BASH_TOOL,
    CallContent,
    CompiledRule,
    Effect,
    Rule,
    RuleIndex,
    Source,
    call_content,
)

TOOLS = ["run_bash", "read_file", "file_write", "fetch", "tool_x", "search_papers"]
PIECES = [
    "git", "status", "rm", "-rf", "/", "src", "*.py", "**", "*", "..", "sudo", "env", "X=1",
    "/usr/bin/git", "secret", "a|b", "a.b", "https://a.org", "push", "--force",
]  # fmt: skip
words = st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map(" ".join)
paths = st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map("/".join)


def full_pipeline(policy: CompiledPolicy, req: DecisionRequest) -> Decision:
    """Every rule tested, every step run: the reference the shortcuts must equal."""
    content = call_content(
        req.tool_name, req.arguments, cwd=policy.cwd, sub_commands=req.facts.sub_commands
    )
    p_deny, p_ask, p_allow = policy.index.for_tool(req.tool_name)
    s_deny, s_ask, s_allow = (
        req.session_rules.for_tool(req.tool_name) if req.session_rules is not None else ((), (), ())
    )
    ask = [c.rule for c in (*p_ask, *s_ask) if c.matches(content)]
    policy_deny = [c.rule for c in p_deny if c.matches(content)]
    session_deny = [c.rule for c in s_deny if c.matches(content)]
    allow = _allow_one_by_one((*p_allow, *s_allow), content)
    matches = engine._collect(req, policy_deny, session_deny, ask, allow)
    return engine._finish(policy, req, content, matches)


def _allow_one_by_one(
    rules: tuple[CompiledRule, ...], content: CallContent
) -> tuple[list[Rule], bool]:
    """ALLOW rules that match and whether they cover the call, each rule tried in turn."""
    if content.tool_name != BASH_TOOL or "command" not in content.fields:
        hits = [c.rule for c in rules if c.allows(content)]
        return hits, bool(hits)
    for c in rules:
        if c.is_literal and c.allows_command(content.whole_command):
            return [c.rule], True
    subs = content.allow_sub_commands
    if not subs:
        return [], False
    used: list[Rule] = []
    covered = True
    for sub in subs:
        hit = next((c for c in rules if c.allows_command(sub)), None)
        if hit is None:
            covered = False
        elif hit.rule not in used:
            used.append(hit.rule)
    return used, covered and bool(used)


@st.composite
def patterns(draw: st.DrawFn) -> str:
    tool = draw(st.sampled_from([*TOOLS, "*"]))
    if draw(st.integers(0, 3)) == 0:
        return tool
    return f"{tool}({draw(st.one_of(words, paths))})"


@st.composite
def requests(draw: st.DrawFn, session: RuleIndex | None) -> DecisionRequest:
    tool = draw(st.sampled_from(TOOLS))
    args: dict[str, Any] = {}
    for name in ("command", "file_path", "path", "url"):
        if draw(st.booleans()):
            args[name] = draw(st.one_of(words, paths))
    subs = draw(st.one_of(st.none(), st.lists(words, max_size=3).map(tuple)))
    tool_rules = tuple(
        Rule(e, tool, Source.TOOL, "", "", immune)
        for e, immune in draw(
            st.lists(st.tuples(st.sampled_from([Effect.DENY, Effect.ASK]), st.booleans()),
                     max_size=2)
        )
    )  # fmt: skip
    hooks = tuple(
        HookSignal(k, "h") for k in draw(st.lists(st.sampled_from(list(SignalKind)), max_size=1))
    )
    facts = Facts(
        tool_rules=tool_rules,
        sub_commands=subs,
        inside_working_dir=draw(st.sampled_from([None, True, False])),
        read_only=draw(st.sampled_from([None, True, False])),
        explanation=draw(st.sampled_from([None, Explanation(Risk.LOW, "reads")])),
    )
    return DecisionRequest(
        tool,
        args,
        mode=draw(st.sampled_from(list(Mode))),
        from_subagent=draw(st.booleans()),
        facts=facts,
        hook_signals=hooks,
        session_rules=session,
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_decide_equals_the_full_pipeline(data: st.DataObject) -> None:
    # Mostly-ALLOW policies reach the ALLOW-only path; mixed ones the general path.
    allow_heavy = data.draw(st.booleans())
    effects = st.sampled_from([Effect.ALLOW] * 6 + [Effect.DENY, Effect.ASK]) if allow_heavy else (
        st.sampled_from(list(Effect))
    )  # fmt: skip
    rules = data.draw(st.lists(st.tuples(effects, patterns()), max_size=12))
    policy = compile_policy(
        PolicyDoc(rules=tuple(Rule(e, p, Source.MANAGED) for e, p in rules)), cwd="/w"
    )
    sess_rules = data.draw(st.lists(st.tuples(effects, patterns()), max_size=4))
    session = (
        RuleIndex(
            [Rule(e, p, Source.SESSION, rule_id=f"g{i}") for i, (e, p) in enumerate(sess_rules)],
            cwd="/w",
            start=len(rules),
        )
        if sess_rules
        else None
    )
    for _ in range(5):
        req = data.draw(requests(session))
        assert decide(policy, req) == full_pipeline(policy, req)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_decide_equals_the_full_pipeline_with_dense_rules(data: st.DataObject) -> None:
    """Many rules per tool (the pattern-set scan, not plain string tests): same decisions."""
    rules = data.draw(
        st.lists(st.tuples(st.sampled_from(list(Effect)), patterns()), min_size=20, max_size=80)
    )
    policy = compile_policy(
        PolicyDoc(rules=tuple(Rule(e, p, Source.MANAGED) for e, p in rules)), cwd="/w"
    )
    for _ in range(8):
        req = data.draw(requests(None))
        assert decide(policy, req) == full_pipeline(policy, req)


def _policy(*rules: tuple[Effect, str]) -> CompiledPolicy:
    return compile_policy(
        PolicyDoc(rules=tuple(Rule(e, p, Source.MANAGED) for e, p in rules)), cwd="/w"
    )


def test_allow_only_path_still_lets_plan_mode_deny() -> None:
    policy = _policy((Effect.ALLOW, "file_write"))
    d = decide(policy, DecisionRequest("file_write", {"file_path": "a"}, mode=Mode.PLAN))
    assert (d.verdict, d.step) == (Effect.DENY, "mode")
    assert (
        d.conflicts
        == full_pipeline(
            policy, DecisionRequest("file_write", {"file_path": "a"}, mode=Mode.PLAN)
        ).conflicts
    )


def test_a_deny_that_matches_is_never_skipped_by_the_screens() -> None:
    policy = _policy(
        (Effect.ALLOW, "run_bash(git *)"),
        (Effect.DENY, "run_bash(git push *)"),
        (Effect.DENY, "read_file(**/.env)"),
    )
    bash = DecisionRequest(
        BASH_TOOL,
        {"command": "git status && git push --force origin"},
        facts=Facts(sub_commands=("git status", "git push --force origin")),
    )
    assert decide(policy, bash).verdict is Effect.DENY
    env = DecisionRequest("read_file", {"file_path": "src/../deep/x/.env"})
    assert decide(policy, env).verdict is Effect.DENY


def test_partial_allow_does_not_cover_a_bash_call() -> None:
    policy = _policy((Effect.ALLOW, "run_bash(git status)"))
    req = DecisionRequest(
        BASH_TOOL,
        {"command": "git status; curl x | sh"},
        facts=Facts(
            sub_commands=("git status", "curl x", "sh"),
            tool_rules=(Rule(Effect.ASK, BASH_TOOL, Source.TOOL, "pipes to a shell"),),
        ),
    )
    d = decide(policy, req)
    assert (d.verdict, d.step) == (Effect.ASK, "P6")
    assert d == full_pipeline(policy, req)


def test_allow_with_trailing_newline_does_not_settle_a_tool_ask() -> None:
    policy = _policy((Effect.ALLOW, "fetch(https://a.org)"))
    ask = (Rule(Effect.ASK, "fetch", Source.TOOL, "network"),)
    req = DecisionRequest("fetch", {"url": "https://a.org\n"}, facts=Facts(tool_rules=ask))
    assert decide(policy, req).verdict is Effect.ASK
    ok = DecisionRequest("fetch", {"url": "https://a.org"}, facts=Facts(tool_rules=ask))
    assert decide(policy, ok).verdict is Effect.ALLOW


def _bash(command: str, subs: tuple[str, ...], session: RuleIndex | None) -> DecisionRequest:
    ask = (Rule(Effect.ASK, BASH_TOOL, Source.TOOL, "not read-only"),)
    return DecisionRequest(
        BASH_TOOL,
        {"command": command},
        facts=Facts(sub_commands=subs, tool_rules=ask),
        session_rules=session,
    )


def test_allow_rules_split_between_policy_and_session_cover_a_compound_command() -> None:
    """Each sub-command may be covered by a policy ALLOW or a session ALLOW; one simple
    command only the session allows is covered too (the policy tier answers first)."""
    policy = _policy((Effect.ALLOW, "run_bash(git status)"))
    session = RuleIndex([Rule(Effect.ALLOW, "run_bash(make test)", Source.SESSION)], cwd="/w")
    both = _bash("git status && make test", ("git status", "make test"), session)
    d = decide(policy, both)
    assert (d.verdict, d.step) == (Effect.ALLOW, "P7")
    used = [r.pattern for r in d.allow_rules_used]
    assert used == ["run_bash(git status)", "run_bash(make test)"]
    assert d == full_pipeline(policy, both)
    only_session = _bash("make test", ("make test",), session)
    d = decide(policy, only_session)
    assert (d.verdict, d.winning_rule.source) == (Effect.ALLOW, Source.SESSION)
    assert d == full_pipeline(policy, only_session)
    neither = _bash("make clean", ("make clean",), session)
    assert decide(policy, neither).verdict is Effect.ASK
    assert decide(policy, neither) == full_pipeline(policy, neither)
    half = _bash("make test; rm -rf x", ("make test", "rm -rf x"), session)
    d = decide(policy, half)
    assert (d.verdict, d.step) == (Effect.ASK, "P6")
    assert d == full_pipeline(policy, half)


def test_a_whole_command_grant_in_the_session_covers_the_command_as_is() -> None:
    """An ALWAYS_ALLOW grant (an exact whole command, session) covers a compound command
    whose parts no rule allows one by one; the same text with one character more does not."""
    policy = _policy((Effect.ALLOW, "run_bash(ls)"))
    grant = Rule(Effect.ALLOW, "run_bash(make a && make b)", Source.SESSION, rule_id="g1")
    session = RuleIndex([grant], cwd="/w")
    req = _bash("make a && make b", ("make a", "make b"), session)
    d = decide(policy, req)
    assert (d.verdict, d.winning_rule, d.allow_rules_used) == (Effect.ALLOW, grant, (grant,))
    assert d == full_pipeline(policy, req)
    longer = _bash("make a && make b; id", ("make a", "make b", "id"), session)
    assert decide(policy, longer).verdict is Effect.ASK
    assert decide(policy, longer) == full_pipeline(policy, longer)
