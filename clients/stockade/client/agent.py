"""Client for the agent service.

Every method takes ``timeout=`` and ``metadata=`` (``stockade.client.base``); a failed
call raises a ``stockade.client.errors.ServiceError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import grpc

from stockade.client.base import (
    DEFAULT_DEADLINE_S,
    Metadata,
    call_options,
    renamed_timeout,
    service_errors,
)
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import agent_service_pb2_grpc as a_grpc

TURN_DEADLINE_S = 600.0
"""Default bound of a whole turn."""


class AgentClient:
    """Async client for AgentService."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = a_grpc.AgentServiceStub(channel)

    async def run_turn(
        self,
        request: a_pb2.RunTurnRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[a_pb2.RunTurnResponse]:
        """Run a turn and stream its events (``timeout_s`` is ``timeout``'s deprecated
        name)."""
        budget = renamed_timeout("run_turn", timeout, "timeout_s", timeout_s)
        options = call_options(budget, metadata, default_s=TURN_DEADLINE_S)
        with service_errors("agent"):
            async for event in self._stub.RunTurn(request, **options):
                yield event

    async def cancel(
        self,
        session_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> bool:
        """Cancel the session's running turn."""
        with service_errors("agent"):
            resp: a_pb2.CancelTurnResponse = await self._stub.Cancel(
                a_pb2.CancelTurnRequest(session_id=session_id),
                **call_options(timeout, metadata, default_s=DEFAULT_DEADLINE_S),
            )
        return resp.cancelled


class SyncAgentClient:
    """Blocking facade over AgentService."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._stub = a_grpc.AgentServiceStub(channel)

    def run_turn(
        self,
        request: a_pb2.RunTurnRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        timeout_s: float | None = None,
    ) -> Iterator[a_pb2.RunTurnResponse]:
        """Run a turn and iterate over its events (``timeout_s``: ``timeout``'s deprecated
        name)."""
        budget = renamed_timeout("run_turn", timeout, "timeout_s", timeout_s)
        with service_errors("agent"):
            yield from self._stub.RunTurn(
                request, **call_options(budget, metadata, default_s=TURN_DEADLINE_S)
            )

    def cancel(
        self,
        session_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> bool:
        """Cancel the session's running turn."""
        with service_errors("agent"):
            resp: a_pb2.CancelTurnResponse = self._stub.Cancel(
                a_pb2.CancelTurnRequest(session_id=session_id),
                **call_options(timeout, metadata, default_s=DEFAULT_DEADLINE_S),
            )
        return resp.cancelled
