"""Precedence (DEC-3), modes (DEC-4) and subagents (DEC-5): one table, one SPEC line per case."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.decision.engine import (
    DecisionRequest,
    Facts,
    HookSignal,
    SignalKind,
    decide,
)
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import Effect, Rule, RuleIndex, Source

D, A, L = Effect.DENY, Effect.ASK, Effect.ALLOW


def pol(*rules: tuple[Effect, str]) -> PolicyDoc:
    return PolicyDoc(rules=tuple(Rule(e, p, Source.MANAGED) for e, p in rules))


def ses(*rules: tuple[Effect, str]) -> RuleIndex:
    return RuleIndex(
        [Rule(e, p, Source.SESSION, rule_id=f"r{i}") for i, (e, p) in enumerate(rules)]
    )


def tool(effect: Effect, immune: bool = False) -> Rule:
    return Rule(effect, "run_bash", Source.TOOL, "tool check", bypass_immune=immune)


BLOCK = HookSignal(SignalKind.BLOCK, "guard", "blocked by guard")
PERM = HookSignal(SignalKind.PERMISSION_REQUIRED, "review", "needs review")


@dataclass
class Case:
    spec: str
    policy: list[tuple[Effect, str]]
    verdict: Effect
    step: str
    tool_name: str = "run_bash"
    args: dict[str, Any] = field(default_factory=lambda: {"command": "git status"})
    session: list[tuple[Effect, str]] = field(default_factory=list)
    tool_rules: tuple[Rule, ...] = ()
    hooks: tuple[HookSignal, ...] = ()
    mode: Mode = Mode.DEFAULT
    subagent: bool = False
    inside: bool | None = None
    read_only: bool | None = None
    conflicts: int | None = None


CASES = [
    Case(
        "DEC-3.1 P0: policy DENY wins over every ALLOW",
        [(D, "run_bash(git *)"), (L, "run_bash")],
        D,
        "P0",
        conflicts=1,
    ),
    Case(
        "DEC-3.1 P0 before P1: policy DENY named before a tool DENY",
        [(D, "run_bash")],
        D,
        "P0",
        tool_rules=(tool(D),),
        conflicts=1,
    ),
    Case(
        "DEC-3.1 P1: tool-level DENY beats a policy ALLOW",
        [(L, "run_bash(git status)")],
        D,
        "P1",
        tool_rules=(tool(D),),
    ),
    Case(
        "DEC-3.1 P2: session DENY beats policy ALLOW",
        [(L, "run_bash")],
        D,
        "P2",
        session=[(D, "run_bash(git *)")],
    ),
    Case(
        "DEC-3.1 P3: hook Block denies even with an ALLOW",
        [(L, "run_bash")],
        D,
        "P3",
        hooks=(BLOCK,),
    ),
    Case(
        "DEC-3.1: DENY can never be overridden, not even by bypass mode",
        [(D, "run_bash(git *)")],
        D,
        "P0",
        mode=Mode.BYPASS_PERMISSIONS,
    ),
    Case(
        "DEC-3.2 P4: hook PermissionRequired asks even if ALLOW matches",
        [(L, "run_bash")],
        A,
        "P4",
        hooks=(PERM,),
    ),
    Case(
        "DEC-3.2 P5: policy ASK asks even if ALLOW matches",
        [(A, "run_bash(git *)"), (L, "run_bash(git status)")],
        A,
        "P5",
    ),
    Case(
        "DEC-3.2 P5: session ASK asks even if policy ALLOW matches",
        [(L, "run_bash")],
        A,
        "P5",
        session=[(A, "run_bash(git)")],
    ),
    Case("DEC-3.2: P4 named before P5", [(A, "run_bash")], A, "P4", hooks=(PERM,)),
    Case("DEC-3.3 P6: tool ASK without an ALLOW asks", [], A, "P6", tool_rules=(tool(A),)),
    Case(
        "DEC-3.3 correction: explicit ALLOW (P7) settles a tool ASK (P6)",
        [(L, "run_bash(git status)")],
        L,
        "P7",
        tool_rules=(tool(A),),
        conflicts=1,
    ),
    Case(
        "DEC-3.3 correction: session ALLOW (always-allow) settles a tool ASK",
        [],
        L,
        "P7",
        session=[(L, "run_bash(git status)")],
        tool_rules=(tool(A),),
    ),
    Case(
        "DEC-3.3: bypass-immune tool ASK is not settled by ALLOW",
        [(L, "run_bash")],
        A,
        "P6",
        tool_rules=(tool(A, immune=True),),
    ),
    Case("DEC-3.4 P7: explicit ALLOW", [(L, "run_bash(git status)")], L, "P7"),
    Case("DEC-3.4 P8: nothing matched, implicit ALLOW", [(D, "read_file")], L, "P8"),
    Case(
        "DEC-3.2 vs 3.1: DENY beats an explicit ASK",
        [(A, "run_bash"), (D, "run_bash(git *)")],
        D,
        "P0",
        conflicts=1,
    ),
    # DEC-4 modes
    Case(
        "DEC-4 default: ASK stays ASK",
        [(A, "file_write")],
        A,
        "P5",
        tool_name="file_write",
        args={"file_path": "/w/a.txt"},
    ),
    Case(
        "DEC-4 acceptEdits: file_write ASK inside the working dir becomes ALLOW",
        [(A, "file_write")],
        L,
        "mode",
        tool_name="file_write",
        args={"file_path": "/w/a.txt"},
        mode=Mode.ACCEPT_EDITS,
        inside=True,
        conflicts=1,
    ),
    Case(
        "DEC-4 acceptEdits: outside the working dir stays ASK",
        [(A, "file_edit")],
        A,
        "P5",
        tool_name="file_edit",
        args={"file_path": "/etc/x"},
        mode=Mode.ACCEPT_EDITS,
        inside=False,
    ),
    Case(
        "DEC-4 acceptEdits: only edit tools",
        [(A, "run_bash")],
        A,
        "P5",
        mode=Mode.ACCEPT_EDITS,
        inside=True,
    ),
    Case(
        "DEC-4 bypassPermissions: ASK becomes ALLOW",
        [(A, "run_bash")],
        L,
        "mode",
        mode=Mode.BYPASS_PERMISSIONS,
    ),
    Case(
        "DEC-4 bypassPermissions: bypass-immune ASK stays ASK",
        [],
        A,
        "P6",
        tool_rules=(tool(A, immune=True),),
        mode=Mode.BYPASS_PERMISSIONS,
    ),
    Case(
        "DEC-4 bypassPermissions: DENY stays",
        [(D, "run_bash")],
        D,
        "P0",
        mode=Mode.BYPASS_PERMISSIONS,
    ),
    Case("DEC-4 dontAsk: ASK becomes DENY", [(A, "run_bash")], D, "mode", mode=Mode.DONT_ASK),
    Case("DEC-4 dontAsk: ALLOW stays ALLOW", [(L, "run_bash")], L, "P7", mode=Mode.DONT_ASK),
    Case(
        "DEC-4 plan: a non-read-only call is denied even if allowed",
        [(L, "run_bash")],
        D,
        "mode",
        mode=Mode.PLAN,
        read_only=False,
    ),
    Case(
        "DEC-4 plan: a read-only bash command stays allowed",
        [],
        L,
        "P8",
        mode=Mode.PLAN,
        read_only=True,
    ),
    Case(
        "DEC-4 plan: a read-only tool stays allowed",
        [],
        L,
        "P8",
        tool_name="read_file",
        args={"file_path": "/w/a"},
        mode=Mode.PLAN,
    ),
    Case(
        "DEC-4 plan: file_write is not read-only",
        [],
        D,
        "mode",
        tool_name="file_write",
        args={"file_path": "/w/a"},
        mode=Mode.PLAN,
    ),
    # DEC-5 subagents
    Case("DEC-5: a subagent's ASK becomes DENY", [(A, "run_bash")], D, "subagent", subagent=True),
    Case("DEC-5: a subagent's ALLOW stays ALLOW", [(L, "run_bash")], L, "P7", subagent=True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.spec for c in CASES])
def test_precedence_table(case: Case) -> None:
    policy = compile_policy(pol(*case.policy), cwd="/w")
    decision = decide(
        policy,
        DecisionRequest(
            tool_name=case.tool_name,
            arguments=case.args,
            mode=case.mode,
            from_subagent=case.subagent,
            facts=Facts(
                tool_rules=case.tool_rules, inside_working_dir=case.inside, read_only=case.read_only
            ),
            hook_signals=case.hooks,
            session_rules=ses(*case.session),
        ),
    )
    assert (decision.verdict, decision.step) == (case.verdict, case.step), decision.reason
    assert decision.policy_version == policy.version
    assert decision.reason
    if case.conflicts is not None:
        assert len(decision.conflicts) == case.conflicts, decision.conflicts
    # DEC-3: every decision names its winning rule, and conflicts never contain the winner.
    assert all(c.rule is not decision.winning_rule for c in decision.conflicts)


def test_conflict_log_names_every_overridden_rule() -> None:
    """DEC-3: the conflict log lists everything the winner overrode, with why."""
    policy = compile_policy(pol((D, "run_bash(git *)"), (A, "run_bash"), (L, "run_bash")))
    d = decide(
        policy,
        DecisionRequest(
            "run_bash",
            {"command": "git push"},
            hook_signals=(PERM,),
            facts=Facts(tool_rules=(tool(A),)),
        ),
    )
    assert d.winning_rule.pattern == "run_bash(git *)" and d.winning_rule.source is Source.MANAGED
    notes = {c.rule.pattern: c.note for c in d.conflicts}
    assert set(notes) == {"run_bash", "review"}
    assert "overridden by DENY (P0)" in notes["review"]
    sources = sorted(c.rule.source.value for c in d.conflicts)
    assert sources == ["hook", "managed", "managed", "tool"]


def test_mode_change_logs_the_precedence_winner() -> None:
    """DEC-4: when the mode changes the verdict, the rule it overrode is in the conflicts."""
    policy = compile_policy(pol((A, "run_bash")))
    d = decide(policy, DecisionRequest("run_bash", {"command": "ls"}, mode=Mode.DONT_ASK))
    assert d.winning_rule.source is Source.MODE
    assert [c.rule.pattern for c in d.conflicts] == ["run_bash"]
    assert "ASK (P5) overridden by DENY (mode)" == d.conflicts[0].note


@pytest.mark.parametrize(
    ("command", "subs"),
    [
        ("git status; rm -rf ~", ("git status", "rm -rf ~")),
        ("git log && curl x | sh", ("git log", "curl x", "sh")),
        ("git status $(curl evil)", ("git status", "curl evil")),
    ],
)
@pytest.mark.parametrize("with_analysis", [True, False])
def test_compound_command_is_not_allowed_by_a_prefix_rule(
    command: str, subs: tuple[str, ...], with_analysis: bool
) -> None:
    """DEC-2: run_bash(git *) must not allow a command that also runs something else."""
    policy = compile_policy(pol((L, "run_bash(git *)")))
    d = decide(
        policy,
        DecisionRequest(
            "run_bash",
            {"command": command},
            facts=Facts(tool_rules=(tool(A),), sub_commands=subs if with_analysis else None),
        ),
    )
    assert d.verdict is Effect.ASK
    assert any("did not cover" in c.note for c in d.conflicts)


def test_compound_command_with_every_part_allowed_is_allowed() -> None:
    """DEC-2: ALLOW applies when EVERY sub-command is matched by some ALLOW rule."""
    policy = compile_policy(pol((L, "run_bash(git status)"), (L, "run_bash(git log *)")))
    d = decide(
        policy,
        DecisionRequest(
            "run_bash",
            {"command": "git status && git log -n 3"},
            facts=Facts(tool_rules=(tool(A),), sub_commands=("git status", "git log -n 3")),
        ),
    )
    assert d.verdict is Effect.ALLOW and d.step == "P7"
    assert {r.pattern for r in d.allow_rules_used} == {
        "run_bash(git status)",
        "run_bash(git log *)",
    }


@pytest.mark.parametrize(
    "command",
    [
        "echo hi; rm -rf /",
        "/bin/rm -rf /",
        "env rm x",
        "FOO=1 rm x",
        "sudo rm -r x",
        "ls | rm x",
        "'r'm -rf /",
        "\\rm -rf /",
        'echo "$(rm -rf /)"',
        "ls\nrm -rf /",
        "true && `rm -rf /`",
    ],
)
def test_deny_matches_any_sub_command_with_normalised_names(command: str) -> None:
    """DEC-1/DEC-2: DENY run_bash(rm *) catches rm behind paths, env, assignments, pipes."""
    policy = compile_policy(pol((D, "run_bash(rm *)"), (L, "run_bash")))
    d = decide(policy, DecisionRequest("run_bash", {"command": command}))
    assert d.verdict is Effect.DENY, command


def test_empty_and_missing_content_never_match_an_allow_with_content() -> None:
    """A call without the content an ALLOW rule names is not allowed by it (nor crashes)."""
    policy = compile_policy(pol((L, "read_file(README.md)"), (L, "run_bash(ls)")))
    ask = Facts(tool_rules=(Rule(A, "t", Source.TOOL),))
    cases: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"file_path": ""}),
        ("read_file", {}),
        ("run_bash", {"command": ""}),
        ("run_bash", {"command": 5}),
    ]
    for tool, args in cases:
        d = decide(policy, DecisionRequest(tool, args, facts=ask))
        assert d.verdict is Effect.ASK, (tool, args)


def test_allow_does_not_look_through_sudo() -> None:
    """DEC-1: ALLOW never matches more than written: `git status` is not `sudo git status`."""
    policy = compile_policy(pol((L, "run_bash(git status)")))
    d = decide(
        policy,
        DecisionRequest(
            "run_bash", {"command": "sudo git status"}, facts=Facts(tool_rules=(tool(A),))
        ),
    )
    assert d.verdict is Effect.ASK


def test_explanation_carries_risk() -> None:
    """DEC-10: every decision carries a risk level and a sentence."""
    policy = compile_policy(pol((A, "run_bash")))
    d = decide(policy, DecisionRequest("run_bash", {"command": "rm -rf build"}))
    assert d.explanation.risk.value == "high"
    assert "rm -rf build" in d.explanation.summary


# -- property tests ---------------------------------------------------------------------

TOOLS = ["run_bash", "read_file", "file_write", "grep_files"]
CONTENTS = ["git status", "git *", "rm *", "*.env", "**/.env", "ls", "*secret*", "curl"]
patterns = st.one_of(
    st.sampled_from(["*", *TOOLS]),
    st.builds(lambda t, c: f"{t}({c})", st.sampled_from([*TOOLS, "*"]), st.sampled_from(CONTENTS)),
)
rules_st = st.lists(st.tuples(st.sampled_from([D, A, L]), patterns), max_size=6)
calls = st.one_of(
    st.builds(
        lambda c: ("run_bash", {"command": c}),
        st.sampled_from(
            [
                "git status",
                "git status; rm -rf ~",
                "ls -la",
                "curl x | sh",
                "cat .env",
                "rm secret.txt",
            ]
        ),
    ),
    st.builds(
        lambda t, p: (t, {"file_path": p}),
        st.sampled_from(["read_file", "file_write"]),
        st.sampled_from(["/w/.env", "./x/../.env", "a.py", "/etc/secret", "/w/src/a.env"]),
    ),
)
modes = st.sampled_from(list(Mode))


def _decide(
    rules: list[tuple[Effect, str]], call: tuple[str, dict[str, Any]], mode: Mode, sub: bool
) -> tuple[Effect, str]:
    d = decide(
        compile_policy(pol(*rules), cwd="/w"),
        DecisionRequest(
            call[0],
            call[1],
            mode=mode,
            from_subagent=sub,
            facts=Facts(tool_rules=(Rule(A, call[0], Source.TOOL),)),
        ),
    )
    return d.verdict, d.step


@settings(max_examples=300, deadline=None)
@given(rules_st, patterns, calls, modes, st.booleans(), st.integers(0, 6))
def test_adding_a_deny_rule_never_undoes_a_deny(
    rules: list[tuple[Effect, str]],
    extra: str,
    call: tuple[str, dict[str, Any]],
    mode: Mode,
    sub: bool,
    pos: int,
) -> None:
    """DEC-3.1: DENY can never be overridden, so adding a DENY rule keeps every DENY a DENY."""
    before, _ = _decide(rules, call, mode, sub)
    after, _ = _decide([*rules[:pos], (D, extra), *rules[pos:]], call, mode, sub)
    if before is D:
        assert after is D


@settings(max_examples=300, deadline=None)
@given(rules_st, patterns, calls, modes, st.booleans(), st.integers(0, 6))
def test_adding_an_allow_rule_never_turns_deny_into_allow(
    rules: list[tuple[Effect, str]],
    extra: str,
    call: tuple[str, dict[str, Any]],
    mode: Mode,
    sub: bool,
    pos: int,
) -> None:
    """DEC-3: an ALLOW rule cannot beat a DENY, wherever it is added.

    One deliberate exception, checked separately below: in dontAsk mode and for
    subagents an unsettled ASK is turned into DENY, and an ALLOW rule settling that ASK
    (DEC-3.3) lets the call run — that is what the allow rule is for. Denials by a rule
    or a hook (P0–P3) and plan mode's own denials of non-read-only calls are never undone.
    """
    before, step = _decide(rules, call, mode, sub)
    after, _ = _decide([*rules[:pos], (L, extra), *rules[pos:]], call, mode, sub)
    undeniable = step in ("P0", "P1", "P2", "P3") or (mode is Mode.PLAN and step == "mode")
    if before is D and undeniable:
        assert after is D
    if (
        before is D
        and mode in (Mode.DEFAULT, Mode.ACCEPT_EDITS, Mode.BYPASS_PERMISSIONS)
        and not sub
    ):
        assert after is not L


def test_allow_rule_settles_a_dont_ask_denial_of_a_tool_ask() -> None:
    """DEC-3.3 + DEC-4: in dontAsk mode an allowed command runs, an unallowed one is denied."""
    call = ("run_bash", {"command": "git status"})
    assert _decide([], call, Mode.DONT_ASK, False) == (D, "mode")
    assert _decide([(L, "run_bash(git status)")], call, Mode.DONT_ASK, False) == (L, "P7")
