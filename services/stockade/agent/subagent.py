"""Subagents (AGT-5): isolated child loops with least privilege.

A child gets fresh messages (``[system prompt, task]`` only), a silent context (``ask_user``
returns an error; its events reach the caller only as tagged progress), its parent's
decision session and hooks, ``from_subagent=True`` on every call (the decision service
turns ASK into DENY, DEC-5), a tool set narrowed by its profile or by the call and never
wider than its parent's, a bounded depth, and a budget carved out of its parent's.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stockade.agent.hooks import HookPipeline
from stockade.agent.limits import Budget
from stockade.agent.registry import ToolRegistry
from stockade.errors import InvalidArgument, PermissionDenied
from stockade.llm.base import Message

SILENT_ASK_USER_ERROR = (
    "Error: ask_user is not available to subagents (silent context). Decide with the "
    "information you have, or report the open question in your final answer."
)


@dataclass(frozen=True)
class SubagentProfile:
    """A named tool set and instructions for a kind of subagent."""

    name: str
    """Profile name used in the ``subagent`` tool's ``profile`` argument."""
    description: str
    """What it is for."""
    tools: frozenset[str] | None
    """Tools the profile may use (intersected with the parent's); None: the parent's."""
    system_prompt: str
    """The child's system prompt."""
    max_steps: int | None = None
    """The child's own step cap (also clamped by the shared budget)."""
    read_only: bool = False
    """Only the parent's read-only tools (by their declared trait, so a product's
    read-only tools join without the agent naming them)."""


PROFILES: Mapping[str, SubagentProfile] = {
    "explore": SubagentProfile(
        name="explore",
        description="Read-only research: search, read and report.",
        tools=None,
        read_only=True,
        system_prompt=(
            "You are a read-only research subagent. Use the tools to investigate the task, "
            "then answer with a concise report of what you found. You cannot change files "
            "and cannot ask the user questions."
        ),
        max_steps=6,
    ),
    "general": SubagentProfile(
        name="general",
        description="Any of the parent's tools, run without user interaction.",
        tools=None,
        system_prompt=(
            "You are a subagent working on one task for another agent. Complete the task "
            "with the tools you have and answer with the result. You cannot ask the user "
            "questions; calls that would need approval are denied."
        ),
    ),
}
DEFAULT_PROFILE = "explore"


@dataclass(frozen=True)
class AgentScope:
    """Who runs a loop and with which rights: the lead or a subagent."""

    name: str
    """``lead`` or the subagent's name."""
    session_id: str
    """The decision session (inherited by subagents)."""
    registry: ToolRegistry
    """The tools this agent may call."""
    hooks: HookPipeline
    """The hook pipeline (inherited by subagents)."""
    budget: Budget
    """Steps and tokens this agent may spend (carved from its parent's)."""
    depth: int = 0
    """0 for the lead, parent depth + 1 for a subagent."""
    silent: bool = False
    """True in subagents: ask_user errors, no direct user interaction."""
    profile: str = ""
    """The subagent's profile."""
    max_steps: int = 8
    """This agent's own step cap."""

    @property
    def from_subagent(self) -> bool:
        """True when calls must carry ``from_subagent`` (ASK → DENY)."""
        return self.depth > 0


@dataclass(frozen=True)
class SubagentRequest:
    """The ``subagent`` tool's arguments, parsed."""

    task: str
    """What the child must do."""
    profile: str = DEFAULT_PROFILE
    """The profile name."""
    tools: tuple[str, ...] = ()
    """An explicit tool list (narrows the profile further)."""
    name: str = ""
    """Optional name; a unique one is generated otherwise."""


def parse_request(arguments: Mapping[str, Any]) -> SubagentRequest:
    """Parse and check the ``subagent`` tool's arguments."""
    task = arguments.get("task")
    if not isinstance(task, str) or not task.strip():
        raise InvalidArgument("subagent: 'task' must be a non-empty string", field="task")
    profile = arguments.get("profile") or DEFAULT_PROFILE
    if profile not in PROFILES:
        raise InvalidArgument(
            f"subagent: unknown profile {profile!r} (known: {', '.join(sorted(PROFILES))})",
            field="profile",
        )
    tools = arguments.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise InvalidArgument("subagent: 'tools' must be a list of tool names", field="tools")
    name = arguments.get("name") or ""
    if not isinstance(name, str):
        raise InvalidArgument("subagent: 'name' must be a string", field="name")
    return SubagentRequest(task=task, profile=profile, tools=tuple(tools), name=name)


# Unique default names across the process, so audit rows of sibling subagents differ.
_NAME_COUNTER = itertools.count(1)


def child_registry(
    parent: ToolRegistry, profile: SubagentProfile, requested: tuple[str, ...], *, may_nest: bool
) -> ToolRegistry:
    """The child's tools: profile ∩ parent, narrowed to ``requested`` if given.

    A requested tool outside the profile or the parent is refused (never silently added);
    ``subagent`` is removed when the child may not nest deeper.
    """
    allowed = parent.read_only() if profile.read_only else parent
    if profile.tools is not None:
        allowed = allowed.without(n for n in allowed.names() if n not in profile.tools)
    if not may_nest:
        allowed = allowed.without(["subagent"])
    if not requested:
        return allowed
    outside = [name for name in requested if name not in allowed]
    if outside:
        raise PermissionDenied(
            f"subagent profile {profile.name!r} cannot use: {', '.join(outside)}",
            tools=",".join(outside),
        )
    return allowed.restrict(requested)


def spawn_scope(parent: AgentScope, request: SubagentRequest, *, max_depth: int) -> AgentScope:
    """The scope of a new child of ``parent``; raises when depth, tools or budget forbid it."""
    depth = parent.depth + 1
    if depth > max_depth:
        raise PermissionDenied(
            f"subagent depth limit reached ({max_depth}); do the task yourself",
            depth=str(depth),
        )
    profile = PROFILES[request.profile]
    registry = child_registry(parent.registry, profile, request.tools, may_nest=depth < max_depth)
    name = request.name or f"sub-{request.profile}-{next(_NAME_COUNTER)}"
    budget = parent.budget.child(name, max_steps=profile.max_steps)
    own_steps = min(parent.max_steps, profile.max_steps or parent.max_steps)
    return AgentScope(
        name=name,
        session_id=parent.session_id,
        registry=registry,
        hooks=parent.hooks,
        budget=budget,
        depth=depth,
        silent=True,
        profile=profile.name,
        max_steps=max(1, min(own_steps, budget.remaining_steps)),
    )


def initial_messages(scope: AgentScope, request: SubagentRequest) -> list[Message]:
    """A child's fresh conversation: its system prompt and the task, nothing else."""
    return [
        Message(role="system", content=PROFILES[scope.profile].system_prompt),
        Message(role="user", content=request.task),
    ]


def silent_refusal(scope: AgentScope, tool_name: str) -> str | None:
    """The error result for tools a silent context cannot run, else None."""
    if scope.silent and tool_name == "ask_user":
        return SILENT_ASK_USER_ERROR
    return None
