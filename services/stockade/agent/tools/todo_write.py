"""``todo_write``: replace the session's task list (kept in memory while the agent runs)."""

from __future__ import annotations

from stockade.agent.outcome import Outcome, error_outcome, ok_outcome
from stockade.agent.tools.base import BuiltinTool, ToolContext, obj, seed_spec

__all__ = ["TOOL"]

_STR = {"type": "string"}


async def _run(ctx: ToolContext) -> Outcome:
    todos = list(ctx.arguments.get("todos", []))
    try:
        ctx.loop.sessions.set_todos(ctx.scope.session_id, todos)
    except ValueError as exc:
        return error_outcome(f"Error: {exc}", str(exc))
    done = sum(1 for t in todos if t.get("status") == "completed")
    return ok_outcome(f"Todo list updated: {len(todos)} items, {done} completed.")


TOOL = BuiltinTool(
    seed_spec(
        "todo_write",
        "Replace the task list.",
        obj(
            ["todos"],
            todos={
                "type": "array",
                "items": obj(
                    ["content", "status"],
                    content=_STR,
                    status={"enum": ["pending", "in_progress", "completed"]},
                ),
            },
        ),
    ),
    _run,
)
