"""The Decide handler's conversions: Struct arguments to a dict, rules to messages (cached),
the whole response (built in one constructor call, equal to the message-by-message mapping)."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.contract.grant import argument_digest
from stockade.decision.convert import (
    MODE_TO_PB,
    RISK_TO_PB,
    VERDICT_TO_PB,
    _rule_pb_cached,
    decide_response,
    grant_to_pb,
    rule_to_pb,
    struct_to_dict,
)
from stockade.decision.core import CallInput, Outcome
from stockade.decision.engine import (
    DEFAULT_RULE,
    Conflict,
    Decision,
    DecisionRequest,
    decide,
)
from stockade.decision.explain import Explanation, Risk
from stockade.decision.grants import SignedGrant
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.records import decision_record
from stockade.decision.rules import Effect, Rule, Source
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.text(max_size=8), st.floats(-1e6, 1e6, allow_nan=False)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(value=st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_struct_to_dict_equals_message_to_dict(value: dict[str, Any]) -> None:
    s = struct_pb2.Struct()
    s.update(value)
    want = json_format.MessageToDict(s)
    got = struct_to_dict(s)
    assert got == want
    assert list(got) == list(want)


def test_rule_messages_are_cached_per_object_and_never_shared_mutably() -> None:
    first = _rule_pb_cached(DEFAULT_RULE)
    assert _rule_pb_cached(DEFAULT_RULE) is first
    resp = d_pb2.DecideResponse(winning_rule=first)
    resp.winning_rule.pattern = "tampered"  # the response holds a copy
    assert _rule_pb_cached(DEFAULT_RULE).pattern == "*"


def test_equal_rules_that_are_different_objects_get_their_own_message() -> None:
    a = Rule(Effect.DENY, "fetch(x)", Source.MANAGED, "r1")
    b = Rule(Effect.DENY, "fetch(x)", Source.MANAGED, "r2")
    assert _rule_pb_cached(a).reason == "r1"
    assert _rule_pb_cached(b).reason == "r2"
    assert _rule_pb_cached(a) == rule_to_pb(a)


def test_per_call_rules_are_converted_but_not_kept() -> None:
    mode_rule = Rule(Effect.DENY, "mode:plan", Source.MODE, "plan mode")
    msg = _rule_pb_cached(mode_rule)
    assert msg.source == c_pb2.RULE_SOURCE_MODE
    assert _rule_pb_cached(mode_rule) is not msg


def _response_built_message_by_message(outcome: Outcome) -> d_pb2.DecideResponse:
    """The DecideResponse as the plain mapping builds it: every sub-message made and copied
    in, every field given (the reference ``decide_response`` must equal)."""
    d, g = outcome.decision, outcome.grant
    return d_pb2.DecideResponse(
        verdict=VERDICT_TO_PB[d.verdict],
        reason=d.reason,
        winning_rule=rule_to_pb(d.winning_rule),
        conflicts=[d_pb2.Conflict(rule=rule_to_pb(c.rule), note=c.note) for c in d.conflicts],
        policy_version=d.policy_version,
        explanation=c_pb2.Explanation(
            risk=RISK_TO_PB[d.explanation.risk], summary=d.explanation.summary
        ),
        mode=MODE_TO_PB[d.mode],
        grant=grant_to_pb(g),
        approval_id=outcome.approval_id,
        halt=outcome.halt,
        halt_reason=outcome.halt_reason,
        always_allow_applies=outcome.always_allow_applies,
    )


_texts = st.text(max_size=12)
_rules = st.builds(
    Rule,
    st.sampled_from(list(Effect)),
    _texts,
    st.sampled_from(list(Source)),
    _texts,
    _texts,
    st.booleans(),
)
_grants = st.builds(
    SignedGrant,
    st.binary(max_size=40),
    st.binary(max_size=64),
    _texts,
    # Up to the year 2100 with sub-microsecond parts: the Timestamp's split must match.
    st.floats(0, 4.1e9, allow_nan=False),
)
_outcomes = st.builds(
    Outcome,
    st.builds(
        Decision,
        st.sampled_from(list(Effect)),
        _texts,
        _rules,
        st.sampled_from(["P0", "P5", "P7", "P8", "mode"]),
        st.lists(st.builds(Conflict, _rules, _texts), max_size=3).map(tuple),
        _texts,
        st.builds(Explanation, st.sampled_from(list(Risk)), _texts),
        st.sampled_from(list(Mode)),
    ),
    st.booleans(),
    _texts,
    st.none() | _grants,
    _texts,
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(outcome=_outcomes)
def test_decide_response_equals_the_message_by_message_mapping(outcome: Outcome) -> None:
    got = decide_response(outcome)
    want = _response_built_message_by_message(outcome)
    assert got == want
    assert got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)
    assert got.HasField("grant") is (outcome.grant is not None)


def test_decide_response_timestamp_splits_like_from_nanoseconds() -> None:
    key = SignedGrant(b"p", b"s", "k", 1796182581.054)
    outcome = Outcome(decide(compile_policy(PolicyDoc()), DecisionRequest("t", {})), grant=key)
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(key.expires_at * 1e9))
    assert decide_response(outcome).grant.expires_at == ts


@settings(max_examples=200, deadline=None)
@given(outcome=_outcomes)
def test_the_audit_record_holds_the_decision_the_caller_receives(outcome: Outcome) -> None:
    call = CallInput("s1", "c1", "read_file", {"file_path": "/w/a"}, agent_name="")
    settle = {"by": "rule", "rule": "read_file", "source": "managed"}
    event = decision_record(call=call, outcome=outcome, settle=settle)
    response = decide_response(outcome)
    assert event.verdict == response.verdict
    assert event.winning_rule == response.winning_rule
    assert list(event.conflicts) == list(response.conflicts)
    assert event.decision_reason == response.reason
    assert event.policy_version == response.policy_version
    assert (event.session_id, event.call_id, event.agent_name) == ("s1", "c1", "lead")
    summary = json.loads(event.output_preview)
    assert summary["by"] == "rule"
    assert summary["args_sha256"] == argument_digest(call.arguments)[:16]
    assert summary.get("approval", "") == outcome.approval_id
    assert event.event_id.startswith("decision-") and event.time.seconds > 0


def test_the_record_of_an_allow_names_the_digest_its_grant_binds() -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from stockade.decision.grants import GrantSigner

    args = {"command": "git status", "flag": True}
    grant = GrantSigner(Ed25519PrivateKey.generate()).sign(
        session_id="s1", call_id="c1", tool_name="run_bash", arguments=args
    )
    assert grant.args_digest == json.loads(grant.payload)["args"] == argument_digest(args)
    decision = decide(compile_policy(PolicyDoc()), DecisionRequest("run_bash", args))
    call = CallInput("s1", "c1", "run_bash", args)
    event = decision_record(call=call, outcome=Outcome(decision, grant=grant), settle=None)
    assert json.loads(event.output_preview)["args_sha256"] == argument_digest(args)[:16]
