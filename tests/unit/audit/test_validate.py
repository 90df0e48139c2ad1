"""Bad input (AUD-1): oversized or malformed fields are refused naming the field; the
preview is cut to 200 characters and over-long or over-deep JSON fields to a cut marker."""

from __future__ import annotations

import hashlib
import json

import pytest

from stockade.audit.model import PREVIEW_CHARS
from stockade.audit.validate import MAX_BATCH_EVENTS, MAX_CHARS, normalise_batch, normalise_event
from stockade.contract.audit_bounds import CUT_KEY, MAX_JSON_CHARS, MAX_JSON_DEPTH, is_cut
from stockade.errors import InvalidArgument

from .conftest import BASE_NS, EventFactory


def test_valid_event_is_returned_unchanged(make_event: EventFactory) -> None:
    event = make_event(1)
    assert normalise_event(event, BASE_NS) is event


@pytest.mark.parametrize("field", sorted(MAX_CHARS))
def test_every_limited_field_is_refused_one_character_over(
    make_event: EventFactory, field: str
) -> None:
    limit = MAX_CHARS[field]
    at_limit = "a" * limit if field != "trace_id" else "a" * 32
    normalise_event(make_event(1, **{field: _valid(field, at_limit)}), BASE_NS)
    with pytest.raises(InvalidArgument) as caught:
        normalise_event(make_event(1, **{field: _valid(field, "a" * (limit + 1))}), BASE_NS)
    assert field in caught.value.message
    assert caught.value.metadata["field"] == field


def _valid(field: str, text: str) -> str:
    """Text of the given length that is otherwise valid for the field."""
    if field in {"conflict_log", "arguments_json"}:
        return '"' + text[2:] + '"'
    return text


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"event_id": ""}, "event_id"),
        ({"session_id": ""}, "session_id"),
        ({"tool_name": ""}, "tool_name"),
        ({"status": ""}, "status"),
        ({"status": "MAYBE"}, "status"),
        ({"status": "SESSION_STOP"}, "status"),
        ({"tool_name": "session"}, "status"),
        ({"verdict": "PERHAPS"}, "verdict"),
        ({"rule_source": "GUESS"}, "rule_source"),
        ({"step": -1}, "step"),
        ({"step": 2**31}, "step"),
        ({"elapsed_ms": -5}, "elapsed_ms"),
        ({"time_ns": -1}, "time"),
        ({"trace_id": "ABCDEF0123456789ABCDEF0123456789"}, "trace_id"),
        ({"trace_id": "abc"}, "trace_id"),
        ({"conflict_log": "{not json"}, "conflict_log"),
        ({"arguments_json": "[1,"}, "arguments_json"),
    ],
)
def test_malformed_fields_are_refused_by_name(
    make_event: EventFactory, changes: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        normalise_event(make_event(1, **changes), BASE_NS, index=7)
    assert caught.value.metadata["field"] == field
    assert caught.value.message.startswith("event 7")


def test_preview_is_cut_and_other_fields_kept(make_event: EventFactory) -> None:
    long = "x" * 199 + "🙂" + "tail" * 100
    stored = normalise_event(make_event(1, output_preview=long), BASE_NS)
    assert stored.output_preview == long[:PREVIEW_CHARS]
    assert len(stored.output_preview) == PREVIEW_CHARS
    assert stored.output_preview.endswith("🙂")
    assert stored.event_id == "s1-e1" and stored.time_ns == make_event(1).time_ns


def test_session_stop_row_is_accepted(make_event: EventFactory) -> None:
    stop = make_event(9, tool_name="session", status="SESSION_STOP", termination_reason="done")
    assert normalise_event(stop, BASE_NS) is stop


def test_json_fields_accept_json(make_event: EventFactory) -> None:
    event = make_event(1, conflict_log='[{"rule": "run_bash(*)"}]', arguments_json='{"a": 1}')
    assert normalise_event(event, BASE_NS) is event


def test_batch_limit(make_event: EventFactory) -> None:
    event = make_event(1)
    assert len(normalise_batch([event] * MAX_BATCH_EVENTS, BASE_NS)) == MAX_BATCH_EVENTS
    with pytest.raises(InvalidArgument, match="at most"):
        normalise_batch([event] * (MAX_BATCH_EVENTS + 1), BASE_NS)


@pytest.mark.parametrize("field", ["arguments_json", "conflict_log"])
def test_json_field_over_the_limit_is_stored_as_a_cut_marker(
    make_event: EventFactory, field: str
) -> None:
    text = json.dumps({"path": "big.txt", "content": "a" * 100_000})
    stored = normalise_event(make_event(1, **{field: text}), BASE_NS)
    value = getattr(stored, field)
    assert len(value) <= MAX_JSON_CHARS and is_cut(value)
    marker = json.loads(value)
    assert marker[CUT_KEY]["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert marker[CUT_KEY]["bytes"] == len(text.encode())
    assert "longer than 65536" in marker[CUT_KEY]["reason"]
    assert text.startswith(marker["head"]) and marker["head"]
    at_limit = '"' + "a" * (MAX_JSON_CHARS - 2) + '"'
    assert getattr(normalise_event(make_event(1, **{field: at_limit}), BASE_NS), field) == at_limit


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 2_000, 30_000])
def test_deeply_nested_json_is_cut_not_an_error(make_event: EventFactory, depth: int) -> None:
    # Arrays, objects and both mixed: json.loads alone raises RecursionError past ~1000.
    for text in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
        if len(text) > MAX_JSON_CHARS:
            text = text[: MAX_JSON_CHARS // 2] + text[-MAX_JSON_CHARS // 2 :]
        stored = normalise_event(make_event(1, arguments_json=text), BASE_NS)
        assert is_cut(stored.arguments_json)
        assert "nested deeper" in json.loads(stored.arguments_json)[CUT_KEY]["reason"]


def test_brackets_inside_strings_do_not_count_as_nesting(make_event: EventFactory) -> None:
    text = json.dumps({"command": "echo " + "[{" * 500 + ' \\" ' + "}]" * 500})
    assert normalise_event(make_event(1, arguments_json=text), BASE_NS).arguments_json == text
    at_depth = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert normalise_event(make_event(1, arguments_json=at_depth), BASE_NS).arguments_json == (
        at_depth
    )
