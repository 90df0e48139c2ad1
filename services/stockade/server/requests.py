"""Every request is checked before a servicer sees it: well-formed bytes, enum values in
range, identifiers of sensible length (#12 item 11, "bad input: a precise status").

One mechanism for every service: ``ContextInterceptor`` wraps each RPC's request
deserializer with :func:`guard_deserializer` and checks each parsed message with
:func:`check_request`. A request that does not parse (corrupt bytes, invalid UTF-8 in a
string field, nesting past the parser's limit) or that breaks a limit is answered
INVALID_ARGUMENT naming the problem, never UNKNOWN or INTERNAL with protobuf internals.

The checks are planned once per message type (only fields that can break a rule are
visited), so the common request costs a few attribute reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from stockade.errors import InvalidArgument

__all__ = [
    "MAX_ID_CHARS",
    "MAX_REQUEST_STRING_CHARS",
    "Malformed",
    "check_request",
    "guard_deserializer",
]

#: Largest length, in characters, of identifier fields wherever they appear in a request
#: (the same bounds as the audit trail's columns, so whatever is accepted can be recorded).
MAX_ID_CHARS: dict[str, int] = {
    "session_id": 256,
    "call_id": 256,
    "approval_id": 128,
    "rule_id": 128,
    "grant_id": 128,
    "request_id": 128,
    "event_id": 128,
    "tool_name": 128,
    "agent_name": 128,
    "hook_name": 128,
    "key_id": 128,
    "resolver": 256,
    "provider": 128,
    "script": 128,
}
#: Other named string fields with a bound of their own.
MAX_REQUEST_STRING_CHARS: dict[str, int] = {
    # A rule pattern: room for an exact command at the executor's 65,536-character cap.
    "AddRuleRequest.rule.pattern": 66_000,
    "AddRuleRequest.rule.reason": 4096,
    "ResolveApprovalRequest.reason": 4096,
}

_SKIPPED_TYPES = frozenset(
    {
        "google.protobuf.Struct",
        "google.protobuf.Value",
        "google.protobuf.ListValue",
        # The audit service checks every field of every event itself, naming the event's
        # index and id in a batch (stockade.audit.validate), with the same bounds.
        "stockade.v1.AuditEvent",
    }
)


@dataclass(frozen=True)
class Malformed:
    """What a guarded deserializer returns for bytes that are not a valid request."""

    message: str


def guard_deserializer(
    deserializer: Callable[[bytes], Any] | None,
) -> Callable[[bytes], Any] | None:
    """``deserializer`` that returns :class:`Malformed` instead of raising.

    gRPC answers a raising deserializer with a bare INTERNAL/UNKNOWN; the interceptor
    turns a ``Malformed`` into INVALID_ARGUMENT with this message.
    """
    if deserializer is None:
        return None

    def guarded(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as exc:
            return Malformed(_decode_problem(exc))
        except RecursionError:
            return Malformed("the request nests too deeply")
        except Exception:  # any parse failure is the caller's malformed input
            return Malformed("the request is not a valid protobuf message of this RPC")

    return guarded


def _decode_problem(exc: DecodeError) -> str:
    text = str(exc).lower()
    if "utf-8" in text or "utf8" in text:
        return "the request does not parse: a string field holds invalid UTF-8"
    if "recursion" in text or "depth" in text or "nest" in text:
        return "the request does not parse: it nests deeper than the limit (100 levels)"
    return "the request does not parse as a protobuf message of this RPC (corrupt bytes)"


# --- the per-type plan ------------------------------------------------------------------

_Check = Callable[[Message, str], None]
_MAX_PLAN_DEPTH = 8
_PLANS: dict[str, tuple[_Check, ...]] = {}


def check_request(message: Message) -> None:
    """Raise ``InvalidArgument`` if ``message`` holds an enum value its enum does not
    define or a string past its bound.

    Every request runs the fast check (no strings built); only a request that fails it
    runs the detailed one, which names the field with its path.
    """
    descriptor: Any = message.DESCRIPTOR
    fast = _FAST.get(descriptor)
    if fast is None:
        fast = _FAST[descriptor] = _fast_plan(descriptor, descriptor.name)
    if _valid(message, fast):
        return
    for check in _plan(descriptor, descriptor.name):
        check(message, "")
    # Both passes come from the same tables; should they ever disagree, refuse.
    raise InvalidArgument("the request breaks a field limit (enum value or length)")


# A fast plan: (kind, field name, argument, repeated) per field to look at; the argument
# is the set of valid enum numbers, the length bound, or the sub-message's fast plan.
_ENUM, _LEN, _MSG = 0, 1, 2
_Fast = tuple[tuple[int, str, Any, bool], ...]
_FAST: dict[Any, _Fast] = {}


def _fast_plan(descriptor: Any, path: str, depth: int = 0) -> _Fast:
    out: list[tuple[int, str, Any, bool]] = []
    for field in descriptor.fields:
        where = f"{path}.{field.name}"
        repeated = bool(field.is_repeated)
        if field.type == FieldDescriptor.TYPE_ENUM:
            valid = frozenset(v.number for v in field.enum_type.values)
            out.append((_ENUM, field.name, valid, repeated))
        elif field.type == FieldDescriptor.TYPE_STRING:
            limit = MAX_REQUEST_STRING_CHARS.get(where) or MAX_ID_CHARS.get(field.name)
            if limit is not None:
                out.append((_LEN, field.name, limit, repeated))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            sub: Any = field.message_type
            if sub.full_name in _SKIPPED_TYPES or sub.GetOptions().map_entry:
                continue
            if depth >= _MAX_PLAN_DEPTH:
                continue
            plan = _fast_plan(sub, where, depth + 1)
            if plan:
                out.append((_MSG, field.name, plan, repeated))
    return tuple(out)


def _valid(message: Any, plan: _Fast) -> bool:
    for kind, name, arg, repeated in plan:
        if kind == _MSG:
            if repeated:
                for item in getattr(message, name):
                    if not _valid(item, arg):
                        return False
            elif message.HasField(name) and not _valid(getattr(message, name), arg):
                return False
            continue
        value = getattr(message, name)
        if kind == _ENUM:
            if repeated:
                if any(v not in arg for v in value):
                    return False
            elif value not in arg:
                return False
        elif repeated:
            if any(len(v) > arg for v in value):
                return False
        elif len(value) > arg:
            return False
    return True


def _plan(descriptor: Descriptor, path: str) -> tuple[_Check, ...]:
    key = f"{descriptor.full_name}@{path}"
    plan = _PLANS.get(key)
    if plan is None:
        _PLANS[key] = ()  # recursive types: an empty plan while this one is built
        plan = tuple(_build(descriptor, path))
        _PLANS[key] = plan
    return plan


def _build(descriptor: Descriptor, path: str) -> list[_Check]:
    checks: list[_Check] = []
    for field in descriptor.fields:
        where = f"{path}.{field.name}"
        repeated = bool(field.is_repeated)
        if field.type == FieldDescriptor.TYPE_ENUM:
            checks.append(_enum_check(field, repeated))
        elif field.type == FieldDescriptor.TYPE_STRING:
            limit = MAX_REQUEST_STRING_CHARS.get(where) or MAX_ID_CHARS.get(field.name)
            if limit is not None:
                checks.append(_length_check(field, limit, repeated))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            sub: Any = field.message_type
            if sub.full_name in _SKIPPED_TYPES or sub.GetOptions().map_entry:
                continue
            if where.count(".") > _MAX_PLAN_DEPTH:
                continue  # a self-referencing type: our requests nest nowhere near this
            if _plan(sub, where):
                checks.append(_message_check(field, sub, where, repeated))
    return checks


def _display(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _enum_check(field: FieldDescriptor, repeated: bool) -> _Check:
    enum: Any = field.enum_type
    valid = frozenset(v.number for v in enum.values)
    names = ", ".join(v.name for v in enum.values)
    name = field.name

    def check(message: Message, path: str) -> None:
        values = getattr(message, name) if repeated else (getattr(message, name),)
        for value in values:
            if value not in valid:
                raise InvalidArgument(
                    f"{_display(path, name)}: {value} is not a value of {enum.name} "
                    f"(one of {names})",
                    field=_display(path, name),
                )

    return check


def _length_check(field: FieldDescriptor, limit: int, repeated: bool) -> _Check:
    name = field.name

    def check(message: Message, path: str) -> None:
        values = getattr(message, name) if repeated else (getattr(message, name),)
        for value in values:
            if len(value) > limit:
                raise InvalidArgument(
                    f"{_display(path, name)} is {len(value):,} characters long; the limit is "
                    f"{limit:,}",
                    field=_display(path, name),
                    limit=str(limit),
                )

    return check


def _message_check(field: FieldDescriptor, sub: Descriptor, where: str, repeated: bool) -> _Check:
    name = field.name
    key = f"{sub.full_name}@{where}"

    def check(message: Message, path: str) -> None:
        plan = _PLANS.get(key, ())
        if not plan:
            return
        here = _display(path, name)
        if repeated:
            for i, item in enumerate(getattr(message, name)):
                for c in plan:
                    c(item, f"{here}[{i}]")
        elif message.HasField(name):
            item = getattr(message, name)
            for c in plan:
                c(item, here)

    return check
