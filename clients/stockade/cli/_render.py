"""Human output for protobuf answers: aligned ``field: value`` lines, lists of messages as
tables, enums as words (``medium``, ``allow``, ``pending``), times as ISO 8601.

Every command prints this by default and one JSON object per answer with ``--json``
(proto field names, the form scripts parse), so output is consistent across commands.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

from google.protobuf import json_format
from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.message import Message

_WELL_KNOWN = {
    "google.protobuf.Timestamp",
    "google.protobuf.Duration",
    "google.protobuf.Struct",
    "google.protobuf.Value",
    "google.protobuf.ListValue",
}


def enum_word(enum: EnumDescriptor, number: int) -> str:
    """``RISK_LEVEL_MEDIUM`` → ``medium``: the value name without its type prefix."""
    value = enum.values_by_number.get(number)
    if value is None:
        return str(number)
    prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"
    word = value.name.removeprefix(prefix).lower()
    if enum.name == "PermissionMode":
        # Modes are spelled as the CLI and the policy files take them: acceptEdits, dontAsk.
        head, *rest = word.split("_")
        word = head + "".join(part.capitalize() for part in rest)
    return word


def plain(msg: Message) -> dict[str, Any]:
    """A message as plain Python values with enums as words (set fields only)."""
    out: dict[str, Any] = {}
    for fd, value in msg.ListFields():
        if fd.message_type is not None and fd.message_type.full_name in _WELL_KNOWN:
            out[fd.name] = (
                [json_format.MessageToDict(v) for v in value]
                if fd.is_repeated
                else json_format.MessageToDict(value)
            )
        elif fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            out[fd.name] = dict(value)
        elif fd.message_type is not None:
            out[fd.name] = [plain(v) for v in value] if fd.is_repeated else plain(value)
        elif fd.enum_type is not None:
            out[fd.name] = (
                [enum_word(fd.enum_type, v) for v in value]
                if fd.is_repeated
                else enum_word(fd.enum_type, value)
            )
        else:
            out[fd.name] = list(value) if fd.is_repeated else value
    return out


def _cell(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def write_table(rows: list[dict[str, Any]], out: TextIO, indent: str = "") -> None:
    """Rows (dicts) as an aligned table; columns in first-seen order."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out.write(
        indent
        + "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
        + "\n"
    )
    for r in cells:
        out.write(
            indent + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n"
        )


def write_plain(data: dict[str, Any], out: TextIO, indent: str = "") -> None:
    """``field: value`` lines, nested messages indented, lists of messages as tables."""
    if not data:
        out.write(f"{indent}(empty)\n")
        return
    width = max(len(k) for k in data)
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out.write(f"{indent}{key}:\n")
            write_table(value, out, indent + "  ")
        elif isinstance(value, dict) and value and key not in ("arguments",):
            out.write(f"{indent}{key}:\n")
            write_plain(value, out, indent + "  ")
        else:
            out.write(f"{indent}{(key + ':').ljust(width + 1)} {_cell(value)}\n")


def write_message(msg: Message, out: TextIO, *, as_json: bool) -> None:
    """One answer: a JSON line with ``as_json``, else the human form."""
    if as_json:
        data = json_format.MessageToDict(msg, preserving_proto_field_name=True)
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        write_plain(plain(msg), out)
    out.flush()
