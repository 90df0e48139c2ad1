"""The agent's gRPC client of remote tool providers (AGT-1 ``remote``).

At start the agent asks each configured provider for its tools (ListTools, through
``stockade.agent.ports.discover``) and merges them into its registry (a provider may serve
remote tools but never replace an executor or built-in tool); after the permission checks
it runs a call with CallTool under a deadline. ``ToolProviderClient`` is the gRPC side of
``stockade.agent.ports.ToolProviderPort``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc

from stockade.agent.convert import spec_from_proto
from stockade.agent.ports import RemoteResult
from stockade.agent.registry import ToolSpec
from stockade.client.base import service_errors
from stockade.contract.toolspec import dict_to_struct
from stockade.v1 import common_pb2
from stockade.v1 import tool_provider_pb2 as tp_pb2
from stockade.v1 import tool_provider_pb2_grpc as tp_grpc


class ToolProviderClient:
    """Calls one ToolProvider."""

    def __init__(
        self, address: str, channel: grpc.aio.Channel | None = None, *, timeout_s: float = 30.0
    ) -> None:
        """Call the provider at ``address`` (or over ``channel``); ``timeout_s`` bounds a
        call that gives no ``timeout`` of its own."""
        self.address = address
        self.timeout_s = timeout_s
        self._channel = channel or grpc.aio.insecure_channel(address)
        self._owns_channel = channel is None
        self._stub = tp_grpc.ToolProviderStub(self._channel)

    async def close(self) -> None:
        """Close the channel if this client opened it."""
        if self._owns_channel:
            await self._channel.close(None)

    async def list_tools(self, *, timeout: float = 3.0) -> list[ToolSpec]:
        """The provider's tools as registry entries (short deadline: a turn waits on it);
        raises ``ServiceError`` on failure."""
        with service_errors("tool provider"):
            response = await self._stub.ListTools(tp_pb2.ListToolsRequest(), timeout=timeout)
        return [spec_from_proto(tool, provider=self.address) for tool in response.tools]

    async def call_tool(
        self,
        *,
        session_id: str,
        call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        agent_name: str = "lead",
        from_subagent: bool = False,
        timeout: float | None = None,
    ) -> RemoteResult:
        """Run one call; transport failures become an error result, never an exception."""
        call = common_pb2.ToolCall(
            call_id=call_id,
            tool_name=tool_name,
            arguments=dict_to_struct(arguments),
            session_id=session_id,
            from_subagent=from_subagent,
            agent_name=agent_name,
        )
        try:
            response = await self._stub.CallTool(
                tp_pb2.CallToolRequest(call=call), timeout=timeout or self.timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            detail = exc.details() or ""
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return RemoteResult(
                    f"Error: outcome unknown: tool provider {self.address} did not answer in "
                    f"time ({detail}); the tool may have run",
                    True,
                    outcome_unknown=True,
                )
            return RemoteResult(
                f"Error: tool provider {self.address} failed ({exc.code().name}: {detail})", True
            )
        return RemoteResult(response.content, response.is_error)
