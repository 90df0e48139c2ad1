"""ToolProvider servicer for the paper catalogue (kept thin).

Tool-level failures (bad arguments, an unknown paper) are results with ``is_error`` so the
model can read and correct them; asking for a tool this provider does not serve is a
protocol error (NOT_FOUND through the shared interceptor).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import grpc

from stockade.contract.toolspec import declaration_to_proto, struct_to_dict
from stockade.errors import InvalidArgument, NotFound, UnknownTool
from stockade.papers.catalogue import TOOL_NAMES, PaperCatalogue
from stockade.server.access import Access
from stockade.v1 import tool_provider_pb2 as tp_pb2
from stockade.v1 import tool_provider_pb2_grpc as tp_grpc

SERVICE_NAME = tp_pb2.DESCRIPTOR.services_by_name["ToolProvider"].full_name


class PapersServicer(tp_grpc.ToolProviderServicer):
    """Serves ``search_papers``, ``get_paper_metadata`` and ``get_paper_content``."""

    ACCESS: ClassVar[Mapping[str, Access]] = {
        "ListTools": Access.ANY_CALLER,
        "CallTool": Access.ANY_CALLER,
    }
    """Who may call each RPC (X-3)."""

    def __init__(self, catalogue: PaperCatalogue | None = None) -> None:
        self.catalogue = catalogue or PaperCatalogue()

    async def ListTools(
        self, request: tp_pb2.ListToolsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tp_pb2.ListToolsResponse:
        return tp_pb2.ListToolsResponse(
            tools=[declaration_to_proto(d) for d in self.catalogue.tool_declarations()]
        )

    async def CallTool(
        self, request: tp_pb2.CallToolRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tp_pb2.CallToolResponse:
        name = request.call.tool_name
        if name not in TOOL_NAMES:
            raise UnknownTool(f"this provider does not serve {name!r}", tool=name)
        try:
            content = self.catalogue.call(name, struct_to_dict(request.call.arguments))
        except (InvalidArgument, NotFound) as exc:
            return tp_pb2.CallToolResponse(content=f"Error: {exc.message}", is_error=True)
        return tp_pb2.CallToolResponse(content=content)
