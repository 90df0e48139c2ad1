"""``load_skill``: load a skill's instructions by name from the skills folder.

Offered only when a skills folder is configured (the core then describes the available
skills in the spec's description); without one the call is an error.
"""

from __future__ import annotations

import asyncio

from stockade.agent.outcome import Outcome, error_outcome, ok_outcome
from stockade.agent.skills import SkillError
from stockade.agent.tools.base import BuiltinTool, ToolContext, obj, seed_spec

__all__ = ["TOOL"]


async def _run(ctx: ToolContext) -> Outcome:
    skills = ctx.loop.skills
    if skills is None:
        return error_outcome("Error: load_skill is not available in this agent", "not available")
    try:
        text = await asyncio.to_thread(skills.load, str(ctx.arguments.get("name", "")))
    except SkillError as exc:
        return error_outcome(exc.message, "skill not loaded")
    return ok_outcome(text)


TOOL = BuiltinTool(
    seed_spec(
        "load_skill",
        "Load a skill's instructions by name.",
        obj(["name"], name={"type": "string"}),
    ),
    _run,
)
