"""Protobuf <-> core mapping: every field survives a round trip; unknown enums refused."""

from __future__ import annotations

import pytest

from stockade.audit.convert import (
    event_to_proto,
    filters_from_proto,
    record_to_proto,
    row_from_proto,
)
from stockade.audit.model import StoredRow
from stockade.errors import InvalidArgument
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2

from .conftest import BASE_NS, EventFactory


def test_round_trip_keeps_every_field(make_event: EventFactory) -> None:
    event = make_event(
        3,
        status="DENIED",
        verdict="DENY",
        rule_source="SESSION",
        conflict_log="[]",
        termination_reason="",
        policy_version="v9",
        arguments_json='{"command": "ls"}',
        time_ns=BASE_NS + 123,
    )
    message = event_to_proto(event)
    assert message.status == a_pb2.AUDIT_STATUS_DENIED
    assert message.verdict == common_pb2.VERDICT_DENY
    assert message.rule_source == common_pb2.RULE_SOURCE_SESSION
    assert message.time.nanos == 123
    wire = a_pb2.AuditEvent.FromString(message.SerializeToString())
    assert row_from_proto(wire) == event


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
