"""Protobuf ↔ the paper provider's domain types, in one place (no gRPC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stockade.contract.toolspec import ToolDeclaration, declaration_to_proto, struct_to_dict
from stockade.papers.core import ToolResult
from stockade.v1 import tool_provider_pb2 as tp_pb2


def tools_to_pb(declarations: Sequence[ToolDeclaration]) -> tp_pb2.ListToolsResponse:
    """The ListTools answer."""
    return tp_pb2.ListToolsResponse(tools=[declaration_to_proto(d) for d in declarations])


def call_from_pb(request: tp_pb2.CallToolRequest) -> tuple[str, dict[str, Any]]:
    """The tool name and arguments of a CallTool request."""
    return request.call.tool_name, struct_to_dict(request.call.arguments)


def result_to_pb(result: ToolResult) -> tp_pb2.CallToolResponse:
    """The CallTool answer."""
    return tp_pb2.CallToolResponse(content=result.content, is_error=result.is_error)
