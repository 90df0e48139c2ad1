"""AgentService: maps protobuf to the agent core and back (kept thin)."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc

from stockade.agent.loop import AgentCore
from stockade.errors import InvalidArgument, NotImplementedYet
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import agent_service_pb2_grpc as a_grpc

SESSION_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
MAX_MESSAGE_CHARS = 200_000


class AgentServicer(a_grpc.AgentServiceServicer):
    """RunTurn streams the core's events; Cancel marks the turn cancelled."""

    def __init__(self, core: AgentCore) -> None:
        self.core = core

    async def RunTurn(  # noqa: N802 - generated name
        self, request: a_pb2.RunTurnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[a_pb2.RunTurnResponse]:
        session_id = request.session_id or f"s-{uuid.uuid4().hex[:12]}"
        if not SESSION_ID.match(session_id):
            raise InvalidArgument(
                "session_id must be 1-128 characters of letters, digits, '_', '.', ':' or '-'"
            )
        if not request.message.strip():
            raise InvalidArgument("message must not be empty")
        if len(request.message) > MAX_MESSAGE_CHARS:
            raise InvalidArgument(f"message is longer than {MAX_MESSAGE_CHARS} characters")
        async for event in self.core.run_turn(session_id, request.message, request.script):
            yield event

    async def Cancel(  # noqa: N802
        self, request: a_pb2.CancelTurnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> a_pb2.CancelTurnResponse:
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        return a_pb2.CancelTurnResponse(cancelled=self.core.cancel(request.session_id))

    async def ResolveApproval(  # noqa: N802
        self,
        request: a_pb2.ResolveAgentApprovalRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> a_pb2.ResolveAgentApprovalResponse:
        raise NotImplementedYet(
            "AgentService.ResolveApproval is not built yet (see README status table)"
        )
