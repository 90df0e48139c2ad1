"""Map domain exceptions to gRPC statuses with ``google.rpc.ErrorInfo`` details."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from stockade.errors import StockadeError

DOMAIN = "stockade"


MAX_MESSAGE_CHARS = 1024
"""Longest status message sent; longer ones are cut (they may quote the caller's input)."""
MAX_METADATA_VALUE_CHARS = 256
"""Longest ErrorInfo metadata value sent. A status travels in HTTP/2 trailers (16 KB by
default): an error quoting a 1 MB id would reach the caller as RESOURCE_EXHAUSTED
"metadata size exceeds hard limit" instead of the error itself."""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}… [cut: {len(text):,} characters]"


def status_for(exc: BaseException, *, request_id: str = "") -> grpc.Status:
    """The status a server returns for ``exc``; unknown exceptions become a bare INTERNAL."""
    if isinstance(exc, StockadeError):
        code_name, reason = exc.code, exc.reason
        message = _cut(exc.message, MAX_MESSAGE_CHARS)
        metadata = {k: _cut(v, MAX_METADATA_VALUE_CHARS) for k, v in exc.metadata.items()}
    else:
        code_name, reason = "INTERNAL", "INTERNAL"
        message = "internal error" + (f" (request id {request_id})" if request_id else "")
        metadata = {}
    if request_id:
        metadata.setdefault("request_id", request_id)
    info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(
        code=code_pb2.Code.Value(code_name), message=message, details=[detail]
    )
    return rpc_status.to_status(status)


def error_info(err: grpc.aio.AioRpcError | grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo carried by a failed call, if any (client side)."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None
