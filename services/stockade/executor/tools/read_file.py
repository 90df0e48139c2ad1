"""read_file: a file's lines, numbered like ``cat -n``, with offset and limit (EXE-11)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Any

from stockade.errors import PathRefused
from stockade.executor.readstate import stamp_fd
from stockade.executor.tools.base import ExecContext, ToolResult
from stockade.executor.tools.support import (
    ArgError,
    BlockingTool,
    error_result,
    int_arg,
    ok_result,
    refused_result,
    str_arg,
)

__all__ = ["MAX_READ_BYTES", "ReadFileTool", "format_lines", "is_binary"]

DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
MAX_READ_BYTES = 32 * 1024 * 1024
INLINE_READ_BYTES = 64 * 1024
"""Files up to this size are read without a thread hand-off (a local read of 64 KiB
takes microseconds; the hand-off about 0.1 ms)."""
_SNIFF_BYTES = 8192


def is_binary(data: bytes) -> bool:
    """Binary detection as git and grep do it: a NUL byte in the first 8 KiB."""
    return b"\0" in data[:_SNIFF_BYTES]


_CUT_NOTE = f" [... line cut at {MAX_LINE_CHARS} characters]"


def format_lines(lines: list[str], first_number: int) -> str:
    """``cat -n`` style: right-aligned line number, a tab, the line (long lines cut)."""
    return "\n".join(
        [
            f"{number:>6}\t{line}"
            if len(line) <= MAX_LINE_CHARS
            else f"{number:>6}\t{line[:MAX_LINE_CHARS]}{_CUT_NOTE}"
            for number, line in enumerate(lines, start=first_number)
        ]
    )


def split_lines(text: str) -> list[str]:
    """Lines without their terminators (``\\n`` or ``\\r\\n``); no phantom last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


class ReadFileTool(BlockingTool):
    """Reads a text file inside the roots and records the read for stale-write checks."""

    name = "read_file"

    def run_now(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult | None:
        """Small regular files are read on the event loop, with one path check (the
        checks run there for Inspect anyway); a larger file goes to a worker thread, and
        so does every read when the read state waits for a shared store."""
        if ctx.read_state.blocking:
            return None
        try:
            return self._read(args, ctx, max_bytes=INLINE_READ_BYTES)
        except ArgError as exc:
            return error_result(str(exc))

    def _run(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
        result = self._read(args, ctx, max_bytes=MAX_READ_BYTES)
        assert result is not None  # the limit below is an error result, not a hand-off
        return result

    def _read(
        self, args: Mapping[str, Any], ctx: ExecContext, *, max_bytes: int
    ) -> ToolResult | None:
        """The call's result, or None when the file is over ``max_bytes`` but within
        ``MAX_READ_BYTES`` (too big to read here, not too big to read)."""
        file_path = str_arg(args, "file_path")
        offset = int_arg(args, "offset", default=1, minimum=0)
        limit = int_arg(args, "limit", default=DEFAULT_LIMIT, minimum=1)
        sandbox = ctx.sandbox
        decision = sandbox.check(file_path)
        if not decision.allowed:
            return refused_result(decision.reason)
        if not os.path.lexists(decision.resolved):
            return error_result(f"{decision.resolved} does not exist")
        try:
            fd = sandbox.open_checked(decision, os.O_RDONLY, path=file_path)
        except PathRefused as exc:
            return refused_result(exc.message)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                return error_result(f"{decision.resolved} is a directory: use glob_files")
            if st.st_size > MAX_READ_BYTES:
                return error_result(
                    f"{decision.resolved} is {st.st_size} bytes, over the "
                    f"{MAX_READ_BYTES} byte limit of read_file"
                )
            if st.st_size > max_bytes:
                return None
            stamp, data = stamp_fd(fd)
        finally:
            os.close(fd)
        ctx.read_state.record(ctx.session_id, decision.resolved, stamp)
        if is_binary(data):
            return error_result(
                f"{decision.resolved} is a binary file ({len(data)} bytes); not shown"
            )
        lines = split_lines(data.decode("utf-8", errors="replace"))
        start = max(offset, 1)
        if not lines:
            return ok_result(ctx, f"({decision.resolved} is empty)")
        if start > len(lines):
            return ok_result(
                ctx,
                f"({decision.resolved} has {len(lines)} lines; offset {start} is past the end)",
            )
        chosen = lines[start - 1 : start - 1 + limit]
        text = format_lines(chosen, start)
        remaining = len(lines) - (start - 1 + len(chosen))
        if remaining > 0:
            text += f"\n... ({remaining} more lines; read on with offset={start + len(chosen)})"
        return ok_result(ctx, text)
