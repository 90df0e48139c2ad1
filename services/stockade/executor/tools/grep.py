"""grep_files: search file contents with a regular expression (EXE-11).

The walk never follows symlinks (as ripgrep by default) and every file is opened through
the sandbox, so neither a link nor a race can lead the search out of the roots, and files
the policy denies for reading are skipped.

The regular expression itself runs in a small child process (``python -I -S``, standard
library only) that is fed the file contents over a pipe: Python's ``re`` backtracks and
holds the GIL while it matches, so one catastrophic pattern such as ``(a+)+$`` would freeze
the whole executor (measured: the event loop got no tick for 13 s). In a child, the call's
time limit or a cancel simply kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from stockade.errors import PathRefused
from stockade.executor.paths import PathSandbox, match_relative_glob
from stockade.executor.tools.base import Chunk, ExecContext, Status, ToolResult
from stockade.executor.tools.read_file import is_binary
from stockade.executor.tools.support import (
    ArgError,
    bool_arg,
    error_result,
    expand_braces,
    int_arg,
    ok_result,
    refused_result,
    str_arg,
    walk,
)

__all__ = ["OUTPUT_MODES", "GrepFilesTool"]

OUTPUT_MODES = ("content", "files_with_matches", "count")
DEFAULT_MAX_RESULTS = 200
MAX_RESULTS = 5000
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_WALK_ENTRIES = 200_000
MAX_SHOWN_LINE = 500

# The matcher child: a JSON header line, then frames (u32 file index, u32 length, bytes);
# answers one JSON line [index, [[line number, text], ...]] per frame, in order.
_WORKER = r"""
import json, re, struct, sys
inp, out = sys.stdin.buffer, sys.stdout
head = json.loads(inp.readline())
rx = re.compile(head["pattern"], re.IGNORECASE if head["ignore_case"] else 0)
cut = head["max_shown"]
while True:
    frame = inp.read(8)
    if len(frame) < 8:
        break
    index, size = struct.unpack("<II", frame)
    text = inp.read(size).decode("utf-8", "replace")
    hits = []
    for number, line in enumerate(text.splitlines(), 1):
        if rx.search(line):
            hits.append([number, line if len(line) <= cut else line[:cut] + " [...]"])
    out.write(json.dumps([index, hits]) + "\n")
    out.flush()
"""


class _Search:
    """One search: feed files to the matcher child, collect its answers."""

    def __init__(
        self, sandbox: PathSandbox, files: list[str], pattern: str, ignore_case: bool
    ) -> None:
        self.sandbox = sandbox
        self.files = files
        self.header = json.dumps(
            {"pattern": pattern, "ignore_case": ignore_case, "max_shown": MAX_SHOWN_LINE}
        )

    def _read(self, path: str) -> bytes | None:
        try:
            fd = self.sandbox.open(path, os.O_RDONLY)
        except PathRefused:
            return None  # refused by policy, vanished, or not a regular file: not searched
        try:
            if os.fstat(fd).st_size > MAX_FILE_BYTES:
                return None
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
        return None if is_binary(data) else data

    async def _feed(self, stdin: asyncio.StreamWriter) -> None:
        stdin.write(self.header.encode() + b"\n")
        for index, path in enumerate(self.files):
            data = await asyncio.to_thread(self._read, path)
            if data is None:
                continue
            stdin.write(struct.pack("<II", index, len(data)) + data)
            await stdin.drain()
        stdin.close()

    async def results(self) -> AsyncGenerator[tuple[str, list[tuple[int, str]]], None]:
        """(file, hits) for each searched file, in walk order; kills the child on exit."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-c",
            _WORKER,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdin is not None and proc.stdout is not None
        feeder = asyncio.create_task(self._feed(proc.stdin))
        try:
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                index, hits = json.loads(line)
                yield self.files[index], [(int(n), str(text)) for n, text in hits]
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await feeder
        finally:
            feeder.cancel()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await feeder
            await proc.wait()


class GrepFilesTool:
    """Searches ``path`` (a file or a folder, default the working directory) for ``pattern``.

    Arguments: ``pattern`` (Python regex), ``path``, ``glob`` (file filter: a bare pattern
    such as ``*.py`` matches file names, one with ``/`` the path relative to ``path``),
    ``case_insensitive``, ``output_mode`` (content | files_with_matches | count) and
    ``max_results`` (cap on output lines). Bounded by the call's time limit.
    """

    name = "grep_files"

    async def run(
        self, args: Mapping[str, Any], ctx: ExecContext
    ) -> AsyncIterator[Chunk | ToolResult]:
        """Yield the one result."""
        try:
            yield await asyncio.wait_for(self._run(args, ctx), ctx.timeout_s)
        except TimeoutError:
            message = f"the search did not finish within {ctx.timeout_s:g} s (slow pattern?)"
            yield ToolResult(status=Status.TIMEOUT, content=f"Error: {message}", error=message)

    async def _run(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
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
            re.compile(pattern)  # compiling is linear; only matching can blow up
        except re.error as exc:
            return error_result(f"invalid regular expression {pattern!r}: {exc}")
        sandbox = ctx.sandbox
        decision = sandbox.check(path or sandbox.cwd)
        if not decision.allowed:
            return refused_result(decision.reason)
        globs = expand_braces(glob) if glob else []
        files = await asyncio.to_thread(self._files, sandbox, decision.resolved, globs, ctx)
        lines: list[str] = []
        capped = False
        search = _Search(sandbox, files, pattern, ignore_case)
        results = search.results()
        try:
            async for file_path, hits in results:
                if ctx.cancel.is_set():
                    return ToolResult(
                        status=Status.CANCELLED, content="Cancelled", error="cancelled"
                    )
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
        finally:
            await results.aclose()
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
        for entry in walk(
            sandbox, base, max_entries=MAX_WALK_ENTRIES, should_stop=ctx.cancel.is_set
        ):
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
