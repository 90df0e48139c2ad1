"""Tool traits, declared once (SPEC AGT-1, AGT-2, DEC-1, DEC-3 rev 2).

Both sides of the trust boundary read this table: the agent's registry builds its specs
from it, the decision service takes the read-only trait (plan mode), the edit tools
(acceptEdits), the primary content field (ALLOW rules, and a content field DENY/ASK rules
see) and the set of declared tools (the implicit default ALLOW, P8, applies only to them),
and the executor names its own tools from it. Before this table each side kept a copy and
they drifted (the declared primary field was never read, so ``DENY search_papers(secret)``
never matched). No gRPC, no service imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "EDIT_TOOLS",
    "EXECUTOR_TOOLS",
    "PRIMARY_FIELDS",
    "READ_ONLY_TOOLS",
    "SEED_TOOLS",
    "Interrupt",
    "Location",
    "ToolTraits",
    "primary_field",
]


class Interrupt(Enum):
    """How a running call reacts to a user cancel."""

    CANCEL = "cancel"
    """Stop at once (read-only or restartable work)."""
    BLOCK = "block"
    """Finish first: the call has side effects that must not be cut in half."""


class Location(Enum):
    """Where a tool runs."""

    EXECUTOR = "executor"
    """Built into the executor and run inside its sandbox (its grant is verified there)."""
    BUILTIN = "builtin"
    """Implemented inside the agent (todo_write, ask_user, subagent, ...)."""
    REMOTE = "remote"
    """Implemented by another backend behind the ToolProvider gRPC interface."""


@dataclass(frozen=True)
class ToolTraits:
    """What every side needs to know about a tool, independent of its description/schema."""

    name: str
    """The tool name as the model calls it."""
    read_only: bool
    """Has no side effects (plan mode lets it run)."""
    concurrency_safe: bool
    """May run in parallel with other concurrency-safe calls."""
    interrupt: Interrupt
    """Reaction to a user cancel."""
    location: Location
    """Where it runs."""
    primary_field: str = ""
    """The argument ALLOW rules match (its content); "" when the tool has none."""
    path_fields: tuple[str, ...] = ()
    """Arguments that hold filesystem paths (normalised before matching)."""
    sibling_abort: bool = False
    """Its failure cancels the other calls of the same parallel batch."""


def _safe(
    name: str, location: Location, primary: str = "", paths: tuple[str, ...] = ()
) -> ToolTraits:
    return ToolTraits(name, True, True, Interrupt.CANCEL, location, primary, paths)


def _serial(
    name: str,
    location: Location,
    interrupt: Interrupt,
    primary: str = "",
    paths: tuple[str, ...] = (),
    *,
    sibling_abort: bool = False,
) -> ToolTraits:
    return ToolTraits(name, False, False, interrupt, location, primary, paths, sibling_abort)


_EX, _BI, _RE = Location.EXECUTOR, Location.BUILTIN, Location.REMOTE
_C, _B = Interrupt.CANCEL, Interrupt.BLOCK

SEED_TOOLS: Mapping[str, ToolTraits] = {
    t.name: t
    for t in (
        # Read-only, concurrency-safe, CANCEL (AGT-2).
        _safe("search_papers", _RE, "query"),
        _safe("get_paper_metadata", _RE, "paper_id"),
        _safe("get_paper_content", _RE, "paper_id"),
        _safe("rag_search", _RE, "query"),
        _safe("query_target", _RE, "name"),
        _safe("read_file", _EX, "file_path", ("file_path",)),
        _safe("grep_files", _EX, "path", ("path",)),
        _safe("glob_files", _EX, "pattern", ("path",)),
        _safe("load_skill", _BI, "name"),
        # Serial, CANCEL.
        _serial("download_paper", _RE, _C, "paper_id", sibling_abort=True),
        _serial("parse_paper", _RE, _C, "paper_id", sibling_abort=True),
        _serial("file_write", _EX, _C, "file_path", ("file_path",)),
        _serial("file_edit", _EX, _C, "file_path", ("file_path",)),
        _serial("save_note", _RE, _C),
        _serial("todo_write", _BI, _C),
        _serial("compress_context", _BI, _C),
        # Serial, BLOCK: side effects that must complete.
        _serial("save_memory", _BI, _B),
        _serial("run_bash", _EX, _B, "command", ("working_dir",)),
        _serial("ask_user", _BI, _B),
        _serial("subagent", _BI, _B),
    )
}
"""The seed's classification table (AGT-2): the tools every deployment declares."""

EXECUTOR_TOOLS: tuple[str, ...] = tuple(
    t.name for t in SEED_TOOLS.values() if t.location is Location.EXECUTOR
)
"""The executor's built-in tools: a grant for one of them is verified by the executor."""

READ_ONLY_TOOLS: frozenset[str] = frozenset(t.name for t in SEED_TOOLS.values() if t.read_only)
"""The seed's read-only tools (plan mode lets these run)."""

EDIT_TOOLS: frozenset[str] = frozenset({"file_write", "file_edit"})
"""Tools acceptEdits may settle when the path is inside the working directory."""

PRIMARY_FIELDS: Mapping[str, str] = {
    t.name: t.primary_field for t in SEED_TOOLS.values() if t.primary_field
}
"""The declared primary content field per seed tool."""


def primary_field(tool_name: str) -> str:
    """The declared primary content field of a seed tool ("" when none or unknown)."""
    return PRIMARY_FIELDS.get(tool_name, "")
