"""Permission modes (DEC-4) and how they change a verdict after precedence."""

from __future__ import annotations

from enum import Enum

from stockade.errors import InvalidArgument


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

EDIT_TOOLS = frozenset({"file_write", "file_edit"})
"""Tools acceptEdits may settle when the path is inside the working directory."""

READ_ONLY_TOOLS = frozenset(
    {
        "search_papers",
        "get_paper_metadata",
        "get_paper_content",
        "rag_search",
        "query_target",
        "read_file",
        "grep_files",
        "glob_files",
        "load_skill",
    }
)
"""The seed's read-only tools (AGT-2); plan mode lets these run."""


def parse_mode(text: str) -> Mode:
    """Parse a mode name (``acceptEdits``, ``accept_edits``, ``ACCEPT_EDITS`` all work)."""
    mode = _ALIASES.get(text.strip().lower().replace("-", "_"))
    if mode is None:
        mode = _ALIASES.get(text.strip().lower().replace("-", "").replace("_", ""))
    if mode is None:
        names = ", ".join(m.value for m in Mode)
        raise InvalidArgument(f"unknown permission mode {text!r}; expected one of {names}")
    return mode
