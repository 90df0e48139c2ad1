"""Matching is linear in the input whatever the patterns, and the input is bounded (#18,
#12 item 6).

No timing here (benchmarks live in tests/bench: PERF-1c-linear shows a 10x longer input
costing about 10x). Instead: every pattern set hands Python's backtracking ``re`` only
patterns of a shape it matches in linear time, and the rest to RE2 (automata: linear by
construction); the adversarial rules that stalled the service are shown to take the RE2
path, and still decide correctly on inputs at the size limit. Every engine (dictionary,
small regex, anchors + confirmation) is compared with the plain regex. Past the limit a
call is refused with INVALID_ARGUMENT naming it, in-process and over gRPC.
"""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.contract.shell import MAX_COMMAND_CHARS
from stockade.decision.engine import DecisionRequest, Facts, decide
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import (
    MAX_CONTENT_CHARS,
    Effect,
    Rule,
    RuleIndex,
    Source,
    call_content,
    compile_rule,
)
from stockade.decision.rules.patternset import ANY, DIRS, SEGMENT, PatternSet, Spec, backtrack_free
from stockade.errors import InvalidArgument
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from tests.integration.test_decision_service import call, decision_server

ADVERSARIAL = [
    "run_bash(*rm*-rf*)",
    "run_bash(*a*a*a*a*a*b*)",
    "read_file(**/a/**/a/**/a/**/b)",
    "read_file(*a*a*a*a*b)",
    "*(*x*y*z*x*y*z*)",
    "read_file(*mid*)",  # quadratic in plain re; the last component, with an atomic group
    "read_file(**/x*y*z)",
]


def _specs(pattern: str, effect: Effect = Effect.DENY) -> list[Spec]:
    c = compile_rule(Rule(effect, pattern, Source.MANAGED), 0, cwd="/w")
    return [c.text_matcher.spec, c.path_matcher.spec, c.command_matcher.spec]


@pytest.mark.parametrize("pattern", ADVERSARIAL)
def test_adversarial_patterns_are_never_given_to_a_backtracking_matcher(pattern: str) -> None:
    specs = _specs(pattern)
    # Alone (the small-set path) and among many (the automaton path).
    for spec in specs:
        alone = PatternSet([spec])
        assert alone.engine != "python-re" or backtrack_free(spec), spec
        crowd = PatternSet([spec] + [Spec(("x", ANY, f"pad{i}", ANY), True) for i in range(9)])
        assert crowd.engine == "automaton"
        how = crowd.confirmers()[0]
        assert how == "re2" or (how == "python-re" and backtrack_free(spec)), (spec, how)


def test_the_rule_that_stalled_the_service_is_confirmed_by_re2() -> None:
    """`run_bash(*rm*-rf*)` against a 144 KB command took 5.3 s with Python's re."""
    index = RuleIndex([Rule(Effect.DENY, "run_bash(*rm*-rf*)", Source.MANAGED)], cwd="/w")
    deny = index.tiers("run_bash")[0]
    sets = deny.pattern_sets
    assert all(s.engine == "automaton" for s in sets)
    assert all(set(s.confirmers().values()) == {"re2"} for s in sets)


pieces = st.lists(
    st.one_of(st.sampled_from([ANY, SEGMENT, DIRS]), st.sampled_from(["a", "/", "rm", "-rf"])),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(specs=st.lists(st.tuples(pieces, st.booleans()), min_size=1, max_size=12))
def test_python_re_only_ever_sees_backtrack_free_patterns(
    specs: list[tuple[list[object], bool]],
) -> None:
    built = []
    for ps_, whole in specs:
        # A substring (not whole) is a literal by construction.
        if not whole and not all(isinstance(p, str) for p in ps_):
            whole = True
        built.append(Spec(tuple(ps_), whole))  # type: ignore[arg-type]
    ps = PatternSet(built)
    if ps.engine == "python-re":
        assert all(backtrack_free(s) for s in built)
        assert len(built) <= PatternSet.SMALL


@pytest.mark.parametrize(
    ("pieces_", "free"),
    [
        (("git ", ANY), True),
        ((ANY, ".pem"), True),
        ((ANY, "rm", ANY), True),
        ((DIRS, "secrets/5/", ANY), True),
        (("/w/src/", SEGMENT, ".py"), True),
        ((ANY, "rm", ANY, "-rf", ANY), False),
        ((DIRS, SEGMENT, "mid", SEGMENT), True),  # the last component: `*mid*`
        ((DIRS, SEGMENT, ".pem"), True),
        ((DIRS, SEGMENT, "a", SEGMENT, "b"), False),
        ((DIRS, SEGMENT, "a/", SEGMENT), False),
        ((ANY, "a", SEGMENT), False),  # each `a` scans to the next "/"
        ((SEGMENT, "a", SEGMENT), False),
        ((SEGMENT, "a", ANY), True),
        ((DIRS, "a/", DIRS, "b"), False),
        ((ANY, "a", ANY, "b"), False),
    ],
)
def test_backtrack_free_shapes(pieces_: tuple[object, ...], free: bool) -> None:
    assert backtrack_free(Spec(pieces_, True)) is free  # type: ignore[arg-type]


def test_adversarial_rules_decide_correctly_at_the_size_limit() -> None:
    policy = compile_policy(
        PolicyDoc(rules=tuple(Rule(Effect.DENY, p, Source.MANAGED) for p in ADVERSARIAL)),
        cwd="/w",
    )
    unit = "rm a "
    miss = (unit * (MAX_COMMAND_CHARS // len(unit) + 1))[:MAX_COMMAND_CHARS]
    hit = miss[: MAX_COMMAND_CHARS - 4] + "-rf "
    for cmd, verdict in ((miss, Effect.ALLOW), (hit, Effect.DENY)):
        req = DecisionRequest("run_bash", {"command": cmd}, facts=Facts(sub_commands=(cmd,)))
        assert decide(policy, req).verdict is verdict
    deep = "/" + ("a/" * (MAX_CONTENT_CHARS // 2))[: MAX_CONTENT_CHARS - 3]
    assert decide(policy, DecisionRequest("read_file", {"file_path": deep})).verdict is (
        Effect.ALLOW
    )
    assert decide(policy, DecisionRequest("read_file", {"file_path": deep + "b"})).verdict is (
        Effect.DENY
    )


@pytest.mark.parametrize("name", ["command", "file_path", "path", "pattern", "url"])
def test_content_over_the_command_cap_is_refused_naming_the_limit(name: str) -> None:
    ok = {name: "x" * MAX_CONTENT_CHARS}
    call_content("run_bash", ok, cwd="/w")
    with pytest.raises(InvalidArgument) as err:
        call_content("run_bash", {name: "x" * (MAX_CONTENT_CHARS + 1)}, cwd="/w")
    assert err.value.metadata == {"field": f"arguments.{name}", "limit": str(MAX_CONTENT_CHARS)}
    assert str(MAX_CONTENT_CHARS) in err.value.message
    assert MAX_CONTENT_CHARS == MAX_COMMAND_CHARS == 65_536


def test_forged_sub_commands_are_bounded_too() -> None:
    subs = ["x" * MAX_CONTENT_CHARS] * 5
    with pytest.raises(InvalidArgument) as err:
        call_content("run_bash", {"command": "x"}, cwd="/w", sub_commands=subs)
    assert err.value.metadata["field"] == "inspection.sub_commands"


async def test_decide_over_grpc_refuses_a_command_over_the_cap(tmp_path: Path) -> None:
    async with decision_server(tmp_path) as stub:
        long = "echo " + "a" * MAX_COMMAND_CHARS
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Decide(d_pb2.DecideRequest(call=call("run_bash", command=long)))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert str(MAX_COMMAND_CHARS) in (err.value.details() or "")
        # The service goes on deciding ordinary calls.
        ok = await stub.Decide(d_pb2.DecideRequest(call=call("run_bash", command="git status")))
        assert ok.verdict in (c_pb2.VERDICT_ALLOW, c_pb2.VERDICT_ASK)


texts = st.lists(st.sampled_from(["a", "/", "rm", "-rf", "x", "\n", "é"]), max_size=12).map("".join)


def _reference(spec: Spec, text: str) -> bool:
    """The plain backtracking regex of one spec (no atomic group): the meaning."""
    regex = "".join(re.escape(p) if isinstance(p, str) else p.regex for p in spec.pieces)
    if spec.whole:
        return re.fullmatch(regex, text, re.DOTALL) is not None
    return re.search(regex, text, re.DOTALL) is not None


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(st.tuples(pieces, st.booleans()), min_size=1, max_size=PatternSet.SMALL),
    samples=st.lists(texts, min_size=1, max_size=6),
)
def test_every_engine_answers_like_the_plain_regex(
    specs: list[tuple[list[object], bool]], samples: list[str]
) -> None:
    """The same specs through the small-set path (python-re or exact) and through the
    automaton (padded past SMALL) name exactly the specs the plain regex matches; a set's
    ``screen`` (what the tiers ask first) is falsy only when nothing matches."""
    built = [
        Spec(tuple(p), w or not all(isinstance(x, str) for x in p))  # type: ignore[arg-type]
        for p, w in specs
    ]
    small = PatternSet(built)
    padded = PatternSet(built + [Spec((ANY, "\x00never\x00", ANY), True)] * 9)
    assert padded.engine == "automaton"
    for text in samples:
        want = sorted(i for i, sp in enumerate(built) if _reference(sp, text))
        assert sorted(small.search(text)) == want, (built, text)
        assert sorted(i for i in padded.search(text) if i < len(built)) == want, (built, text)
        for ps in (small, padded):
            if ps.screen is not None and not ps.screen(text):
                assert not ps.search(text), (ps.engine, built, text)
    # Only the automaton has no C-level screen (its candidates need Python to confirm).
    assert (small.screen is None) == (small.engine == "automaton")
