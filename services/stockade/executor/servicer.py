"""ExecutorService: protobuf mapping only. Every RPC is one call of the core
(:class:`stockade.executor.core.ExecutorCore`); the conversions live in
:mod:`stockade.executor.convert`; the composition in :mod:`stockade.executor.app`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import grpc

from stockade.errors import InvalidArgument
from stockade.executor import convert
from stockade.executor.confine.policy import Layer
from stockade.executor.core import ExecutorCore
from stockade.executor.metrics import ExecutorMetrics
from stockade.executor.tools.base import Chunk
from stockade.server.access import Access
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

__all__ = ["ExecutorServicer"]


class ExecutorServicer(x_grpc.ExecutorServiceServicer):
    """Inspect, Execute, Cancel and GetCapabilities over :class:`ExecutorCore`."""

    ACCESS: ClassVar[Mapping[str, Access]] = {
        "Inspect": Access.ANY_CALLER,
        # Runs only with a valid grant from the decision service; with mTLS, only the
        # execute identities (ExecutorApp's method_identities) may call it at all.
        "Execute": Access.ANY_CALLER,
        "Cancel": Access.ANY_CALLER,
        "GetCapabilities": Access.ANY_CALLER,
    }
    """Who may call each RPC (X-3)."""

    def __init__(self, core: ExecutorCore, *, metrics: ExecutorMetrics | None = None) -> None:
        """Serve ``core``; ``metrics`` records each call's outcome and duration."""
        self.core = core
        self.metrics = metrics or ExecutorMetrics()
        self._layer_cache: tuple[tuple[Layer, ...], list[x_pb2.ConfinementLayer]] | None = None

    def layers(self) -> list[x_pb2.ConfinementLayer]:
        """The core's layers as messages (converted once per set of layers, not per result)."""
        layers = self.core.layers()
        if self._layer_cache is None or self._layer_cache[0] != layers:
            self._layer_cache = (layers, convert.layers_to_proto(layers))
        return self._layer_cache[1]

    async def Inspect(
        self, request: x_pb2.InspectRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.InspectResponse:
        """Tool-level checks of a call."""
        spec = convert.call_spec(request.call)
        inspection = await self.core.inspect_async(spec.tool_name, spec.arguments)
        return x_pb2.InspectResponse(
            inspection=convert.inspection_to_proto(inspection, request.call)
        )

    async def Execute(
        self, request: x_pb2.ExecuteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[x_pb2.ExecuteResponse]:
        """Run a call: chunks, then one result."""
        spec = convert.call_spec(request.call)
        start = time.monotonic()
        stream = self.core.execute(
            spec,
            timeout_s=convert.timeout_from_proto(request),
            interrupt=convert.interrupt_from_proto(request.interrupt_behavior),
            grant_payload=request.grant.payload,
            grant_signature=request.grant.signature,
        )
        async with contextlib.aclosing(stream):
            async for item in stream:
                if isinstance(item, Chunk):
                    yield convert.chunk_to_proto(item)
                else:
                    elapsed = time.monotonic() - start
                    self.metrics.record(spec.tool_name, item.status.value, elapsed)
                    yield convert.result_to_proto(item, elapsed, self.layers())

    async def Cancel(
        self, request: x_pb2.CancelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.CancelResponse:
        """Cancel a running call (CANCEL calls stop; BLOCK calls finish)."""
        if not request.call_id:
            raise InvalidArgument("call_id is required")
        if not request.session_id:
            raise InvalidArgument(
                "session_id is required: call ids repeat across sessions, a call is known by "
                "(session_id, call_id)"
            )
        return x_pb2.CancelResponse(found=self.core.cancel(request.session_id, request.call_id))

    async def GetCapabilities(
        self, request: x_pb2.GetCapabilitiesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.GetCapabilitiesResponse:
        """The layers, roots and tools of this executor."""
        return convert.capabilities_to_proto(self.core.capabilities(), self.layers())
