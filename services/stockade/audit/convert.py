"""Mapping between the audit protobuf messages and the core's value objects.

The wire carries the decision typed (``winning_rule``, ``conflicts``, ``termination``,
``arguments``: messages and enums, as the decision service and the agent made them); the
store keeps rows of strings and integers. This module is that boundary, both ways, and
the only place the typed decision becomes text:

- the winning rule: ``matched_rule`` (pattern) and ``rule_source`` (source name) as
  before, plus ``winning_rule``, the whole rule as canonical JSON (``rule_json``);
- the conflicts: ``conflict_log``, a JSON list of flat objects ``{"pattern", "effect",
  "source", "note"}`` (plus ``reason``, ``rule_id``, ``bypass_immune`` when set), the
  spelling producers used before the field was typed, so old rows read back typed too;
- the termination: ``termination_reason``, the ``TerminationReason`` name without prefix;
- the arguments: ``arguments_json``, canonical JSON (sorted keys, no spaces).

Enum values are stored as their names without prefix (``AUDIT_STATUS_OK`` -> ``"OK"``);
an enum number this build does not know is refused rather than stored as a number. A
producer that predates the typed fields sends the deprecated strings instead; they are
stored as they come, and every row is returned with both forms filled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from google.protobuf import struct_pb2

from stockade.audit.model import (
    AuditEventRow,
    CanonicalJson,
    QueryFilters,
    SessionMetrics,
    StoredRow,
    VerifyResult,
)
from stockade.audit.paging import encode_token
from stockade.audit.validate import MAX_CHARS
from stockade.errors import InvalidArgument
from stockade.v1 import agent_service_pb2 as ag_pb2
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

_STATUS_PREFIX = "AUDIT_STATUS_"
_VERDICT_PREFIX = "VERDICT_"
_SOURCE_PREFIX = "RULE_SOURCE_"
_EFFECT_PREFIX = "RULE_EFFECT_"
_TERMINATION_PREFIX = "TERMINATION_REASON_"


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
_EFFECT_NAMES = _names(common_pb2.RuleEffect, _EFFECT_PREFIX)
_TERMINATION_NAMES = _names(ag_pb2.TerminationReason, _TERMINATION_PREFIX)
# Stored name -> number, for reading rows back (lenient: any case, with or without prefix).
_SOURCE_NUMBERS = {name: number for number, name in _SOURCE_NAMES.items()}
_EFFECT_NUMBERS = {name: number for number, name in _EFFECT_NAMES.items()}
_TERMINATION_NUMBERS = {name: number for number, name in _TERMINATION_NAMES.items()}


# The same with the zero value ("" = not set) included, so the per-event path is one
# ``dict.get`` (None only for a number this build does not know).
_STATUS_OF = {0: "", **_STATUS_NAMES}
_VERDICT_OF = {0: "", **_VERDICT_NAMES}
_SOURCE_OF = {0: "", **_SOURCE_NAMES}


def _lookup(names: dict[int, str], number: int, field: str) -> str:
    if not number:
        return ""
    name = names.get(number)
    if name is None:
        raise InvalidArgument(f"{field} has unknown value {number}", field=field)
    return name


def _number(numbers: dict[str, int], text: object, prefix: str) -> int:
    """The enum number a stored name spells (``"RULE_EFFECT_DENY"``, ``"DENY"`` and the
    decision service's old ``"deny"`` alike); 0 when it names none."""
    if not isinstance(text, str):
        return 0
    return numbers.get(text.upper().removeprefix(prefix), 0)


def _compact(value: Any) -> CanonicalJson:
    return CanonicalJson(
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    )


def _refuse_type(value: object) -> object:
    raise TypeError(f"not JSON data: {type(value).__name__}")


def _arguments_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)``
    with the C encoder built once instead of per call (a third of the cost for the small
    argument objects of most calls); the same output, checked by a unit test."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return lambda value: json.dumps(
            value, sort_keys=True, separators=(",", ":"), allow_nan=False
        )
    # No circular-reference markers: the value is a tree decoded from protobuf.
    encode = make(
        None, _refuse_type, json.encoder.encode_basestring_ascii, None, ":", ",", True,
        False, False,
    )  # fmt: skip
    return lambda value: "".join(encode(value, 0))


_encode_arguments = _arguments_encoder()


# -- the winning rule and the conflicts ---------------------------------------------------


def _rule_fields(rule: common_pb2.Rule, field: str) -> dict[str, Any]:
    """A rule as the flat object the store keeps (enum names in full, as protobuf JSON
    spells them); pattern, effect and source always, the rest when set."""
    fields: dict[str, Any] = {
        "pattern": rule.pattern,
        "effect": _EFFECT_PREFIX + _lookup(_EFFECT_NAMES, rule.effect, f"{field}.effect")
        if rule.effect
        else "",
        "source": _SOURCE_PREFIX + _lookup(_SOURCE_NAMES, rule.source, f"{field}.source")
        if rule.source
        else "",
    }
    if rule.reason:
        fields["reason"] = rule.reason
    if rule.rule_id:
        fields["rule_id"] = rule.rule_id
    if rule.bypass_immune:
        fields["bypass_immune"] = True
    return fields


def _rule_from_fields(fields: Mapping[str, Any]) -> common_pb2.Rule:
    """The rule a stored flat object describes (unknown keys and bad values ignored: the
    row is what it is; the hash chain, not this reader, vouches for it)."""
    reason, rule_id = fields.get("reason", ""), fields.get("rule_id", "")
    return common_pb2.Rule(
        pattern=str(fields.get("pattern", "")),
        effect=_number(_EFFECT_NUMBERS, fields.get("effect"), _EFFECT_PREFIX),  # type: ignore[arg-type]
        source=_number(_SOURCE_NUMBERS, fields.get("source"), _SOURCE_PREFIX),  # type: ignore[arg-type]
        reason=reason if isinstance(reason, str) else "",
        rule_id=rule_id if isinstance(rule_id, str) else "",
        bypass_immune=fields.get("bypass_immune") is True,
    )


_RULE_TEXT: dict[bytes, CanonicalJson] = {}
"""Stored form by the rule's wire bytes: the same few winning rules recur on most events,
and serializing a rule costs a tenth of turning it into JSON (bounded; cleared when full)."""
_RULE_TEXT_MAX = 4096


def rule_json(rule: common_pb2.Rule) -> CanonicalJson:
    """The stored form of a winning rule (canonical JSON of ``_rule_fields``)."""
    key = rule.SerializeToString()
    text = _RULE_TEXT.get(key)
    if text is None:
        text = _compact(_rule_fields(rule, "winning_rule"))  # raises for unknown enums
        if len(_RULE_TEXT) >= _RULE_TEXT_MAX:
            _RULE_TEXT.clear()
        _RULE_TEXT[key] = text
    return text


def conflicts_json(conflicts: Iterable[d_pb2.Conflict]) -> str:
    """The stored form of a conflict list; "" when there is none."""
    items = []
    for i, conflict in enumerate(conflicts):
        fields = _rule_fields(conflict.rule, f"conflicts[{i}].rule")
        fields["note"] = conflict.note
        items.append(fields)
    return _compact(items) if items else ""


def _loads(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def winning_rule_from_row(row: AuditEventRow) -> common_pb2.Rule | None:
    """The winning rule of a stored row: the whole rule when it was sent typed, else the
    pattern and source an older producer sent; None when the row names no rule."""
    fields = _loads(row.winning_rule)
    if isinstance(fields, dict) and "pattern" in fields:
        return _rule_from_fields(fields)
    if row.matched_rule or row.rule_source:
        return common_pb2.Rule(
            pattern=row.matched_rule,
            source=_SOURCE_NUMBERS.get(row.rule_source, 0),  # type: ignore[arg-type]
        )
    return None


def conflicts_from_text(text: str) -> list[d_pb2.Conflict]:
    """The conflicts a stored ``conflict_log`` holds (empty for a cut marker or text that
    is not a list of conflicts)."""
    items = _loads(text)
    if not isinstance(items, list):
        return []
    return [
        d_pb2.Conflict(rule=_rule_from_fields(item), note=str(item.get("note", "")))
        for item in items
        if isinstance(item, dict)
    ]


# -- the arguments --------------------------------------------------------------------------


def _plain(value: struct_pb2.Value) -> Any:
    """A protobuf ``Value`` as plain JSON data; whole numbers become ints (JSON has one
    number type, and ``5`` must not be stored as ``5.0``). Recursion is bounded by the
    protobuf decoder's nesting limit."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        number = value.number_value
        if math.isfinite(number) and number.is_integer() and abs(number) <= 2**53:
            return int(number)
        return number
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return struct_to_plain(value.struct_value)
    if kind == "list_value":
        return [_plain(item) for item in value.list_value.values]
    return None


def struct_to_plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A ``Struct`` as a plain dict (see ``_plain``)."""
    # Keys, then one lookup each: the map's ``items()`` is the slow generic Mapping one.
    fields = struct.fields
    return {key: _plain(fields[key]) for key in fields}


def arguments_text(struct: struct_pb2.Struct) -> CanonicalJson:
    """The stored form of the arguments: canonical JSON (non-finite numbers, which JSON
    cannot hold, become null)."""
    # The agent's spelling before the field was typed (``bounds.bounded_json``), so old and
    # new rows of the same call hold the same text.
    plain = struct_to_plain(struct)
    try:
        return CanonicalJson(_encode_arguments(plain))
    except ValueError:
        return CanonicalJson(_encode_arguments(_finite(plain)))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def arguments_from_text(text: str) -> struct_pb2.Struct | None:
    """The arguments a stored ``arguments_json`` holds (a cut or refused marker is an
    object too); None when it holds no object or nests too deep for a ``Struct``."""
    value = _loads(text)
    if not isinstance(value, dict):
        return None
    struct = struct_pb2.Struct()
    try:
        struct.update(value)
        struct.ByteSize()  # a value nested past protobuf's limit fails here, not later
    except (ValueError, TypeError, RecursionError):
        return None
    return struct


# -- events ---------------------------------------------------------------------------------


def row_from_proto(event: a_pb2.AuditEvent) -> AuditEventRow:
    """The core row for a protobuf event (validation happens in the store).

    The typed fields win over the deprecated strings they replace when both are sent.
    """
    # This runs once per ingested event: each field is read once, enums are one dict
    # lookup (the precise error only on the rare unknown number), the row is positional.
    status = _STATUS_OF.get(event.status)
    if status is None:
        status = _lookup(_STATUS_NAMES, event.status, "status")  # raises
    verdict = _VERDICT_OF.get(event.verdict)
    if verdict is None:
        verdict = _lookup(_VERDICT_NAMES, event.verdict, "verdict")  # raises
    if event.HasField("winning_rule"):
        rule = event.winning_rule
        winning_rule: str = rule_json(rule)  # refuses unknown enums, source included
        matched_rule, rule_source = rule.pattern, _SOURCE_NAMES.get(rule.source, "")
    else:
        winning_rule, matched_rule = "", event.matched_rule
        rule_source = _SOURCE_OF.get(event.rule_source)  # type: ignore[assignment]
        if rule_source is None:
            rule_source = _lookup(_SOURCE_NAMES, event.rule_source, "rule_source")  # raises
    conflicts = event.conflicts
    termination = event.termination
    time = event.time
    return AuditEventRow(
        event.event_id,
        event.session_id,
        event.step,
        event.tool_name,
        status,
        event.elapsed_ms,
        event.output_preview,
        event.agent_name,
        time.seconds * 1_000_000_000 + time.nanos,
        event.call_id,
        verdict,
        matched_rule,
        rule_source,
        conflicts_json(conflicts) if conflicts else event.conflict_log,
        event.trace_id,
        _lookup(_TERMINATION_NAMES, termination, "termination")
        if termination
        else event.termination_reason,
        event.policy_version,
        arguments_text(event.arguments) if event.HasField("arguments") else event.arguments_json,
        winning_rule,
        event.decision_reason,
    )


def event_to_proto(row: AuditEventRow) -> a_pb2.AuditEvent:
    """The protobuf event for a core row: the typed fields, and the deprecated strings
    they replace for readers that predate them."""
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
        decision_reason=row.decision_reason,
        termination=_TERMINATION_NUMBERS.get(row.termination_reason, 0),  # type: ignore[arg-type]
    )
    if row.time_ns:
        event.time.seconds, event.time.nanos = divmod(row.time_ns, 1_000_000_000)
    rule = winning_rule_from_row(row)
    if rule is not None:
        event.winning_rule.CopyFrom(rule)
    if row.conflict_log:
        event.conflicts.extend(conflicts_from_text(row.conflict_log))
    if row.arguments_json:
        arguments = arguments_from_text(row.arguments_json)
        if arguments is not None:
            event.arguments.CopyFrom(arguments)
    return event


def record_to_proto(row: StoredRow) -> a_pb2.AuditRecord:
    """The protobuf record for a stored row."""
    return a_pb2.AuditRecord(
        event=event_to_proto(row.event),
        sequence=row.sequence,
        prev_hash=row.prev_hash,
        row_hash=row.row_hash,
    )


#: Largest Query response a server sends, in bytes (gRPC clients refuse messages over
#: 4 MiB by default): a page of big rows ends early, with a token for the rest.
MAX_RESPONSE_BYTES = 3 * 1024 * 1024


def query_response(
    rows: list[StoredRow], next_page_token: str, filters: QueryFilters
) -> a_pb2.QueryResponse:
    """The Query response for one page, cut short (never below one row) where it would
    pass ``MAX_RESPONSE_BYTES``; the token then continues after the last row sent."""
    response = a_pb2.QueryResponse()
    size = 0
    for row in rows:
        record = record_to_proto(row)
        # Each record costs its bytes plus a tag and a length prefix of at most 6 bytes.
        size += record.ByteSize() + 6
        if size > MAX_RESPONSE_BYTES and response.records:
            response.next_page_token = encode_token(response.records[-1].sequence, filters)
            return response
        response.records.append(record)
    response.next_page_token = next_page_token
    return response


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


_BREAK_NUMBERS = {
    name.removeprefix("CHAIN_BREAK_REASON_"): number
    for name, number in a_pb2.ChainBreakReason.items()
    if number
}


def verify_to_proto(result: VerifyResult) -> a_pb2.VerifyLogResponse:
    """The VerifyLog response: the whole store's result and one entry per chain."""
    return a_pb2.VerifyLogResponse(
        ok=result.ok,
        rows_checked=result.rows_checked,
        first_broken_sequence=result.first_broken_sequence,
        detail=result.detail,
        head_sequence=result.head_sequence,
        head_hash=result.head_hash,
        anchor_sequence=result.anchor_sequence,
        refused_rows=result.refused_rows,
        cut_rows=result.cut_rows,
        chains=[
            a_pb2.ChainVerification(
                chain_id=c.chain_id,
                ok=c.ok,
                rows_checked=c.rows_checked,
                first_broken_sequence=c.first_broken_sequence,
                first_broken_position=c.first_broken_position,
                reason=_BREAK_NUMBERS[c.reason.value] if c.reason else 0,  # type: ignore[arg-type]
                detail=c.detail,
                head_position=c.head_position,
                head_hash=c.head_hash,
                anchor_position=c.anchor_position,
            )
            for c in result.chains
        ],
    )
