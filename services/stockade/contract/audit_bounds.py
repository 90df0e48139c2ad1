"""Bounds of audit events, shared by the producers (the agent's audit hook and recorder)
and the audit service's validation, so that an event a producer sends always fits.

A producer never sends a JSON field (``arguments_json``, ``conflict_log``) longer than
``MAX_JSON_CHARS`` characters or nested deeper than ``MAX_JSON_DEPTH``: it sends a *cut
marker* instead, a small JSON object that says the value was cut, why, and the SHA-256
and size of the full value, followed by its first characters::

    {"$stockade_cut": {"reason": "longer than 65536 characters",
                       "sha256": "…", "bytes": 102400, "chars": 102400},
     "head": "{\\"content\\":\\"aaaa…"}

so a 100 KB ``file_write`` is recorded (and the full value can be matched against a copy
kept elsewhere), never refused and dropped. The service still refuses anything over the
limits (a producer that does not cut) with INVALID_ARGUMENT naming the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

#: Largest ``arguments_json`` / ``conflict_log``, in characters.
MAX_JSON_CHARS = 65_536
#: Deepest nesting of objects/arrays kept in a JSON field; deeper values are cut.
MAX_JSON_DEPTH = 64
#: Deepest nesting of objects/arrays a producer sends in a typed (``Struct``) field:
#: a JSON object level is three protobuf message levels there, and decoders stop at 100
#: (the event and its batch take two more); deeper values are cut.
MAX_STRUCT_DEPTH = 24
#: Characters of the original kept in a cut marker's ``head``.
CUT_HEAD_CHARS = 4096
#: The key that marks a cut value.
CUT_KEY = "$stockade_cut"
#: Largest serialized event a producer sends (every valid event is far smaller: its
#: fields are bounded to about 210 KB in total); a bigger one is refused locally.
MAX_EVENT_BYTES = 512 * 1024
#: Target size of one streamed RecordBatch message (gRPC refuses messages over 4 MiB).
MAX_MESSAGE_BYTES = 1024 * 1024

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON ``text`` nests objects/arrays deeper than ``limit``.

    Never recursive (a hostile value cannot exhaust the stack), and cheap for the common
    case: a text with at most ``limit`` opening brackets cannot be deeper than that.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def value_depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when a decoded JSON value (dicts/lists) nests deeper than ``limit``
    (iterative, so a value too deep for ``json.dumps`` is measured safely)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def cut_marker(text: str | None, reason: str) -> str:
    """The JSON that replaces a value that was cut: why, the full value's SHA-256 and
    size (when its text is known), and its first ``CUT_HEAD_CHARS`` characters."""
    info: dict[str, Any] = {"reason": reason}
    marker: dict[str, Any] = {CUT_KEY: info}
    if text is not None:
        data = text.encode("utf-8", "surrogatepass")
        info.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), chars=len(text))
        marker["head"] = text[:CUT_HEAD_CHARS]
    return json.dumps(marker, sort_keys=True, separators=(",", ":"))


def bound_json_text(text: str) -> str:
    """``text`` unchanged when it fits, else its cut marker."""
    if len(text) > MAX_JSON_CHARS:
        return cut_marker(text, f"longer than {MAX_JSON_CHARS} characters")
    if json_depth_exceeds(text):
        return cut_marker(text, f"nested deeper than {MAX_JSON_DEPTH} levels")
    return text


def bounded_json(value: Any) -> str:
    """Canonical JSON of ``value`` (sorted keys, no spaces), cut when too long or deep."""
    if value_depth_exceeds(value):
        return cut_marker(None, f"nested deeper than {MAX_JSON_DEPTH} levels")
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return bound_json_text(text)


def is_cut(text: str) -> bool:
    """True when a stored JSON field holds a cut marker."""
    return text.startswith('{"$stockade_cut":')


#: The key that marks the stand-in row of an event the audit service refused.
REFUSED_KEY = "$stockade_refused"


def refused_marker(payload: bytes, reason: str) -> str:
    """The ``arguments_json`` of a refused event's stand-in row: why it was refused and
    the SHA-256 and size of the event as it was sent (kept in the producer's
    dead-letter file)."""
    info = {
        "reason": reason[:2000],
        "sha256": hashlib.sha256(payload).hexdigest(),
        "bytes": len(payload),
    }
    return json.dumps({REFUSED_KEY: info}, sort_keys=True, separators=(",", ":"))
