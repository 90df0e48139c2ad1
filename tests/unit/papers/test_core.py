"""The paper provider's core and its protobuf mapping (no gRPC server needed)."""

from __future__ import annotations

import json

import pytest

from stockade.contract.toolspec import dict_to_struct
from stockade.errors import UnknownTool
from stockade.papers.catalogue import TOOL_NAMES
from stockade.papers.convert import call_from_pb, result_to_pb, tools_to_pb
from stockade.papers.core import PapersCore, ToolResult
from stockade.v1 import common_pb2
from stockade.v1 import tool_provider_pb2 as tp_pb2


def test_every_rpc_is_one_core_method_with_its_mapping() -> None:
    core = PapersCore()
    listed = tools_to_pb(core.list_tools())
    assert [t.name for t in listed.tools] == list(TOOL_NAMES)
    assert all(t.read_only and t.concurrency_safe for t in listed.tools)
    assert all(t.location == common_pb2.TOOL_LOCATION_REMOTE for t in listed.tools)
    request = tp_pb2.CallToolRequest(
        call=common_pb2.ToolCall(
            tool_name="get_paper_metadata", arguments=dict_to_struct({"paper_id": "1602.03837"})
        )
    )
    name, arguments = call_from_pb(request)
    answer = result_to_pb(core.call_tool(name, arguments))
    assert not answer.is_error and json.loads(answer.content)["paper_id"] == "1602.03837"


@pytest.mark.parametrize(
    ("tool", "arguments", "fragment"),
    [
        ("get_paper_content", {"paper_id": "nope"}, "no paper with id 'nope'"),
        ("search_papers", {"query": 5}, "expected string"),
        ("search_papers", {}, "missing required field 'query'"),
    ],
)
def test_failures_the_model_can_correct_are_error_results(
    tool: str, arguments: dict[str, object], fragment: str
) -> None:
    result = PapersCore().call_tool(tool, arguments)
    assert result.is_error and fragment in result.content
    assert result_to_pb(result).is_error


def test_a_tool_it_does_not_serve_is_a_protocol_error() -> None:
    with pytest.raises(UnknownTool):
        PapersCore().call_tool("run_bash", {"command": "id"})
    assert result_to_pb(ToolResult("x")).is_error is False
