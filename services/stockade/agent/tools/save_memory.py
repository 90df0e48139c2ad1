"""``save_memory``: persist a fact for later sessions.

With a memory folder the entry is masked, appended durably and shown in every later
turn's system prompt (``stockade.agent.memory``); without one it is kept for this
session only, and the answer says so.
"""

from __future__ import annotations

import asyncio

from stockade.agent.memory import MemoryRefused, check_content
from stockade.agent.outcome import Outcome, error_outcome, ok_outcome
from stockade.agent.tools.base import BuiltinTool, ToolContext, obj, seed_spec

__all__ = ["TOOL"]


async def _run(ctx: ToolContext) -> Outcome:
    content = str(ctx.arguments.get("content", ""))
    memory, scope = ctx.loop.memory, ctx.scope
    try:
        if memory is None:
            try:
                count = ctx.loop.sessions.add_memory(scope.session_id, check_content(content))
            except ValueError as exc:
                return error_outcome(f"Error: {exc}", "memory not saved")
            return ok_outcome(
                f"Saved to this session's memory ({count} entries) "
                "(not persisted: no memory_dir configured)."
            )
        saved = await asyncio.to_thread(
            memory.append, session_id=scope.session_id, agent=scope.name, content=content
        )
    except MemoryRefused as exc:
        return error_outcome(exc.message, "memory not saved")
    masked = " Secrets in it were masked." if saved.masked else ""
    return ok_outcome(
        f"Saved to memory ({saved.bytes_used} of {memory.max_file_bytes} bytes used); "
        f"later sessions will see it.{masked}"
    )


TOOL = BuiltinTool(
    seed_spec(
        "save_memory",
        "Persist a fact for later sessions.",
        obj(["content"], content={"type": "string"}),
    ),
    _run,
)
