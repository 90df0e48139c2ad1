"""``ask_user``: ask the user a question; the turn ends with the question as its answer.

Subagents never reach this handler (a silent context refuses the call in the pipeline).
"""

from __future__ import annotations

from stockade.agent.outcome import ExecutionStatus, Outcome, Verdict
from stockade.agent.tools.base import BuiltinTool, ToolContext, obj, seed_spec

__all__ = ["TOOL"]


async def _run(ctx: ToolContext) -> Outcome:
    question = str(ctx.arguments.get("question", ""))
    return Outcome(
        ExecutionStatus.OK, Verdict.ALLOW, question, "question for the user", ends_turn=True
    )


TOOL = BuiltinTool(
    seed_spec(
        "ask_user",
        "Ask the user a question and wait for the answer.",
        obj(["question"], question={"type": "string"}),
    ),
    _run,
)
