"""Client for the agent service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc

from stockade.client.base import DEFAULT_DEADLINE_S
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import agent_service_pb2_grpc as a_grpc


class AgentClient:
    """Async client for AgentService."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = a_grpc.AgentServiceStub(channel)

    async def run_turn(
        self, request: a_pb2.RunTurnRequest, *, timeout_s: float = 600.0
    ) -> AsyncIterator[a_pb2.RunTurnResponse]:
        """Run a turn and stream its events."""
        async for event in self._stub.RunTurn(request, timeout=timeout_s):
            yield event

    async def cancel(self, session_id: str) -> bool:
        """Cancel the session's running turn."""
        resp: a_pb2.CancelTurnResponse = await self._stub.Cancel(
            a_pb2.CancelTurnRequest(session_id=session_id), timeout=DEFAULT_DEADLINE_S
        )
        return resp.cancelled


class SyncAgentClient:
    """Blocking facade over AgentService."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._stub = a_grpc.AgentServiceStub(channel)

    def run_turn(
        self, request: a_pb2.RunTurnRequest, *, timeout_s: float = 600.0
    ) -> Iterator[a_pb2.RunTurnResponse]:
        """Run a turn and iterate over its events."""
        yield from self._stub.RunTurn(request, timeout=timeout_s)

    def cancel(self, session_id: str) -> bool:
        """Cancel the session's running turn."""
        resp: a_pb2.CancelTurnResponse = self._stub.Cancel(
            a_pb2.CancelTurnRequest(session_id=session_id), timeout=DEFAULT_DEADLINE_S
        )
        return resp.cancelled
