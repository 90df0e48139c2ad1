"""AgentService: maps protobuf to the agent core and back (kept thin).

Requests are checked and turned into domain values by ``stockade.agent.convert``; the
core's typed events become stream messages there too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import grpc

from stockade.agent.convert import approval_answer_from_pb, event_to_pb, turn_request_from_pb
from stockade.agent.core import AgentCore
from stockade.client.errors import ServiceError
from stockade.errors import InvalidArgument
from stockade.server.access import Access
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import agent_service_pb2_grpc as a_grpc


class AgentServicer(a_grpc.AgentServiceServicer):
    """RunTurn streams the core's events; Cancel marks the turn cancelled."""

    ACCESS: ClassVar[Mapping[str, Access]] = {
        "RunTurn": Access.ANY_CALLER,
        "Cancel": Access.ANY_CALLER,
        # The decision service authorises the answer with the caller's own credentials.
        "ResolveApproval": Access.CALLER_FORWARDED,
    }
    """Who may call each RPC (X-3)."""

    def __init__(self, core: AgentCore) -> None:
        self.core = core

    async def RunTurn(
        self, request: a_pb2.RunTurnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[a_pb2.RunTurnResponse]:
        turn = turn_request_from_pb(request)
        async for event in self.core.run_turn(
            turn.session_id, turn.message, turn.script, turn.mode
        ):
            yield event_to_pb(event)

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
        forward = approval_answer_from_pb(request)
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
        except ServiceError as err:
            # Pass the decision service's refusal through unchanged (code and message).
            code = grpc.StatusCode.__members__.get(err.code, grpc.StatusCode.UNKNOWN)
            await context.abort(code, err.details)
        return a_pb2.ResolveAgentApprovalResponse(approval=answer.approval, note=answer.note)
