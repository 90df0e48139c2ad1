"""Permission modes (DEC-4) and how they change a verdict after precedence."""

from __future__ import annotations

from enum import Enum

from stockade.contract.tools import EDIT_TOOLS, READ_ONLY_TOOLS
from stockade.errors import InvalidArgument

__all__ = ["EDIT_TOOLS", "READ_ONLY_TOOLS", "Mode", "parse_mode"]


class Mode(Enum):
    """A session's permission mode; values are the names users write in policy files."""

    DEFAULT = "default"
    ACCEPT_EDITS = "acceptEdits"
    BYPASS_PERMISSIONS = "bypassPermissions"
    DONT_ASK = "dontAsk"
    PLAN = "plan"
    AUTO = "auto"


_ALIASES = (
    {m.value.lower(): m for m in Mode}
    | {m.name.lower(): m for m in Mode}
    | {m.name.lower().replace("_", ""): m for m in Mode}
)


def parse_mode(text: str) -> Mode:
    """Parse a mode name (``acceptEdits``, ``accept_edits``, ``ACCEPT_EDITS`` all work)."""
    mode = _ALIASES.get(text.strip().lower().replace("-", "_"))
    if mode is None:
        mode = _ALIASES.get(text.strip().lower().replace("-", "").replace("_", ""))
    if mode is None:
        names = ", ".join(m.value for m in Mode)
        raise InvalidArgument(f"unknown permission mode {text!r}; expected one of {names}")
    return mode
