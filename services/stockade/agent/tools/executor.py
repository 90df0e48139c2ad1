"""The executor's six tools as the agent offers them to the model.

Only their descriptions and argument schemas live here (traits come from the contract
table): they run in the executor's sandbox, where the pipeline sends each call with its
grant, never inside the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stockade.agent.registry import ToolSpec
from stockade.agent.tools.base import obj, seed_spec

__all__ = ["EXECUTOR_SPECS"]

_STR: Mapping[str, Any] = {"type": "string"}
_INT: Mapping[str, Any] = {"type": "integer", "minimum": 0}

EXECUTOR_SPECS: tuple[ToolSpec, ...] = (
    seed_spec(
        "read_file",
        "Read a text file inside the allowed roots.",
        obj(["file_path"], file_path=_STR, offset=_INT, limit=_INT),
    ),
    seed_spec(
        "grep_files",
        "Search file contents with a regular expression.",
        obj(["pattern"], pattern=_STR, path=_STR, glob=_STR),
    ),
    seed_spec(
        "glob_files",
        "List files matching a glob pattern.",
        obj(["pattern"], pattern=_STR, path=_STR),
    ),
    seed_spec(
        "file_write",
        "Create or overwrite a text file.",
        obj(["file_path", "content"], file_path=_STR, content=_STR),
    ),
    seed_spec(
        "file_edit",
        "Replace a unique string in a file that was read first.",
        obj(
            ["file_path", "old_string", "new_string"],
            file_path=_STR,
            old_string=_STR,
            new_string=_STR,
            replace_all={"type": "boolean"},
        ),
    ),
    seed_spec(
        "run_bash",
        "Run a bash command in the sandbox.",
        obj(
            ["command"],
            command={"type": "string", "minLength": 1},
            timeout_s={"type": "number", "minimum": 0},
            description=_STR,
        ),
    ),
)
"""Specs of the executor's tools (location EXECUTOR)."""
