"""The paper provider's core: the only object the servicer calls, one method per RPC.

``list_tools`` declares what the provider serves; ``call_tool`` runs one call and turns
the tool-level failures the model can correct (bad arguments, an unknown paper) into an
error result, while asking for a tool this provider does not serve stays a protocol
error (``UnknownTool``, NOT_FOUND through the shared interceptor). No gRPC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stockade.contract.toolspec import ToolDeclaration
from stockade.errors import InvalidArgument, NotFound, UnknownTool
from stockade.papers.catalogue import TOOL_NAMES, PaperCatalogue

__all__ = ["PapersCore", "ToolResult"]


@dataclass(frozen=True)
class ToolResult:
    """What one call returns to the agent."""

    content: str
    """The text the model sees."""
    is_error: bool = False
    """True for a failure the model should read and correct."""


class PapersCore:
    """Serves ``search_papers``, ``get_paper_metadata`` and ``get_paper_content``."""

    def __init__(self, catalogue: PaperCatalogue | None = None) -> None:
        self.catalogue = catalogue or PaperCatalogue()

    def list_tools(self) -> list[ToolDeclaration]:
        """The tools this provider serves, with their traits."""
        return self.catalogue.tool_declarations()

    def call_tool(self, tool_name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Run one call; ``UnknownTool`` when this provider does not serve ``tool_name``."""
        if tool_name not in TOOL_NAMES:
            raise UnknownTool(f"this provider does not serve {tool_name!r}", tool=tool_name)
        try:
            return ToolResult(self.catalogue.call(tool_name, arguments))
        except (InvalidArgument, NotFound) as exc:
            return ToolResult(f"Error: {exc.message}", is_error=True)
