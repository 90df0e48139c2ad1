"""The Decide handler's conversions: Struct arguments to a dict, rules to messages (cached)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.decision.convert import _rule_pb_cached, rule_to_pb, struct_to_dict
from stockade.decision.engine import DEFAULT_RULE
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
