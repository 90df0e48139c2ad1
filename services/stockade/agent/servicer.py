"""AgentService: maps protobuf to the agent core and back (kept thin)."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc

from stockade.agent.loop import AgentCore
from stockade.errors import InvalidArgument
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import agent_service_pb2_grpc as a_grpc
from stockade.v1 import decision_service_pb2 as d_pb2

SESSION_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
MAX_MESSAGE_CHARS = 200_000


class AgentServicer(a_grpc.AgentServiceServicer):
    """RunTurn streams the core's events; Cancel marks the turn cancelled."""

    def __init__(self, core: AgentCore) -> None:
        self.core = core

    async def RunTurn(
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
        async for event in self.core.run_turn(
            session_id, request.message, request.script, request.mode
        ):
            yield event

    async def Cancel(
        self, request: a_pb2.CancelTurnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> a_pb2.CancelTurnResponse:
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        return a_pb2.CancelTurnResponse(cancelled=self.core.cancel(request.session_id))

    async def ResolveApproval(
        self,
        request: a_pb2.ResolveAgentApprovalRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> a_pb2.ResolveAgentApprovalResponse:
        if not request.approval_id:
            raise InvalidArgument("approval_id is required")
        if request.resolution == d_pb2.RESOLUTION_UNSPECIFIED:
            raise InvalidArgument("resolution must be ALLOW_ONCE, DENY or ALWAYS_ALLOW")
        forward = d_pb2.ResolveApprovalRequest(
            approval_id=request.approval_id,
            resolution=request.resolution,
            resolver=request.resolver,
        )
        if request.HasField("scope"):
            forward.scope.CopyFrom(request.scope)
        # The caller's own credentials decide whether it may answer (admin RPC).
        authorization = next(
            (
                value
                for key, value in context.invocation_metadata() or ()
                if key == "authorization" and isinstance(value, str)
            ),
            "",
        )
        try:
            answer = await self.core.resolve_approval(forward, authorization=authorization)
        except grpc.aio.AioRpcError as err:
            # Pass the decision service's refusal through unchanged (code and message).
            await context.abort(err.code(), err.details() or "")
        return a_pb2.ResolveAgentApprovalResponse(approval=answer.approval, note=answer.note)
