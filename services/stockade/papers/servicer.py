"""ToolProvider servicer for the paper catalogue: protobuf ↔ the core only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import grpc

from stockade.papers.convert import call_from_pb, result_to_pb, tools_to_pb
from stockade.papers.core import PapersCore
from stockade.server.access import Access
from stockade.v1 import tool_provider_pb2 as tp_pb2
from stockade.v1 import tool_provider_pb2_grpc as tp_grpc

SERVICE_NAME = tp_pb2.DESCRIPTOR.services_by_name["ToolProvider"].full_name


class PapersServicer(tp_grpc.ToolProviderServicer):
    """ListTools and CallTool, each one core method."""

    ACCESS: ClassVar[Mapping[str, Access]] = {
        "ListTools": Access.ANY_CALLER,
        "CallTool": Access.ANY_CALLER,
    }
    """Who may call each RPC (X-3)."""

    def __init__(self, core: PapersCore | None = None) -> None:
        self.core = core or PapersCore()

    async def ListTools(
        self, request: tp_pb2.ListToolsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tp_pb2.ListToolsResponse:
        return tools_to_pb(self.core.list_tools())

    async def CallTool(
        self, request: tp_pb2.CallToolRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tp_pb2.CallToolResponse:
        tool_name, arguments = call_from_pb(request)
        return result_to_pb(self.core.call_tool(tool_name, arguments))
