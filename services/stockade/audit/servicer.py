"""AuditService: protobuf in, one ``AuditCore`` method, protobuf out — nothing else.

Domain errors raised below (``InvalidArgument``, ``InvalidPageToken`` …) become gRPC
statuses in the shared exception interceptor.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, ClassVar

import grpc

from stockade.audit.convert import (
    check_filter_lengths,
    filters_from_proto,
    metrics_to_proto,
    query_response,
    record_to_proto,
    row_from_proto,
    verify_to_proto,
)
from stockade.audit.core import AuditCore
from stockade.audit.model import AuditEventRow
from stockade.audit.tracing import record_receipt_spans
from stockade.server.access import Access
from stockade.server.lifecycle import until_stopping
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class AuditServicer(a_grpc.AuditServiceServicer):
    """The AuditService over an ``AuditCore``."""

    ACCESS: ClassVar[Mapping[str, Access]] = {
        # Reaching the service is the right to record and read (its NetworkPolicy admits
        # the producers and the console); the chain makes rewrites visible either way.
        "Record": Access.ANY_CALLER,
        "RecordBatch": Access.ANY_CALLER,
        "Query": Access.ANY_CALLER,
        "Tail": Access.ANY_CALLER,
        "GetSessionMetrics": Access.ANY_CALLER,
        "VerifyLog": Access.ANY_CALLER,
    }
    """Who may call each RPC (X-3)."""

    def __init__(self, core: AuditCore) -> None:
        """Serve ``core``."""
        self.core = core

    async def Record(self, request: a_pb2.RecordRequest, context: Context) -> a_pb2.RecordResponse:
        """Store one event; report whether its id was already stored."""
        result = await self.core.record(row_from_proto(request.event))
        record_receipt_spans((request.event,))
        return a_pb2.RecordResponse(duplicate=result.duplicates > 0)

    async def RecordBatch(
        self, request_iterator: AsyncIterable[a_pb2.RecordBatchRequest], context: Context
    ) -> a_pb2.RecordBatchResponse:
        """Store each streamed batch in its own transaction."""

        async def batches() -> AsyncIterator[list[AuditEventRow]]:
            async for request in request_iterator:
                rows = [row_from_proto(event) for event in request.events]
                record_receipt_spans(request.events)
                yield rows

        result = await self.core.record_stream(batches())
        return a_pb2.RecordBatchResponse(accepted=result.accepted, duplicates=result.duplicates)

    async def Query(self, request: a_pb2.QueryRequest, context: Context) -> a_pb2.QueryResponse:
        """One page of matching rows, newest first."""
        filters = filters_from_proto(request)
        rows, token = await self.core.query(filters, request.page_size, request.page_token)
        return query_response(rows, token, filters)

    async def Tail(
        self, request: a_pb2.TailRequest, context: Context
    ) -> AsyncIterator[a_pb2.TailResponse]:
        """Stream rows as they are committed."""
        check_filter_lengths(session_id=request.session_id)
        rows = self.core.tail(request.session_id, request.after_sequence)
        async for row in until_stopping(rows):
            yield a_pb2.TailResponse(record=record_to_proto(row))

    async def GetSessionMetrics(
        self, request: a_pb2.GetSessionMetricsRequest, context: Context
    ) -> a_pb2.GetSessionMetricsResponse:
        """The session's metrics snapshot."""
        check_filter_lengths(session_id=request.session_id)
        return metrics_to_proto(await self.core.session_metrics(request.session_id))

    async def VerifyLog(
        self, request: a_pb2.VerifyLogRequest, context: Context
    ) -> a_pb2.VerifyLogResponse:
        """Check every hash chain; name each chain's first broken row."""
        return verify_to_proto(await self.core.verify())
