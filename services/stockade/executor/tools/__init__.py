"""The executor's tools (read_file, file_write, file_edit, glob_files, grep_files, run_bash).

Each tool implements :class:`stockade.executor.tools.base.Tool`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stockade.executor.tools.base import Tool

__all__ = ["file_tools"]


def file_tools() -> dict[str, Tool]:
    """The file-system tools by name (run_bash is registered by the servicer separately)."""
    from stockade.executor.tools.edit import FileEditTool
    from stockade.executor.tools.glob import GlobFilesTool
    from stockade.executor.tools.grep import GrepFilesTool
    from stockade.executor.tools.read_file import ReadFileTool
    from stockade.executor.tools.write import FileWriteTool

    tools: list[Tool] = [
        ReadFileTool(),
        FileWriteTool(),
        FileEditTool(),
        GlobFilesTool(),
        GrepFilesTool(),
    ]
    return {tool.name: tool for tool in tools}
