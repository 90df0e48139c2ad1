"""Protobuf <-> core mapping: every field survives a round trip; unknown enums refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.audit.convert import (
    MAX_RESPONSE_BYTES,
    _finite,
    event_to_proto,
    filters_from_proto,
    query_response,
    record_to_proto,
    row_from_proto,
    struct_to_plain,
)
from stockade.audit.model import CanonicalJson, QueryFilters, StoredRow
from stockade.audit.paging import decode_token
from stockade.audit.validate import normalise_batch
from stockade.contract.audit_bounds import is_cut
from stockade.errors import InvalidArgument
from stockade.v1 import agent_service_pb2 as ag_pb2
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

from .conftest import BASE_NS, EventFactory


def _typed_event() -> a_pb2.AuditEvent:
    """An event as today's producers send it: the decision typed."""
    event = a_pb2.AuditEvent(
        event_id="e1",
        session_id="s",
        tool_name="run_bash",
        status=a_pb2.AUDIT_STATUS_DENIED,
        verdict=common_pb2.VERDICT_DENY,
        policy_version="v9",
        decision_reason="rm is denied by policy",
        winning_rule=common_pb2.Rule(
            effect=common_pb2.RULE_EFFECT_DENY,
            pattern="run_bash(rm *)",
            source=common_pb2.RULE_SOURCE_MANAGED,
            reason="no deletions",
            rule_id="deny-rm",
            bypass_immune=True,
        ),
        conflicts=[
            d_pb2.Conflict(
                rule=common_pb2.Rule(
                    effect=common_pb2.RULE_EFFECT_ALLOW,
                    pattern="run_bash(*)",
                    source=common_pb2.RULE_SOURCE_SESSION,
                ),
                note="DENY (P0) wins over ALLOW",
            ),
            d_pb2.Conflict(
                rule=common_pb2.Rule(effect=common_pb2.RULE_EFFECT_ASK, source=5),
                note="tool ask",
            ),
        ],
    )
    event.arguments.update(
        {"command": "rm -rf /tmp/x", "n": 5, "ratio": 0.5, "deep": {"l": [1, "é", None, True]}}
    )
    event.time.FromNanoseconds(BASE_NS + 123)
    return event


def test_a_typed_event_is_stored_as_strings_and_read_back_typed() -> None:
    sent = _typed_event()
    row = row_from_proto(a_pb2.AuditEvent.FromString(sent.SerializeToString()))
    # The storage boundary: strings, the pattern and source kept for queries and old readers.
    assert (row.matched_rule, row.rule_source, row.status, row.verdict) == (
        "run_bash(rm *)",
        "MANAGED",
        "DENIED",
        "DENY",
    )
    assert row.arguments_json == (
        '{"command":"rm -rf /tmp/x","deep":{"l":[1,"\\u00e9",null,true]},"n":5,"ratio":0.5}'
    )
    assert json.loads(row.conflict_log)[0] == {
        "pattern": "run_bash(*)",
        "effect": "RULE_EFFECT_ALLOW",
        "source": "RULE_SOURCE_SESSION",
        "note": "DENY (P0) wins over ALLOW",
    }
    back = event_to_proto(row)
    assert back.winning_rule == sent.winning_rule
    assert list(back.conflicts) == list(sent.conflicts)
    assert back.arguments == sent.arguments
    assert back.decision_reason == sent.decision_reason
    assert back.time == sent.time
    # Readers that predate the typed fields still find the strings.
    assert (back.matched_rule, back.rule_source) == (
        "run_bash(rm *)",
        common_pb2.RULE_SOURCE_MANAGED,
    )
    assert back.arguments_json == row.arguments_json and back.conflict_log == row.conflict_log
    # A stored row read and sent again is stored the same.
    assert row_from_proto(back) == row


def test_a_session_stop_carries_its_termination_as_an_enum() -> None:
    event = a_pb2.AuditEvent(
        event_id="e", session_id="s", tool_name="session",
        status=a_pb2.AUDIT_STATUS_SESSION_STOP, termination=ag_pb2.TERMINATION_REASON_DENIAL_HALT,
    )  # fmt: skip
    row = row_from_proto(event)
    assert row.termination_reason == "DENIAL_HALT"
    back = event_to_proto(row)
    assert back.termination == ag_pb2.TERMINATION_REASON_DENIAL_HALT
    assert back.termination_reason == "DENIAL_HALT"


def test_typed_fields_win_over_the_deprecated_strings() -> None:
    event = _typed_event()
    event.matched_rule = "forged(*)"
    event.rule_source = common_pb2.RULE_SOURCE_DEFAULT
    event.conflict_log = "[]"
    event.arguments_json = '{"command":"ls"}'
    event.termination_reason = "COMPLETED"
    event.termination = ag_pb2.TERMINATION_REASON_ERROR
    row = row_from_proto(event)
    assert (row.matched_rule, row.rule_source) == ("run_bash(rm *)", "MANAGED")
    assert "rm -rf" in row.arguments_json and "wins over" in row.conflict_log
    assert row.termination_reason == "ERROR"


@pytest.mark.parametrize(
    ("conflict_log", "effect", "source"),
    [
        # The agent's spelling before the field was typed.
        (
            '[{"pattern": "run_bash(*)", "effect": "RULE_EFFECT_ALLOW",'
            ' "source": "RULE_SOURCE_SESSION", "note": "n"}]',
            common_pb2.RULE_EFFECT_ALLOW,
            common_pb2.RULE_SOURCE_SESSION,
        ),
        # The decision service's spelling before the field was typed.
        (
            '[{"pattern": "run_bash(*)", "effect": "allow", "source": "session", "note": "n"}]',
            common_pb2.RULE_EFFECT_ALLOW,
            common_pb2.RULE_SOURCE_SESSION,
        ),
    ],
)
def test_rows_of_older_producers_read_back_typed(
    make_event: EventFactory, conflict_log: str, effect: int, source: int
) -> None:
    """A row stored from the deprecated strings (older agents and decision services)."""
    row = make_event(
        3,
        rule_source="SESSION",
        matched_rule="read_file(*)",
        conflict_log=conflict_log,
        termination_reason="",
        arguments_json='{"path": "a.txt", "n": 2}',
    )
    message = event_to_proto(row)
    assert message.winning_rule == common_pb2.Rule(
        pattern="read_file(*)", source=common_pb2.RULE_SOURCE_SESSION
    )
    [conflict] = message.conflicts
    assert (conflict.rule.pattern, conflict.rule.effect, conflict.rule.source, conflict.note) == (
        "run_bash(*)",
        effect,
        source,
        "n",
    )
    assert dict(message.arguments) == {"path": "a.txt", "n": 2}
    # The strings come back exactly as stored, and an old row sent again stays the same.
    assert (message.conflict_log, message.arguments_json) == (conflict_log, row.arguments_json)
    legacy = a_pb2.AuditEvent()
    legacy.CopyFrom(message)
    for field in ("winning_rule", "conflicts", "arguments", "termination"):
        legacy.ClearField(field)
    assert row_from_proto(legacy) == row


@pytest.mark.parametrize(
    "text",
    [
        '{"$stockade_cut": {"reason": "longer than 65536 characters"}, "head": "{"}',
        "not json",
        "[1, 2]",
        '"a string"',
    ],
)
def test_stored_text_that_is_no_list_of_conflicts_reads_as_none(
    make_event: EventFactory, text: str
) -> None:
    message = event_to_proto(make_event(1, conflict_log=text))
    assert list(message.conflicts) == [] and message.conflict_log == text


def test_a_cut_marker_in_the_arguments_reads_back_as_an_object(make_event: EventFactory) -> None:
    marker = '{"$stockade_cut":{"reason":"longer than 65536 characters"},"head":"{"}'
    message = event_to_proto(make_event(1, arguments_json=marker))
    assert dict(message.arguments)["head"] == "{"


def test_non_finite_numbers_in_the_arguments_are_stored_as_null() -> None:
    event = a_pb2.AuditEvent(event_id="e", session_id="s", tool_name="t")
    event.arguments.update({"a": float("nan"), "b": float("inf"), "c": 1e300})
    assert json.loads(row_from_proto(event).arguments_json) == {"a": None, "b": None, "c": 1e300}


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("winning_rule.effect", "winning_rule.effect"),
        ("winning_rule.source", "winning_rule.source"),
        ("conflicts.effect", "conflicts[0].rule.effect"),
        ("conflicts.source", "conflicts[0].rule.source"),
        ("termination", "termination"),
    ],
)
def test_unknown_enum_numbers_in_the_typed_decision_are_refused(path: str, field: str) -> None:
    event = a_pb2.AuditEvent(event_id="e", session_id="s", tool_name="t")
    if path.startswith("winning_rule"):
        setattr(event.winning_rule, path.split(".")[1], 99)
    elif path.startswith("conflicts"):
        setattr(event.conflicts.add().rule, path.split(".")[1], 99)
    else:
        event.termination = 99  # type: ignore[assignment]
    with pytest.raises(InvalidArgument) as caught:
        row_from_proto(event)
    assert caught.value.metadata["field"] == field


def test_unset_enums_and_time_map_to_empty(make_event: EventFactory) -> None:
    row = row_from_proto(a_pb2.AuditEvent(event_id="e", session_id="s", tool_name="t"))
    assert (row.status, row.verdict, row.rule_source, row.time_ns) == ("", "", "", 0)


@pytest.mark.parametrize("field", ["status", "verdict", "rule_source"])
def test_unknown_enum_numbers_are_refused(field: str) -> None:
    message = a_pb2.AuditEvent(event_id="e", session_id="s", tool_name="t")
    setattr(message, field, 99)
    with pytest.raises(InvalidArgument) as caught:
        row_from_proto(message)
    assert caught.value.metadata["field"] == field


def test_record_and_filters(make_event: EventFactory) -> None:
    stored = StoredRow(make_event(1), 7, BASE_NS, "a" * 64, "b" * 64)
    record = record_to_proto(stored)
    assert (record.sequence, record.prev_hash, record.row_hash) == (7, "a" * 64, "b" * 64)
    request = a_pb2.QueryRequest(session_id="s", status=a_pb2.AUDIT_STATUS_FAIL)
    request.start_time.seconds = 10
    filters = filters_from_proto(request)
    assert (filters.session_id, filters.status, filters.start_ns, filters.end_ns) == (
        "s",
        "FAIL",
        10 * 10**9,
        None,
    )


def test_a_page_of_big_rows_is_cut_to_fit_one_message(make_event: EventFactory) -> None:
    """Rows come back with the arguments twice (typed and as text), so a page of big rows
    can pass gRPC's 4 MiB message limit: the response stops before it, with a token that
    continues after the last row sent."""
    big = json.dumps({"content": "b" * 60_000})
    rows = [StoredRow(make_event(n, arguments_json=big), n, BASE_NS, "a" * 64, "b" * 64)
            for n in range(100, 50, -1)]  # fmt: skip
    filters = QueryFilters(session_id="s1")
    response = query_response(rows, "next", filters)
    assert 0 < len(response.records) < len(rows)
    assert response.ByteSize() <= MAX_RESPONSE_BYTES
    last = response.records[-1].sequence
    assert decode_token(response.next_page_token, filters) == last
    small = query_response(rows[:3], "next", filters)
    assert len(small.records) == 3 and small.next_page_token == "next"
    # One row is always sent, however big, so paging always moves on.
    assert len(query_response(rows[:1], "", filters).records) == 1


_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec="utf-8"), max_size=8)
)
_json_value = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150)
@given(st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=6), _json_value, max_size=5))
def test_arguments_text_is_json_dumps_of_the_plain_arguments(value: dict[str, Any]) -> None:
    """The encoder built once writes exactly what ``json.dumps`` (sorted keys, no spaces,
    ASCII) writes for the same data, non-finite numbers as null; the text is marked as
    written here (``CanonicalJson``) and parses back to the plain data."""
    struct = struct_pb2.Struct()
    struct.update(value)
    wire = a_pb2.AuditEvent(event_id="e", session_id="s", tool_name="t", arguments=struct)
    text = row_from_proto(a_pb2.AuditEvent.FromString(wire.SerializeToString())).arguments_json
    plain = struct_to_plain(struct)
    try:
        expected = json.dumps(plain, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:
        expected = json.dumps(_finite(plain), sort_keys=True, separators=(",", ":"))
    assert text == expected
    assert type(text) is CanonicalJson
    assert json.loads(text) == json.loads(expected)


def test_only_text_written_here_skips_the_json_parse(make_event: EventFactory) -> None:
    """Typed fields become ``CanonicalJson``; the deprecated strings a producer sends stay
    plain ``str`` and are parsed in full, so malformed JSON there is still refused."""
    row = row_from_proto(_typed_event())
    assert {type(row.arguments_json), type(row.conflict_log), type(row.winning_rule)} == {
        CanonicalJson
    }
    old = a_pb2.AuditEvent(
        event_id="e", session_id="s", tool_name="t", arguments_json='{"a": 1', conflict_log="["
    )
    old_row = row_from_proto(old)
    assert type(old_row.arguments_json) is str and type(old_row.conflict_log) is str
    with pytest.raises(InvalidArgument) as caught:
        normalise_batch([old_row._replace(status="OK")], BASE_NS)
    assert caught.value.metadata["field"] in {"arguments_json", "conflict_log"}
    # Text a caller wraps itself is still held to the size and depth limits.
    deep = CanonicalJson("[" * 70 + "]" * 70)
    (stored,) = normalise_batch([make_event(1, arguments_json=deep)], BASE_NS)
    assert is_cut(stored.arguments_json)
