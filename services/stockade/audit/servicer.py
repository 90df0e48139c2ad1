"""AuditService: maps protobuf to the audit store and back (kept thin).

First cut (foundation): Record stores one event. The other RPCs come with the audit
issue and answer UNIMPLEMENTED until then.
"""

from __future__ import annotations

from typing import Any

import grpc

from stockade.audit.convert import row_from_proto
from stockade.audit.store import AuditStore
from stockade.errors import NotImplementedYet
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc


class AuditServicer(a_grpc.AuditServiceServicer):
    """First-cut Record."""

    def __init__(self, store: AuditStore) -> None:
        self.store = store

    async def Record(  # noqa: N802 - generated name
        self, request: a_pb2.RecordRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> a_pb2.RecordResponse:
        result = await self.store.append([row_from_proto(request.event)])
        return a_pb2.RecordResponse(duplicate=result.duplicates > 0)


def _unimplemented(rpc: str) -> Any:
    async def handler(self: AuditServicer, request: Any, context: Any) -> Any:
        raise NotImplementedYet(f"AuditService.{rpc} is not built yet (see README status table)")

    return handler


for _rpc in "RecordBatch Query Tail GetSessionMetrics VerifyLog".split():
    setattr(AuditServicer, _rpc, _unimplemented(_rpc))
