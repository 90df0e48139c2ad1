"""``compress_context``: the model asks for its conversation to be summarised now.

The same summary as automatic compaction (``stockade.agent.compaction``), between the
PreCompact and PostCompact lifecycle events; the calling agent's history is replaced.
"""

from __future__ import annotations

from stockade.agent.compaction import CompactionError, Compactor
from stockade.agent.lifecycle import LifecycleEvent, PostCompactDetails, PreCompactDetails
from stockade.agent.outcome import Outcome, error_outcome, ok_outcome
from stockade.agent.tools.base import BuiltinTool, ToolContext, obj, seed_spec

__all__ = ["TOOL"]


async def _run(ctx: ToolContext) -> Outcome:
    scope, hooks = ctx.scope, ctx.loop.hooks
    await hooks.emit(LifecycleEvent(scope.session_id, PreCompactDetails(), scope.name))
    try:
        result = await Compactor(ctx.turn.provider).manual(ctx.messages)
    except CompactionError as exc:
        return error_outcome(f"Error: {exc}", str(exc))
    ctx.loop.apply_compaction(ctx.turn, scope, ctx.messages, result)
    await hooks.emit(
        LifecycleEvent(
            scope.session_id,
            PostCompactDetails(result.kind, result.tokens_before, result.tokens_after),
            scope.name,
        )
    )
    return ok_outcome(
        f"Context compacted from about {result.tokens_before} to {result.tokens_after} tokens."
    )


TOOL = BuiltinTool(
    seed_spec(
        "compress_context",
        "Summarise the conversation so far to free context space.",
        obj(),
    ),
    _run,
)
