"""Mapping between the audit protobuf messages and the core's value objects.

Enum values travel as their names without prefix (``AUDIT_STATUS_OK`` -> ``"OK"``);
an enum number this build does not know is refused rather than stored as a number.
"""

from __future__ import annotations

from stockade.audit.model import (
    AuditEventRow,
    QueryFilters,
    SessionMetrics,
    StoredRow,
)
from stockade.audit.validate import MAX_CHARS
from stockade.errors import InvalidArgument
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2

_STATUS_PREFIX = "AUDIT_STATUS_"
_VERDICT_PREFIX = "VERDICT_"
_SOURCE_PREFIX = "RULE_SOURCE_"


def _enum_name(enum: object, number: int, prefix: str, field: str) -> str:
    """The name of ``number`` without prefix; ``""`` for the zero value."""
    if number == 0:
        return ""
    try:
        name: str = enum.Name(number)  # type: ignore[attr-defined]
    except ValueError:
        raise InvalidArgument(f"{field} has unknown value {number}", field=field) from None
    return name.removeprefix(prefix)


def _enum_number(enum: object, name: str, prefix: str) -> int:
    if not name:
        return 0
    number: int = enum.Value(prefix + name)  # type: ignore[attr-defined]
    return number


def _names(enum: object, prefix: str) -> dict[int, str]:
    values: dict[str, int] = dict(enum.items())  # type: ignore[attr-defined]
    return {number: name.removeprefix(prefix) for name, number in values.items() if number}


# Number -> stored name, looked up per event (EnumTypeWrapper.Name is several times slower).
_STATUS_NAMES = _names(a_pb2.AuditStatus, _STATUS_PREFIX)
_VERDICT_NAMES = _names(common_pb2.Verdict, _VERDICT_PREFIX)
_SOURCE_NAMES = _names(common_pb2.RuleSource, _SOURCE_PREFIX)


def _lookup(names: dict[int, str], number: int, field: str) -> str:
    if not number:
        return ""
    name = names.get(number)
    if name is None:
        raise InvalidArgument(f"{field} has unknown value {number}", field=field)
    return name


def row_from_proto(event: a_pb2.AuditEvent) -> AuditEventRow:
    """The core row for a protobuf event (validation happens in the store)."""
    time = event.time
    # Positional, in field order: this runs once per ingested event.
    return AuditEventRow(
        event.event_id,
        event.session_id,
        event.step,
        event.tool_name,
        _lookup(_STATUS_NAMES, event.status, "status"),
        event.elapsed_ms,
        event.output_preview,
        event.agent_name,
        time.seconds * 1_000_000_000 + time.nanos,
        event.call_id,
        _lookup(_VERDICT_NAMES, event.verdict, "verdict"),
        event.matched_rule,
        _lookup(_SOURCE_NAMES, event.rule_source, "rule_source"),
        event.conflict_log,
        event.trace_id,
        event.termination_reason,
        event.policy_version,
        event.arguments_json,
    )


def event_to_proto(row: AuditEventRow) -> a_pb2.AuditEvent:
    """The protobuf event for a core row."""
    event = a_pb2.AuditEvent(
        event_id=row.event_id,
        session_id=row.session_id,
        step=row.step,
        tool_name=row.tool_name,
        status=_enum_number(a_pb2.AuditStatus, row.status, _STATUS_PREFIX),  # type: ignore[arg-type]
        elapsed_ms=row.elapsed_ms,
        output_preview=row.output_preview,
        agent_name=row.agent_name,
        call_id=row.call_id,
        verdict=_enum_number(common_pb2.Verdict, row.verdict, _VERDICT_PREFIX),  # type: ignore[arg-type]
        matched_rule=row.matched_rule,
        rule_source=_enum_number(common_pb2.RuleSource, row.rule_source, _SOURCE_PREFIX),  # type: ignore[arg-type]
        conflict_log=row.conflict_log,
        trace_id=row.trace_id,
        termination_reason=row.termination_reason,
        policy_version=row.policy_version,
        arguments_json=row.arguments_json,
    )
    if row.time_ns:
        event.time.seconds, event.time.nanos = divmod(row.time_ns, 1_000_000_000)
    return event


def record_to_proto(row: StoredRow) -> a_pb2.AuditRecord:
    """The protobuf record for a stored row."""
    return a_pb2.AuditRecord(
        event=event_to_proto(row.event),
        sequence=row.sequence,
        prev_hash=row.prev_hash,
        row_hash=row.row_hash,
    )


#: Longest page token accepted (ours are under 100 characters).
MAX_PAGE_TOKEN_CHARS = 512


def check_filter_lengths(**fields: str) -> None:
    """Refuse a filter longer than the field it filters can ever be (INVALID_ARGUMENT
    naming it), so a megabyte session id costs nothing."""
    for name, value in fields.items():
        limit = MAX_PAGE_TOKEN_CHARS if name == "page_token" else MAX_CHARS[name]
        if len(value) > limit:
            raise InvalidArgument(f"{name} is longer than {limit} characters", field=name)


def filters_from_proto(request: a_pb2.QueryRequest) -> QueryFilters:
    """The core filters of a Query request."""
    check_filter_lengths(
        session_id=request.session_id,
        tool_name=request.tool_name,
        agent_name=request.agent_name,
        page_token=request.page_token,
    )
    start = request.start_time
    end = request.end_time
    return QueryFilters(
        session_id=request.session_id,
        tool_name=request.tool_name,
        status=_enum_name(a_pb2.AuditStatus, request.status, _STATUS_PREFIX, "status"),
        agent_name=request.agent_name,
        verdict=_enum_name(common_pb2.Verdict, request.verdict, _VERDICT_PREFIX, "verdict"),
        start_ns=start.seconds * 1_000_000_000 + start.nanos
        if request.HasField("start_time")
        else None,
        end_ns=end.seconds * 1_000_000_000 + end.nanos if request.HasField("end_time") else None,
    )


def metrics_to_proto(metrics: SessionMetrics) -> a_pb2.GetSessionMetricsResponse:
    """The GetSessionMetrics response for a snapshot."""
    return a_pb2.GetSessionMetricsResponse(
        session_id=metrics.session_id,
        calls=metrics.calls,
        errors=metrics.errors,
        denials=metrics.denials,
        tools=[
            a_pb2.ToolMetrics(
                tool_name=t.tool_name,
                calls=t.calls,
                errors=t.errors,
                denials=t.denials,
                mean_elapsed_ms=t.mean_elapsed_ms,
                max_elapsed_ms=t.max_elapsed_ms,
            )
            for t in metrics.tools
        ],
        termination_reason=metrics.termination_reason,
    )
