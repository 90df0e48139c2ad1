"""The hook pipeline (AGT-3, AGT-4): programmable interception points around tool calls.

Hooks see every lifecycle event and can steer tool calls:

* PreToolUse: ``Continue``, ``Block`` (the first Block ends the chain), ``MutateInput``
  (contexts accumulate, the last MutateInput's arguments win) and ``PermissionRequired``
  (feeds the decision service's P4; a later Continue never erases it — the seed's bug).
* PostToolUse: ``Continue`` or ``MutateOutput`` (outputs chain: each hook sees the output
  the previous one produced, so Redaction placed first protects every later hook).

A hook that raises is judged by its ``fail_closed`` flag: fail-closed hooks block the call
(PreToolUse) or withhold the output (PostToolUse); fail-open hooks are skipped. Lifecycle
errors are logged and never end a turn.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from stockade.agent.lifecycle import LifecycleEvent
from stockade.v1 import common_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- actions


@dataclass(frozen=True)
class Continue:
    """Let the call (or output) go on unchanged."""


@dataclass(frozen=True)
class Block:
    """Refuse the call; ends the PreToolUse chain."""

    reason: str
    """Why, shown to the model and in the audit trail."""


@dataclass(frozen=True)
class MutateInput:
    """Replace the call's arguments and/or add context for the model."""

    updated_args: Mapping[str, Any] | None = None
    """New arguments, or None to keep them."""
    additional_context: str = ""
    """Text appended for the model; contexts of several hooks accumulate."""


@dataclass(frozen=True)
class PermissionRequired:
    """Require an approval even if the rules would allow (DEC-3 P4)."""

    message: str
    """Shown to approvers."""


@dataclass(frozen=True)
class MutateOutput:
    """Replace the output the model (and later hooks) see."""

    content: str
    """The new output."""


PreAction = Continue | Block | MutateInput | PermissionRequired
PostAction = Continue | MutateOutput
CONTINUE = Continue()


# ---------------------------------------------------------------- contexts


class CallStatus(Enum):
    """How a call ended, as PostToolUse hooks see it (mirrors the audit statuses)."""

    OK = "OK"
    FAIL = "FAIL"
    DENIED = "DENIED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    """The agent stopped waiting for the tool (deadline, broken connection): it may
    have run, in part or whole."""


@dataclass(frozen=True)
class ToolCallContext:
    """A tool call as hooks see it."""

    session_id: str
    """The decision session."""
    call_id: str
    """Unique id of the call within the session."""
    tool_name: str
    """The tool."""
    arguments: Mapping[str, Any]
    """The arguments (already mutated by earlier hooks, in PreToolUse)."""
    agent_name: str = "lead"
    """``lead`` or the subagent's name."""
    step: int = 0
    """The ReAct step, from 1."""
    from_subagent: bool = False
    """True when a subagent makes the call."""


@dataclass(frozen=True)
class DecisionInfo:
    """What the decision service said about a call, for PostToolUse hooks and the audit."""

    verdict: str = ""
    """``ALLOW``, ``ASK`` or ``DENY`` (empty when no decision was made)."""
    winning_rule: common_pb2.Rule | None = None
    """The rule that decided, as the decision service returned it (None when no decision
    was made)."""
    conflicts: tuple[d_pb2.Conflict, ...] = ()
    """Every rule or signal the winning rule overrode, as the decision service returned
    them."""
    reason: str = ""
    """The decision's human reason for its verdict."""
    policy_version: str = ""
    """Hash of the compiled policy."""

    @property
    def matched_rule(self) -> str:
        """The winning rule's pattern ("" when none)."""
        return self.winning_rule.pattern if self.winning_rule is not None else ""


@dataclass(frozen=True)
class ToolResultContext:
    """A finished call as PostToolUse hooks see it."""

    call: ToolCallContext
    """The call (with its final arguments)."""
    content: str
    """The output the model would see (possibly changed by earlier hooks)."""
    status: CallStatus = CallStatus.OK
    """How the call ended."""
    elapsed_ms: int = 0
    """Wall time of the execution."""
    decision: DecisionInfo = field(default_factory=DecisionInfo)
    """The permission decision."""
    trace_id: str = ""
    """OpenTelemetry trace id (32 hex), when known."""
    span_id: str = ""
    """OpenTelemetry span id of the tool call (16 hex), when known."""

    @property
    def is_error(self) -> bool:
        """True unless the call ran and succeeded."""
        return self.status is not CallStatus.OK


# ---------------------------------------------------------------- hooks


class Hook:
    """Base class for hooks: override what you need; the defaults do nothing."""

    name: str = "hook"
    """Shown in block reasons and logs."""
    fail_closed: bool = True
    """On an exception: True blocks the call / withholds the output; False skips the hook."""

    async def pre_tool_use(self, call: ToolCallContext) -> PreAction:
        """Called before the permission check of every call."""
        return CONTINUE

    async def post_tool_use(self, result: ToolResultContext) -> PostAction:
        """Called after every call ended (ran, failed, was denied or cancelled)."""
        return CONTINUE

    async def on_event(self, event: LifecycleEvent) -> None:
        """Called on lifecycle events."""


@dataclass(frozen=True)
class PreToolUseResult:
    """The combined answer of the PreToolUse chain."""

    arguments: Mapping[str, Any]
    """The final arguments (the last MutateInput's, else the original)."""
    blocked: bool = False
    """True when a hook blocked the call."""
    block_reason: str = ""
    """The blocking hook's reason."""
    blocked_by: str = ""
    """The blocking hook's name."""
    additional_context: tuple[str, ...] = ()
    """Every MutateInput context, in hook order."""
    permission_required: tuple[str, ...] = ()
    """Messages of every PermissionRequired, in hook order (non-empty → ASK, P4)."""
    mutated_by: tuple[str, ...] = ()
    """Hooks that changed the arguments."""


@dataclass(frozen=True)
class PostToolUseResult:
    """The combined answer of the PostToolUse chain."""

    content: str
    """The output after every MutateOutput."""
    mutated_by: tuple[str, ...] = ()
    """Hooks that changed the output."""


class HookPipeline:
    """Runs hooks in registration order with the exact semantics of AGT-3."""

    def __init__(self, hooks: Iterable[Hook] = ()) -> None:
        self._hooks: list[Hook] = list(hooks)

    @property
    def hooks(self) -> tuple[Hook, ...]:
        """The registered hooks, in order."""
        return tuple(self._hooks)

    def add(self, hook: Hook) -> None:
        """Append a hook to the chain."""
        self._hooks.append(hook)

    def extended(self, hooks: Iterable[Hook]) -> HookPipeline:
        """A new pipeline with this one's hooks followed by ``hooks``."""
        return HookPipeline([*self._hooks, *hooks])

    async def run_pre_tool_use(self, call: ToolCallContext) -> PreToolUseResult:
        """Run the PreToolUse chain for one call."""
        arguments: Mapping[str, Any] = call.arguments
        contexts: list[str] = []
        permission: list[str] = []
        mutated_by: list[str] = []
        current = call
        for hook in self._hooks:
            if current.arguments is not arguments:  # later hooks see the mutated arguments
                current = replace(call, arguments=arguments)
            try:
                action = await hook.pre_tool_use(current)
            except Exception as exc:
                if not hook.fail_closed:
                    log.warning("fail-open hook %s failed in PreToolUse: %s", hook.name, exc)
                    continue
                action = Block(f"hook {hook.name} failed: {_describe(exc)}")
            if isinstance(action, Block):
                return PreToolUseResult(
                    arguments=arguments,
                    blocked=True,
                    block_reason=action.reason,
                    blocked_by=hook.name,
                    additional_context=tuple(contexts),
                    permission_required=tuple(permission),
                    mutated_by=tuple(mutated_by),
                )
            if isinstance(action, MutateInput):
                if action.updated_args is not None:
                    arguments = dict(action.updated_args)
                    mutated_by.append(hook.name)
                if action.additional_context:
                    contexts.append(action.additional_context)
            elif isinstance(action, PermissionRequired):
                permission.append(action.message or f"hook {hook.name} requires permission")
        return PreToolUseResult(
            arguments=arguments,
            additional_context=tuple(contexts),
            permission_required=tuple(permission),
            mutated_by=tuple(mutated_by),
        )

    async def run_post_tool_use(self, result: ToolResultContext) -> PostToolUseResult:
        """Run the PostToolUse chain; each hook sees the previous hook's output."""
        content = result.content
        mutated_by: list[str] = []
        current = result
        for hook in self._hooks:
            if current.content is not content:  # each hook sees the previous one's output
                current = replace(result, content=content)
            try:
                action = await hook.post_tool_use(current)
            except Exception as exc:
                if not hook.fail_closed:
                    log.warning("fail-open hook %s failed in PostToolUse: %s", hook.name, exc)
                    continue
                # The output may hold what this hook was meant to remove: withhold it.
                action = MutateOutput(f"[output withheld: hook {hook.name} failed]")
            if isinstance(action, MutateOutput):
                content = action.content
                mutated_by.append(hook.name)
        return PostToolUseResult(content=content, mutated_by=tuple(mutated_by))

    async def emit(self, event: LifecycleEvent) -> None:
        """Deliver a lifecycle event to every hook; failures are logged, never raised."""
        for hook in self._hooks:
            try:
                await hook.on_event(event)
            except Exception as exc:
                log.warning("hook %s failed on %s: %s", hook.name, event.kind.value, exc)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
