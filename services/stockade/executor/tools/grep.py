"""grep_files: search file contents with a regular expression (EXE-11).

The walk never follows symlinks (as ripgrep by default) and every file is opened through
the sandbox, so neither a link nor a race can lead the search out of the roots, and files
the policy denies for reading are skipped.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

from stockade.errors import PathRefused
from stockade.executor.paths import PathSandbox, match_relative_glob
from stockade.executor.tools.base import Chunk, ExecContext, ToolResult
from stockade.executor.tools.read_file import is_binary
from stockade.executor.tools.support import (
    ArgError,
    bool_arg,
    error_result,
    expand_braces,
    get_sandbox,
    int_arg,
    ok_result,
    refused_result,
    str_arg,
    walk,
)

__all__ = ["GrepFilesTool", "OUTPUT_MODES"]

OUTPUT_MODES = ("content", "files_with_matches", "count")
DEFAULT_MAX_RESULTS = 200
MAX_RESULTS = 5000
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_WALK_ENTRIES = 200_000
MAX_SHOWN_LINE = 500


class GrepFilesTool:
    """Searches ``path`` (a file or a folder, default the working directory) for ``pattern``.

    Arguments: ``pattern`` (Python regex), ``path``, ``glob`` (file filter: a bare pattern
    such as ``*.py`` matches file names, one with ``/`` the path relative to ``path``),
    ``case_insensitive``, ``output_mode`` (content | files_with_matches | count) and
    ``max_results`` (cap on output lines).
    """

    name = "grep_files"

    async def run(
        self, args: Mapping[str, Any], ctx: ExecContext
    ) -> AsyncIterator[Chunk | ToolResult]:
        """Yield the one result."""
        yield await asyncio.to_thread(self._run, args, ctx)

    def _run(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
        try:
            pattern = str_arg(args, "pattern")
            path = str_arg(args, "path", required=False)
            glob = str_arg(args, "glob", required=False)
            ignore_case = bool_arg(args, "case_insensitive") or bool_arg(args, "-i")
            mode = str_arg(args, "output_mode", required=False, default="content")
            cap = int_arg(
                args, "max_results", default=DEFAULT_MAX_RESULTS, minimum=1, maximum=MAX_RESULTS
            )
        except ArgError as exc:
            return error_result(str(exc))
        if mode not in OUTPUT_MODES:
            return error_result(f"output_mode must be one of {', '.join(OUTPUT_MODES)}")
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            return error_result(f"invalid regular expression {pattern!r}: {exc}")
        sandbox = get_sandbox(ctx)
        decision = sandbox.check(path or sandbox.cwd)
        if not decision.allowed:
            return refused_result(decision.reason)
        base = decision.resolved
        globs = expand_braces(glob) if glob else []
        lines: list[str] = []
        capped = False
        for file_path in self._files(sandbox, base, globs, ctx):
            hits = self._search(sandbox, file_path, regex)
            if not hits:
                continue
            if mode == "files_with_matches":
                lines.append(file_path)
            elif mode == "count":
                lines.append(f"{file_path}:{len(hits)}")
            else:
                lines.extend(f"{file_path}:{n}:{text}" for n, text in hits)
            if len(lines) > cap:
                capped = True
                del lines[cap:]
                break
        if not lines:
            return ok_result(ctx, "No matches found")
        if capped:
            lines.append(f"(results capped at {cap}; narrow the search or raise max_results)")
        return ok_result(ctx, "\n".join(lines))

    @staticmethod
    def _files(sandbox: PathSandbox, base: str, globs: list[str], ctx: ExecContext) -> list[str]:
        if not os.path.isdir(base):
            return [base]
        found = []
        for entry in walk(base, max_entries=MAX_WALK_ENTRIES, should_stop=ctx.cancel.is_set):
            if entry.is_dir or entry.is_symlink:
                continue
            if globs and not any(
                match_relative_glob(g, entry.rel)
                if "/" in g
                else fnmatch.fnmatchcase(os.path.basename(entry.rel), g)
                for g in globs
            ):
                continue
            found.append(entry.path)
        return found

    @staticmethod
    def _search(
        sandbox: PathSandbox, file_path: str, regex: re.Pattern[str]
    ) -> list[tuple[int, str]]:
        try:
            fd = sandbox.open(file_path, os.O_RDONLY)
        except PathRefused:
            return []  # refused by policy, vanished, or not a regular file: not searched
        try:
            if os.fstat(fd).st_size > MAX_FILE_BYTES:
                return []
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
        if is_binary(data):
            return []
        hits = []
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if regex.search(line):
                shown = line if len(line) <= MAX_SHOWN_LINE else line[:MAX_SHOWN_LINE] + " [...]"
                hits.append((number, shown))
        return hits
