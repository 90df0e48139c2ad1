"""AuditService: maps protobuf to the audit store and back (kept thin).

Domain errors raised by the store (``InvalidArgument``, ``InvalidPageToken`` …) become
gRPC statuses in the shared exception interceptor.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, ClassVar

import grpc

from stockade.audit.backend import AuditBackend
from stockade.audit.convert import (
    check_filter_lengths,
    filters_from_proto,
    metrics_to_proto,
    record_to_proto,
    row_from_proto,
)
from stockade.audit.model import AppendResult
from stockade.audit.tracing import record_receipt_spans
from stockade.errors import InvalidArgument
from stockade.server.access import Access
from stockade.server.lifecycle import until_stopping
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class AuditServicer(a_grpc.AuditServiceServicer):
    """The AuditService over one audit store (SQLite or PostgreSQL)."""

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

    def __init__(self, store: AuditBackend) -> None:
        """Serve ``store``."""
        self.store = store

    async def Record(self, request: a_pb2.RecordRequest, context: Context) -> a_pb2.RecordResponse:
        """Store one event; report whether its id was already stored."""
        result = await self.store.append([row_from_proto(request.event)])
        record_receipt_spans((request.event,))
        return a_pb2.RecordResponse(duplicate=result.duplicates > 0)

    async def RecordBatch(
        self, request_iterator: AsyncIterable[a_pb2.RecordBatchRequest], context: Context
    ) -> a_pb2.RecordBatchResponse:
        """Store each streamed batch in its own transaction.

        One batch is written while the next is read and converted, never more: the
        stream is not read further until the write before it finished, so gRPC flow
        control pushes back on a producer faster than the disk (bounded memory).
        """
        accepted = duplicates = 0
        writing: asyncio.Task[AppendResult] | None = None
        try:
            async for request in request_iterator:
                rows = [row_from_proto(event) for event in request.events]
                record_receipt_spans(request.events)
                if writing is not None:
                    result = await writing
                    accepted, duplicates = (
                        accepted + result.accepted,
                        duplicates + result.duplicates,
                    )
                writing = asyncio.ensure_future(self.store.append(rows))
            if writing is not None:
                result = await writing
                accepted += result.accepted
                duplicates += result.duplicates
                writing = None
        finally:
            if writing is not None and not writing.done():
                # The stream failed mid-way: the write in progress still completes whole
                # (the store shields it); wait so no task outlives the call.
                await asyncio.wait([writing])
            if writing is not None and writing.done() and not writing.cancelled():
                writing.exception()  # retrieved, so asyncio does not warn about it
        return a_pb2.RecordBatchResponse(accepted=accepted, duplicates=duplicates)

    async def Query(self, request: a_pb2.QueryRequest, context: Context) -> a_pb2.QueryResponse:
        """One page of matching rows, newest first."""
        rows, token = await self.store.query(
            filters_from_proto(request), request.page_size, request.page_token
        )
        return a_pb2.QueryResponse(
            records=[record_to_proto(row) for row in rows], next_page_token=token
        )

    async def Tail(
        self, request: a_pb2.TailRequest, context: Context
    ) -> AsyncIterator[a_pb2.TailResponse]:
        """Stream rows as they are committed, until the caller leaves, the store closes or
        the server stops."""
        if request.after_sequence < 0:
            raise InvalidArgument("after_sequence must not be negative", field="after_sequence")
        check_filter_lengths(session_id=request.session_id)
        after = request.after_sequence or None
        async for row in until_stopping(self.store.tail(request.session_id, after=after)):
            yield a_pb2.TailResponse(record=record_to_proto(row))

    async def GetSessionMetrics(
        self, request: a_pb2.GetSessionMetricsRequest, context: Context
    ) -> a_pb2.GetSessionMetricsResponse:
        """The session's metrics snapshot."""
        check_filter_lengths(session_id=request.session_id)
        return metrics_to_proto(await self.store.session_metrics(request.session_id))

    async def VerifyLog(
        self, request: a_pb2.VerifyLogRequest, context: Context
    ) -> a_pb2.VerifyLogResponse:
        """Check the hash chain; name the first broken link."""
        result = await self.store.verify()
        return a_pb2.VerifyLogResponse(
            ok=result.ok,
            rows_checked=result.rows_checked,
            first_broken_sequence=result.first_broken_sequence,
            detail=result.detail,
            head_sequence=result.head_sequence,
            head_hash=result.head_hash,
            anchor_sequence=result.anchor_sequence,
            refused_rows=result.refused_rows,
            cut_rows=result.cut_rows,
        )
