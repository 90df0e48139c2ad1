"""file_write: create or overwrite a file, with a size limit and stale-write protection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stockade.errors import PathRefused, StaleWrite
from stockade.executor.tools.base import ExecContext, ToolResult
from stockade.executor.tools.support import (
    BlockingTool,
    atomic_write,
    load_existing,
    ok_result,
    refused_result,
    str_arg,
    write_failure,
)

__all__ = ["FileWriteTool"]


class FileWriteTool(BlockingTool):
    """Writes ``content`` to ``file_path``.

    A new file (and its missing parent folders) is created; an existing one is replaced
    only if this session read it and it has not changed since (EXE-11).
    """

    name = "file_write"

    def _run(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
        file_path = str_arg(args, "file_path")
        content = str_arg(args, "content")
        data = content.encode("utf-8", errors="surrogatepass")
        limit = ctx.limits.max_file_write_bytes
        if len(data) > limit:
            return refused_result(
                f"content is {len(data)} bytes, over the {limit} byte limit of file_write"
            )
        sandbox = ctx.sandbox
        decision = sandbox.check(file_path, write=True)
        if not decision.allowed:
            return refused_result(decision.reason)
        read_state = ctx.read_state
        try:
            existing = load_existing(sandbox, decision.resolved)
            if existing is not None:
                read_state.require_fresh(ctx.session_id, decision.resolved, existing[0])
            atomic_write(
                sandbox,
                decision.resolved,
                data,
                read_state=read_state,
                session_id=ctx.session_id,
            )
        except (PathRefused, StaleWrite, OSError) as exc:
            return write_failure(exc, "write", decision.resolved)
        verb = "Updated" if existing is not None else "Created"
        return ok_result(ctx, f"{verb} {decision.resolved} ({len(data)} bytes)")
