"""file_edit: replace an exact string in a file; unique unless ``replace_all`` (EXE-11)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stockade.errors import PathRefused, StaleWrite
from stockade.executor.tools.base import ExecContext, ToolResult
from stockade.executor.tools.read_file import format_lines, is_binary, split_lines
from stockade.executor.tools.support import (
    BlockingTool,
    atomic_write,
    bool_arg,
    error_result,
    load_existing,
    ok_result,
    refused_result,
    str_arg,
    write_failure,
)

__all__ = ["FileEditTool"]

_SNIPPET_CONTEXT = 3


def _snippet(text: str, index: int, length: int) -> str:
    """The edited region with a few lines around it, numbered like read_file."""
    first = text.count("\n", 0, index)
    last = first + text.count("\n", index, index + length)
    lines = split_lines(text)
    start = max(first - _SNIPPET_CONTEXT, 0)
    return format_lines(lines[start : last + _SNIPPET_CONTEXT + 1], start + 1)


class FileEditTool(BlockingTool):
    """Replaces ``old_string`` by ``new_string`` in ``file_path``.

    ``old_string`` must occur exactly once unless ``replace_all`` is true. The file must
    have been read in this session and be unchanged since. An empty ``old_string`` on a
    file that does not exist creates it with ``new_string``.
    """

    name = "file_edit"

    def _run(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
        file_path = str_arg(args, "file_path")
        old = str_arg(args, "old_string")
        new = str_arg(args, "new_string")
        replace_all = bool_arg(args, "replace_all")
        if old == new:
            return error_result("old_string and new_string are the same: nothing to change")
        sandbox = ctx.sandbox
        decision = sandbox.check(file_path, write=True)
        if not decision.allowed:
            return refused_result(decision.reason)
        resolved = decision.resolved
        read_state = ctx.read_state
        limit = ctx.limits.max_file_write_bytes
        try:
            existing = load_existing(sandbox, resolved)
            if existing is None:
                if old:
                    return error_result(f"{resolved} does not exist")
                text, count, index = new, 1, 0
            else:
                stamp, data = existing
                read_state.require_fresh(ctx.session_id, resolved, stamp)
                if is_binary(data):
                    return error_result(f"{resolved} is a binary file; file_edit edits text")
                try:
                    current = data.decode("utf-8")
                except UnicodeDecodeError:
                    return error_result(f"{resolved} is not UTF-8 text; file_edit edits text")
                if not old:
                    if current:
                        return error_result(
                            f"old_string is empty but {resolved} is not: name the text to replace"
                        )
                    text, count, index = new, 1, 0
                else:
                    count = current.count(old)
                    if count == 0 and "\r\n" in current and "\r" not in old:
                        # The model writes \n; a CRLF file keeps its own line endings.
                        old = old.replace("\n", "\r\n")
                        new = new.replace("\r\n", "\n").replace("\n", "\r\n")
                        count = current.count(old)
                    if count == 0:
                        return error_result(f"old_string was not found in {resolved}")
                    if count > 1 and not replace_all:
                        return error_result(
                            f"old_string occurs {count} times in {resolved}: add surrounding "
                            "context to make it unique, or set replace_all"
                        )
                    index = current.find(old)
                    text = (
                        current.replace(old, new) if replace_all else current.replace(old, new, 1)
                    )
            encoded = text.encode("utf-8", errors="surrogatepass")
            if len(encoded) > limit:
                return refused_result(
                    f"the edited file would be {len(encoded)} bytes, over the {limit} byte limit"
                )
            atomic_write(
                sandbox, resolved, encoded, read_state=read_state, session_id=ctx.session_id
            )
        except (PathRefused, StaleWrite, OSError) as exc:
            return write_failure(exc, "edit", resolved)
        what = "Created" if existing is None else "Edited"
        plural = "s" if count != 1 else ""
        header = f"{what} {resolved}: {count} replacement{plural}. The edited region:\n"
        return ok_result(ctx, header + _snippet(text, index, len(new)))
