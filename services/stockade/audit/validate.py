"""Input rules for audit events: refuse what would be stored wrong, cut what may be cut.

``output_preview`` is shortened to ``PREVIEW_CHARS`` characters (AUD-1) and
``decision_reason`` to ``MAX_REASON_CHARS``, and a JSON field (``arguments_json``,
``conflict_log``, ``winning_rule``) longer than ``MAX_JSON_CHARS`` or nested deeper
than ``MAX_JSON_DEPTH`` is replaced by its cut marker (``stockade.contract.audit_bounds``: the
row says it was cut, with the SHA-256 and size of the full value), so a big or deeply
nested call is recorded, never dropped and never an INTERNAL error. Every other field
that is missing, malformed or longer than its limit is refused with ``InvalidArgument``
naming the field, so nothing is stored silently wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from stockade.audit.model import (
    PREVIEW_CHARS,
    RULE_SOURCES,
    SESSION_TOOL,
    VERDICTS,
    AuditEventRow,
    AuditStatus,
    CanonicalJson,
)
from stockade.contract.audit_bounds import (
    MAX_JSON_CHARS,
    bound_json_text,
    cut_marker,
    json_depth_exceeds,
)
from stockade.errors import InvalidArgument

#: Largest length, in characters, of each text field that is refused past it
#: (``output_preview`` and the JSON fields are cut instead).
MAX_CHARS: dict[str, int] = {
    "event_id": 128,
    "session_id": 256,
    "tool_name": 128,
    "agent_name": 128,
    "call_id": 256,
    "matched_rule": 4096,
    "trace_id": 32,
    "termination_reason": 2048,
    "policy_version": 128,
}
#: Characters of the decision's reason kept; a longer reason is cut (it is prose).
MAX_REASON_CHARS = 4096
#: Events per ``append`` call; bigger batches are refused so one request cannot pin memory.
MAX_BATCH_EVENTS = 10_000
#: Fields that must not be empty.
_REQUIRED = ("event_id", "session_id", "tool_name")
#: Fields that, when set, must hold JSON.
_JSON_FIELDS = ("conflict_log", "arguments_json", "winning_rule")
_STATUSES = frozenset(s.value for s in AuditStatus)
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
# Bounds of the fast path in normalise_event; kept equal to MAX_CHARS by a unit test.
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1


def _refuse(index: int, event: AuditEventRow, field: str, problem: str) -> InvalidArgument:
    where = f"event {index}" + (f" ({event.event_id!r})" if event.event_id else "")
    return InvalidArgument(
        f"{where}: {field} {problem}", field=field, index=str(index), event_id=event.event_id
    )


def normalise_event(event: AuditEventRow, now_ns: int, index: int = 0) -> AuditEventRow:
    """Return the event as it will be stored, or raise ``InvalidArgument``.

    The preview is cut to ``PREVIEW_CHARS`` characters and an unset time (0) becomes
    ``now_ns``, the arrival time; nothing else is changed.
    """
    # The common case is checked with plain comparisons (this runs per ingested event);
    # only a failing event goes through the slower search for the precise message.
    if (
        event.event_id
        and event.session_id
        and event.tool_name
        and len(event.event_id) <= 128
        and len(event.session_id) <= 256
        and len(event.tool_name) <= 128
        and len(event.agent_name) <= 128
        and len(event.call_id) <= 256
        and len(event.matched_rule) <= 4096
        and len(event.conflict_log) <= MAX_JSON_CHARS
        and len(event.termination_reason) <= 2048
        and len(event.policy_version) <= 128
        and len(event.arguments_json) <= MAX_JSON_CHARS
        and len(event.winning_rule) <= MAX_JSON_CHARS
        and event.status in _STATUSES
        and (event.status == "SESSION_STOP") == (event.tool_name == SESSION_TOOL)
        and event.verdict in VERDICTS
        and event.rule_source in RULE_SOURCES
        and 0 <= event.step <= _INT32_MAX
        and 0 <= event.elapsed_ms <= _INT64_MAX
        and 0 <= event.time_ns <= _INT64_MAX
        and (not event.trace_id or _TRACE_ID.fullmatch(event.trace_id))
        and (not event.conflict_log or _is_json(event.conflict_log))
        and (not event.arguments_json or _is_json(event.arguments_json))
        # winning_rule is canonical JSON that convert built from a typed Rule: only its
        # length is checked here (a text that fails that is parsed on the slow path).
    ):
        pass
    else:
        event = _check_slowly(event, index)
    if (
        event.time_ns
        and len(event.output_preview) <= PREVIEW_CHARS
        and len(event.decision_reason) <= MAX_REASON_CHARS
    ):
        return event
    return event._replace(
        output_preview=event.output_preview[:PREVIEW_CHARS],
        decision_reason=event.decision_reason[:MAX_REASON_CHARS],
        time_ns=event.time_ns or now_ns,
    )


def _is_json(text: str) -> bool:
    """Valid JSON no deeper than ``MAX_JSON_DEPTH`` (deeper text goes the slow way)."""
    if json_depth_exceeds(text):
        return False
    if type(text) is CanonicalJson:
        return True  # written by ``convert`` with json's encoder: parsing it proves nothing
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _check_slowly(event: AuditEventRow, index: int) -> AuditEventRow:
    """Every rule, one by one, raising for the first that fails; returns the event with
    its over-long or over-deep JSON fields cut."""
    for name in _REQUIRED:
        if not getattr(event, name):
            raise _refuse(index, event, name, "is required")
    for name, limit in MAX_CHARS.items():
        if len(getattr(event, name)) > limit:
            raise _refuse(index, event, name, f"is longer than {limit} characters")
    if event.status not in _STATUSES:
        raise _refuse(index, event, "status", f"must be one of {sorted(_STATUSES)}")
    if (event.status == AuditStatus.SESSION_STOP) != (event.tool_name == SESSION_TOOL):
        raise _refuse(
            index, event, "status", f"SESSION_STOP goes with tool_name {SESSION_TOOL!r} only"
        )
    if event.verdict not in VERDICTS:
        raise _refuse(index, event, "verdict", f"must be one of {sorted(VERDICTS)}")
    if event.rule_source not in RULE_SOURCES:
        raise _refuse(index, event, "rule_source", f"must be one of {sorted(RULE_SOURCES)}")
    if not 0 <= event.step <= _INT32_MAX:
        raise _refuse(index, event, "step", "must be between 0 and 2^31-1")
    if not 0 <= event.elapsed_ms <= _INT64_MAX:
        raise _refuse(index, event, "elapsed_ms", "must not be negative")
    if not 0 <= event.time_ns <= _INT64_MAX:
        raise _refuse(index, event, "time", "must not be before the Unix epoch")
    if event.trace_id and not _TRACE_ID.fullmatch(event.trace_id):
        raise _refuse(index, event, "trace_id", "must be 32 lowercase hex characters")
    cut: dict[str, str] = {}
    for name in _JSON_FIELDS:
        text = getattr(event, name)
        if not text:
            continue
        bounded = bound_json_text(text)
        if bounded is not text:
            cut[name] = bounded  # a marker (valid JSON), whatever the original held
            continue
        try:
            json.loads(text)
        except ValueError:
            raise _refuse(index, event, name, "is not valid JSON") from None
        except RecursionError:  # not expected after the depth check; never INTERNAL
            cut[name] = cut_marker(text, "nested too deeply to parse")
    if cut:
        event = event._replace(
            arguments_json=cut.get("arguments_json", event.arguments_json),
            conflict_log=cut.get("conflict_log", event.conflict_log),
            winning_rule=cut.get("winning_rule", event.winning_rule),
        )
    return event


def normalise_batch(events: Sequence[AuditEventRow], now_ns: int) -> list[AuditEventRow]:
    """Normalise every event of a batch; one bad event refuses the whole batch."""
    if len(events) > MAX_BATCH_EVENTS:
        raise InvalidArgument(
            f"a batch holds at most {MAX_BATCH_EVENTS} events, got {len(events)}",
            field="events",
        )
    return [normalise_event(event, now_ns, i) for i, event in enumerate(events)]


def dedupe(rows: list[AuditEventRow]) -> tuple[list[AuditEventRow], int]:
    """Drop repeats of an event id within one batch (the first occurrence wins)."""
    seen: set[str] = set()
    unique: list[AuditEventRow] = []
    for row in rows:
        if row.event_id not in seen:
            seen.add(row.event_id)
            unique.append(row)
    return unique, len(rows) - len(unique)
