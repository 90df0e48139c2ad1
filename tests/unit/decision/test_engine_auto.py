"""auto mode in the engine (DEC-17): fast paths, and which asks the classifier may settle.

The engine has no model: it marks an outcome classifiable, and without a classifier the
ask stands. These tests pin down that auto mode never settles a DENY, an explicit ask
(a hook's or a rule's), or a bypass-immune tool ask, and that its fast paths allow only
edits inside the working directory and read-only tools.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.decision.engine import Decision, DecisionRequest, Facts, HookSignal, SignalKind
from stockade.decision.engine import decide as engine_decide
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import Effect, Rule, Source

D, A, L = Effect.DENY, Effect.ASK, Effect.ALLOW


def decide(
    policy: list[tuple[Effect, str]],
    tool_name: str = "run_bash",
    args: dict[str, Any] | None = None,
    *,
    mode: Mode = Mode.AUTO,
    tool_rules: tuple[Rule, ...] = (),
    hooks: tuple[HookSignal, ...] = (),
    inside: bool | None = None,
    subagent: bool = False,
) -> Decision:
    doc = PolicyDoc(rules=tuple(Rule(e, p, Source.MANAGED) for e, p in policy))
    return engine_decide(
        compile_policy(doc, cwd="/w"),
        DecisionRequest(
            tool_name=tool_name,
            arguments=args if args is not None else {"command": "npm test"},
            mode=mode,
            from_subagent=subagent,
            facts=Facts(tool_rules=tool_rules, inside_working_dir=inside),
            hook_signals=hooks,
        ),
    )


def tool_ask(immune: bool = False, name: str = "run_bash") -> Rule:
    return Rule(A, name, Source.TOOL, "not read-only", bypass_immune=immune)


def test_tool_ask_is_left_to_the_classifier() -> None:
    d = decide([], tool_rules=(tool_ask(),))
    assert (d.verdict, d.step, d.classifiable) == (A, "P6", True)


def test_without_auto_nothing_is_classifiable() -> None:
    for mode in Mode:
        if mode is not Mode.AUTO:
            assert decide([], tool_rules=(tool_ask(),), mode=mode).classifiable is False


@pytest.mark.parametrize(
    ("policy", "tool_rules", "hooks", "verdict", "step"),
    [
        ([(D, "run_bash(npm *)")], (tool_ask(),), (), D, "P0"),
        ([], (Rule(D, "run_bash", Source.TOOL, "curl | sh"),), (), D, "P1"),
        ([], (tool_ask(),), (HookSignal(SignalKind.BLOCK, "guard", "no"),), D, "P3"),
        ([], (tool_ask(),), (HookSignal(SignalKind.PERMISSION_REQUIRED, "r", "look"),), A, "P4"),
        ([(A, "run_bash(npm *)")], (tool_ask(),), (), A, "P5"),
        ([], (tool_ask(immune=True),), (), A, "P6"),
    ],
)
def test_never_classifiable(
    policy: list[tuple[Effect, str]],
    tool_rules: tuple[Rule, ...],
    hooks: tuple[HookSignal, ...],
    verdict: Effect,
    step: str,
) -> None:
    d = decide(policy, tool_rules=tool_rules, hooks=hooks)
    assert (d.verdict, d.step, d.classifiable) == (verdict, step, False)


def test_edit_inside_the_working_directory_is_a_fast_path() -> None:
    args = {"file_path": "/w/a.txt", "content": "x"}
    rules = (tool_ask(name="file_write"),)
    inside = decide([], "file_write", args, tool_rules=rules, inside=True)
    assert (inside.verdict, inside.step, inside.classifiable) == (L, "mode", False)
    assert "auto mode" in inside.reason
    outside = decide(
        [], "file_write", {**args, "file_path": "/elsewhere/a"}, tool_rules=rules, inside=False
    )
    assert (outside.verdict, outside.classifiable) == (A, True)


def test_read_only_tool_ask_is_a_fast_path() -> None:
    d = decide([], "grep_files", {"pattern": "x"}, tool_rules=(tool_ask(name="grep_files"),))
    assert (d.verdict, d.step) == (L, "mode")


def test_subagent_denial_stays_classifiable() -> None:
    d = decide([], tool_rules=(tool_ask(),), subagent=True)
    assert (d.verdict, d.step, d.classifiable) == (D, "subagent", True)


EFFECTS = st.sampled_from([D, A, L])
PATTERNS = st.sampled_from(["run_bash", "run_bash(npm *)", "run_bash(rm *)", "*", "file_write"])
TOOL_RULES = st.lists(
    st.builds(
        Rule,
        st.sampled_from([D, A]),
        st.just("run_bash"),
        st.just(Source.TOOL),
        st.just("tool check"),
        bypass_immune=st.booleans(),
    ),
    max_size=2,
).map(tuple)


@settings(max_examples=150)
@given(
    policy=st.lists(st.tuples(EFFECTS, PATTERNS), max_size=4),
    tool_rules=TOOL_RULES,
    command=st.sampled_from(["npm test", "rm -rf build", "git status"]),
    subagent=st.booleans(),
)
def test_auto_never_allows_what_default_mode_denies_or_a_person_must_see(
    policy: list[tuple[Effect, str]], tool_rules: tuple[Rule, ...], command: str, subagent: bool
) -> None:
    args = {"command": command}
    base = decide(policy, args=args, mode=Mode.DEFAULT, tool_rules=tool_rules, subagent=subagent)
    auto = decide(policy, args=args, tool_rules=tool_rules, subagent=subagent)
    if base.verdict is D and base.step != "subagent":
        assert auto.verdict is D and not auto.classifiable
    if base.verdict is A and base.step != "P6":
        assert auto.verdict is A and not auto.classifiable
    if any(r.effect is A and r.bypass_immune for r in tool_rules):
        assert not auto.classifiable and auto.verdict is not L
    if auto.classifiable:
        assert auto.verdict in (A, D) and auto.step in ("P6", "P8", "subagent")
