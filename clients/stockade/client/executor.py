"""Clients for the executor service.

Every method takes ``timeout=`` and ``metadata=`` (``stockade.client.base``); a failed
call raises a ``stockade.client.errors.ServiceError``, and the caller denies the tool call
(fail closed). A failed Execute that may have run the tool says so:
``DeadlineExceededError`` (``outcome_unknown``), or a stream that broke after it began.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from stockade.client.base import (
    DEFAULT_DEADLINE_S,
    Metadata,
    call_options,
    renamed_timeout,
    service_errors,
    with_retries,
)
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

INSPECT_DEADLINE_S = 2.0


class ExecutorClient:
    """Async client for ExecutorService."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = x_grpc.ExecutorServiceStub(channel)

    @property
    def stub(self) -> x_grpc.ExecutorServiceStub:
        """The raw stub."""
        return self._stub

    async def inspect(
        self,
        request: x_pb2.InspectRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.ToolInspection:
        """Tool-level checks (side-effect free, so retried on UNAVAILABLE)."""
        options = call_options(timeout, metadata, default_s=INSPECT_DEADLINE_S)
        with service_errors("executor"):
            resp: x_pb2.InspectResponse = await with_retries(
                lambda: self._stub.Inspect(request, **options)
            )
        return resp.inspection

    async def execute(
        self,
        request: x_pb2.ExecuteRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[x_pb2.ExecuteResponse]:
        """Run a call and stream its chunks and result (never retried: not idempotent).

        ``timeout`` bounds the whole run and is required, since how long a tool may run is
        the caller's choice (``timeout_s`` is its deprecated name)."""
        budget = renamed_timeout("execute", timeout, "timeout_s", timeout_s)
        if budget is None:
            raise TypeError("execute needs timeout= (how long the call may run)")
        call = self._stub.Execute(request, **call_options(budget, metadata, default_s=budget))
        with service_errors("executor"):
            async for message in call:
                yield message

    async def cancel(
        self,
        session_id: str,
        call_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> bool:
        """Cancel the running call ``call_id`` of ``session_id``."""
        with service_errors("executor"):
            resp: x_pb2.CancelResponse = await self._stub.Cancel(
                x_pb2.CancelRequest(session_id=session_id, call_id=call_id),
                **call_options(timeout, metadata, default_s=DEFAULT_DEADLINE_S),
            )
        return resp.found

    async def capabilities(
        self, *, timeout: float | None = None, metadata: Metadata | None = None
    ) -> x_pb2.GetCapabilitiesResponse:
        """Which confinement layers are active."""
        options = call_options(timeout, metadata, default_s=DEFAULT_DEADLINE_S)
        with service_errors("executor"):
            resp: x_pb2.GetCapabilitiesResponse = await with_retries(
                lambda: self._stub.GetCapabilities(x_pb2.GetCapabilitiesRequest(), **options)
            )
        return resp


class SyncExecutorClient:
    """Blocking facade over ExecutorService (Inspect and GetCapabilities; Execute needs a
    grant and is the agent's job, so it stays async)."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._stub = x_grpc.ExecutorServiceStub(channel)

    def inspect(
        self,
        request: x_pb2.InspectRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.ToolInspection:
        """Tool-level checks of a call (raises ``ServiceError`` on failure)."""
        with service_errors("executor"):
            resp: x_pb2.InspectResponse = self._stub.Inspect(
                request, **call_options(timeout, metadata, default_s=INSPECT_DEADLINE_S)
            )
        return resp.inspection

    def capabilities(
        self, *, timeout: float | None = None, metadata: Metadata | None = None
    ) -> x_pb2.GetCapabilitiesResponse:
        """Which confinement layers are active."""
        with service_errors("executor"):
            resp: x_pb2.GetCapabilitiesResponse = self._stub.GetCapabilities(
                x_pb2.GetCapabilitiesRequest(),
                **call_options(timeout, metadata, default_s=DEFAULT_DEADLINE_S),
            )
        return resp
