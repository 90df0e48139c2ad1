"""Remote hooks (AGT-4): backends implementing ``stockade.v1.HookService``.

Each configured endpoint has a timeout and a failure policy. A fail-closed hook that errors
or answers late blocks the call (PreToolUse) or withholds the output (PostToolUse); a
fail-open hook is skipped. Lifecycle events are delivered best-effort.
"""

from __future__ import annotations

import logging
from enum import Enum

import grpc
from pydantic import BaseModel, ConfigDict, Field

from stockade.agent.convert import lifecycle_to_pb
from stockade.agent.hooks import (
    CONTINUE,
    Block,
    Hook,
    MutateInput,
    MutateOutput,
    PermissionRequired,
    PostAction,
    PreAction,
    ToolCallContext,
    ToolResultContext,
)
from stockade.agent.lifecycle import LifecycleEvent
from stockade.contract.toolspec import dict_to_struct, struct_to_dict
from stockade.v1 import common_pb2
from stockade.v1 import hook_service_pb2 as hook_pb2
from stockade.v1 import hook_service_pb2_grpc as hook_grpc

log = logging.getLogger(__name__)


class FailurePolicy(Enum):
    """What an unreachable, failing or late hook means."""

    FAIL_CLOSED = "fail_closed"
    """Block the call / withhold the output."""
    FAIL_OPEN = "fail_open"
    """Go on as if the hook said Continue."""


class RemoteHookConfig(BaseModel):
    """One remote hook endpoint from configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str
    """gRPC target, e.g. ``127.0.0.1:7000`` or ``unix:///run/hooks.sock``."""
    name: str = ""
    """Shown in block reasons; defaults to the address."""
    timeout_s: float = Field(default=2.0, gt=0)
    """Deadline of each hook RPC."""
    failure_policy: FailurePolicy = FailurePolicy.FAIL_CLOSED
    """``fail_closed`` (default) or ``fail_open``."""


def call_to_proto(call: ToolCallContext) -> common_pb2.ToolCall:
    """The hook context as a ``ToolCall`` message."""
    return common_pb2.ToolCall(
        call_id=call.call_id,
        tool_name=call.tool_name,
        arguments=dict_to_struct(call.arguments),
        session_id=call.session_id,
        from_subagent=call.from_subagent,
        agent_name=call.agent_name,
    )


class RemoteHook(Hook):
    """A hook answered by a ``HookService`` over gRPC."""

    def __init__(self, config: RemoteHookConfig, channel: grpc.aio.Channel | None = None) -> None:
        self.config = config
        self.name = config.name or config.address
        self.fail_closed = config.failure_policy is FailurePolicy.FAIL_CLOSED
        self._channel = channel or grpc.aio.insecure_channel(config.address)
        self._owns_channel = channel is None
        self._stub = hook_grpc.HookServiceStub(self._channel)

    async def close(self) -> None:
        """Close the channel if this hook opened it."""
        if self._owns_channel:
            await self._channel.close(None)

    def _failure(self, what: str, exc: BaseException) -> str:
        if isinstance(exc, grpc.aio.AioRpcError):
            detail = f"{exc.code().name}: {exc.details() or ''}".rstrip(": ")
        else:
            detail = type(exc).__name__
        return f"remote hook {self.name} {what} failed ({detail})"

    async def pre_tool_use(self, call: ToolCallContext) -> PreAction:
        """Ask the endpoint; errors and timeouts follow the failure policy."""
        try:
            response = await self._stub.PreToolUse(
                hook_pb2.PreToolUseRequest(call=call_to_proto(call)),
                timeout=self.config.timeout_s,
            )
        except (grpc.aio.AioRpcError, OSError) as exc:
            reason = self._failure("PreToolUse", exc)
            log.warning("%s", reason)
            return Block(reason) if self.fail_closed else CONTINUE
        which = response.WhichOneof("action")
        if which == "block":
            return Block(response.block.reason or f"blocked by remote hook {self.name}")
        if which == "mutate_input":
            mutate = response.mutate_input
            updated = (
                struct_to_dict(mutate.updated_arguments)
                if mutate.HasField("updated_arguments")
                else None
            )
            return MutateInput(updated, mutate.additional_context)
        if which == "permission_required":
            return PermissionRequired(response.permission_required.message)
        return CONTINUE

    async def post_tool_use(self, result: ToolResultContext) -> PostAction:
        """Ask the endpoint; a fail-closed failure withholds the output."""
        try:
            response = await self._stub.PostToolUse(
                hook_pb2.PostToolUseRequest(
                    call=call_to_proto(result.call),
                    content=result.content,
                    is_error=result.is_error,
                ),
                timeout=self.config.timeout_s,
            )
        except (grpc.aio.AioRpcError, OSError) as exc:
            reason = self._failure("PostToolUse", exc)
            log.warning("%s", reason)
            return MutateOutput(f"[output withheld: {reason}]") if self.fail_closed else CONTINUE
        if response.WhichOneof("action") == "mutate_output":
            return MutateOutput(response.mutate_output.content)
        return CONTINUE

    async def on_event(self, event: LifecycleEvent) -> None:
        """Deliver a lifecycle event; failures are logged only."""
        try:
            await self._stub.OnEvent(
                lifecycle_to_pb(event),
                timeout=self.config.timeout_s,
            )
        except (grpc.aio.AioRpcError, OSError) as exc:
            log.warning("%s", self._failure("OnEvent", exc))
