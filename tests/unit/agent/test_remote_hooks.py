"""Remote hooks against a real grpc.aio HookService on port 0: slow, failing, blocking."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from stockade.agent.hooks import (
    HookPipeline,
    ToolCallContext,
    ToolResultContext,
)
from stockade.agent.lifecycle import LifecycleEvent, SessionStopDetails
from stockade.agent.limits import Termination
from stockade.agent.remote_hooks import FailurePolicy, RemoteHook, RemoteHookConfig
from stockade.contract.toolspec import dict_to_struct, struct_to_dict
from stockade.v1 import hook_service_pb2 as hook_pb2
from stockade.v1 import hook_service_pb2_grpc as hook_grpc

CALL = ToolCallContext(
    session_id="s1", call_id="c1", tool_name="run_bash", arguments={"command": "ls"}
)


class Service(hook_grpc.HookServiceServicer):
    """A scriptable HookService."""

    def __init__(self) -> None:
        self.mode = "continue"
        self.events: list[hook_pb2.OnEventRequest] = []
        self.seen: list[hook_pb2.PreToolUseRequest] = []

    async def PreToolUse(
        self, request: hook_pb2.PreToolUseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> hook_pb2.PreToolUseResponse:
        self.seen.append(request)
        if self.mode == "slow":
            await asyncio.sleep(5)
        if self.mode == "error":
            await context.abort(grpc.StatusCode.INTERNAL, "hook exploded")
        if self.mode == "block":
            return hook_pb2.PreToolUseResponse(block=hook_pb2.BlockAction(reason="no bash here"))
        if self.mode == "mutate":
            return hook_pb2.PreToolUseResponse(
                mutate_input=hook_pb2.MutateInputAction(
                    updated_arguments=dict_to_struct({"command": "ls -la"}),
                    additional_context="listing expanded",
                )
            )
        if self.mode == "ask":
            return hook_pb2.PreToolUseResponse(
                permission_required=hook_pb2.PermissionRequiredAction(message="ops must approve")
            )
        response = hook_pb2.PreToolUseResponse()
        getattr(response, "continue").SetInParent()
        return response

    async def PostToolUse(
        self, request: hook_pb2.PostToolUseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> hook_pb2.PostToolUseResponse:
        if self.mode == "slow":
            await asyncio.sleep(5)
        if self.mode == "error":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "down")
        return hook_pb2.PostToolUseResponse(
            mutate_output=hook_pb2.MutateOutputAction(content=request.content.upper())
        )

    async def OnEvent(
        self, request: hook_pb2.OnEventRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> hook_pb2.OnEventResponse:
        self.events.append(request)
        return hook_pb2.OnEventResponse()


@pytest.fixture
async def hook_server() -> AsyncIterator[tuple[Service, str]]:
    server = grpc.aio.server()
    service = Service()
    hook_grpc.add_HookServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield service, f"127.0.0.1:{port}"
    await server.stop(None)


def make_hook(address: str, policy: FailurePolicy, timeout: float = 0.3) -> RemoteHook:
    return RemoteHook(
        RemoteHookConfig(address=address, name="remote", timeout_s=timeout, failure_policy=policy)
    )


async def run_pre(hook: RemoteHook) -> tuple[bool, str]:
    try:
        result = await HookPipeline([hook]).run_pre_tool_use(CALL)
    finally:
        await hook.close()
    return result.blocked, result.block_reason


async def test_remote_block_mutate_and_permission(hook_server: tuple[Service, str]) -> None:
    service, address = hook_server
    hook = make_hook(address, FailurePolicy.FAIL_OPEN, timeout=5)
    pipeline = HookPipeline([hook])
    service.mode = "block"
    blocked = await pipeline.run_pre_tool_use(CALL)
    assert blocked.blocked and blocked.block_reason == "no bash here"
    assert struct_to_dict(service.seen[0].call.arguments) == {"command": "ls"}
    assert service.seen[0].call.session_id == "s1"
    service.mode = "mutate"
    mutated = await pipeline.run_pre_tool_use(CALL)
    assert mutated.arguments == {"command": "ls -la"}
    assert mutated.additional_context == ("listing expanded",)
    service.mode = "ask"
    asked = await pipeline.run_pre_tool_use(CALL)
    assert asked.permission_required == ("ops must approve",) and not asked.blocked
    service.mode = "continue"
    post = await pipeline.run_post_tool_use(ToolResultContext(call=CALL, content="out"))
    assert post.content == "OUT"
    await pipeline.emit(
        LifecycleEvent("s1", SessionStopDetails(Termination.COMPLETED, "answered", 3))
    )
    assert service.events[0].kind == hook_pb2.LIFECYCLE_EVENT_KIND_SESSION_STOP
    assert struct_to_dict(service.events[0].details) == {
        "reason": "COMPLETED",
        "detail": "answered",
        "step": 3,
    }
    await hook.close()


@pytest.mark.parametrize("mode", ["slow", "error"])
async def test_fail_closed_blocks_on_timeout_or_error(
    hook_server: tuple[Service, str], mode: str
) -> None:
    service, address = hook_server
    service.mode = mode
    blocked, reason = await run_pre(make_hook(address, FailurePolicy.FAIL_CLOSED))
    assert blocked
    expected = "DEADLINE_EXCEEDED" if mode == "slow" else "INTERNAL"
    assert expected in reason and "remote" in reason


@pytest.mark.parametrize("mode", ["slow", "error"])
async def test_fail_open_continues_on_timeout_or_error(
    hook_server: tuple[Service, str], mode: str
) -> None:
    service, address = hook_server
    service.mode = mode
    blocked, _ = await run_pre(make_hook(address, FailurePolicy.FAIL_OPEN))
    assert not blocked


async def test_unreachable_endpoint_fail_closed() -> None:
    # Port 1 on loopback: nothing listens there.
    blocked, reason = await run_pre(make_hook("127.0.0.1:1", FailurePolicy.FAIL_CLOSED))
    assert blocked and "UNAVAILABLE" in reason


async def test_post_tool_use_fail_closed_withholds_output(
    hook_server: tuple[Service, str],
) -> None:
    service, address = hook_server
    service.mode = "error"
    for policy, expect_kept in (
        (FailurePolicy.FAIL_CLOSED, False),
        (FailurePolicy.FAIL_OPEN, True),
    ):
        hook = make_hook(address, policy)
        result = await HookPipeline([hook]).run_post_tool_use(
            ToolResultContext(call=CALL, content="raw secret")
        )
        await hook.close()
        assert ("raw secret" in result.content) is expect_kept
