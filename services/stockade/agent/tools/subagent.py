"""``subagent``: delegate a task to a child loop with fresh context and fewer rights.

The child's scope (profile, tools never wider than the parent's, depth, budget) comes
from ``stockade.agent.subagent``; the child runs the same loop, silently, and its answer
is the call's result. A child stopped by the denial limit halts the parent too.
"""

from __future__ import annotations

from stockade.agent.events import SubagentStarted, SubagentStopped
from stockade.agent.lifecycle import LifecycleEvent, SubagentStartDetails, SubagentStopDetails
from stockade.agent.limits import Termination
from stockade.agent.outcome import ExecutionStatus, Outcome, Verdict, denied_outcome, ok_outcome
from stockade.agent.subagent import initial_messages, parse_request, spawn_scope
from stockade.agent.tools.base import BuiltinTool, ToolContext, obj, seed_spec
from stockade.errors import StockadeError

__all__ = ["TOOL"]

_STR = {"type": "string"}


async def _run(ctx: ToolContext) -> Outcome:
    turn, parent, hooks = ctx.turn, ctx.scope, ctx.loop.hooks
    try:
        request = parse_request(ctx.arguments)
        child = spawn_scope(parent, request, max_depth=ctx.loop.limits.max_subagent_depth)
    except StockadeError as exc:
        return denied_outcome(exc.message)
    turn.emit(parent.name, SubagentStarted(child.name, child.profile, request.task))
    details = SubagentStartDetails(child.profile, request.task)
    await hooks.emit(LifecycleEvent(child.session_id, details, child.name))
    result = await ctx.loop.run(turn, child, initial_messages(child, request))
    turn.emit(parent.name, SubagentStopped(child.name, result.reason, result.answer))
    await hooks.emit(
        LifecycleEvent(
            child.session_id, SubagentStopDetails(result.reason, result.detail), child.name
        )
    )
    if result.reason is Termination.COMPLETED:
        return ok_outcome(result.answer)
    outcome = Outcome(
        ExecutionStatus.ERROR,
        Verdict.ALLOW,
        f"Subagent {child.name} stopped ({result.reason.value}: {result.detail})."
        + (f" Partial answer: {result.answer}" if result.answer else ""),
        result.detail,
    )
    if result.reason is Termination.DENIAL_HALT:
        outcome.halt, outcome.halt_reason = True, result.detail
    return outcome


TOOL = BuiltinTool(
    seed_spec(
        "subagent",
        "Delegate a task to a subagent with fresh context and a restricted tool set.",
        obj(
            ["task"],
            task={"type": "string", "minLength": 1},
            profile=_STR,
            tools={"type": "array", "items": _STR},
            name=_STR,
        ),
    ),
    _run,
)
