"""glob_files: files matching a glob pattern, newest first, inside the roots only (EXE-11)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stockade.executor.paths import PathSandbox, is_protected_write, match_relative_glob
from stockade.executor.tools.base import ExecContext, ToolResult
from stockade.executor.tools.support import (
    BlockingTool,
    error_result,
    expand_braces,
    int_arg,
    ok_result,
    refused_result,
    str_arg,
    walk,
)

__all__ = ["MAX_WALK_ENTRIES", "GlobFilesTool", "split_glob"]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_WALK_ENTRIES = 200_000
_GLOB_CHARS = frozenset("*?[")


class _Refused(Exception):
    pass


def split_glob(pattern: str) -> tuple[str, str]:
    """Split a pattern into its literal leading folder and the glob part after it.

    ``/srv/ws/src/**/*.py`` → (``/srv/ws/src``, ``**/*.py``); ``*.md`` → (``""``, ``*.md``).
    The literal part is what the sandbox checks (EXE-5: the pattern, after resolution).
    """
    parts = pattern.split("/")
    literal: list[str] = []
    for i, part in enumerate(parts[:-1]):
        if _GLOB_CHARS & set(part):
            return "/".join(literal) or ("/" if pattern.startswith("/") else ""), "/".join(
                parts[i:]
            )
        literal.append(part)
    base = "/".join(literal)
    if pattern.startswith("/") and not base:
        base = "/"
    return base, parts[-1]


@dataclass(frozen=True)
class _Match:
    path: str
    mtime_ns: int


class GlobFilesTool(BlockingTool):
    """Lists files whose path (relative to ``path``, default the working directory) matches
    ``pattern``. ``**`` spans folders, ``{a,b}`` gives alternatives. Symlinks are never
    followed while walking, and a listed symlink must resolve inside the roots."""

    name = "glob_files"

    def _run(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
        pattern = str_arg(args, "pattern")
        base_arg = str_arg(args, "path", required=False)
        limit = int_arg(args, "limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
        if not pattern:
            return error_result("pattern is empty")
        sandbox = ctx.sandbox
        matches: dict[str, _Match] = {}
        cut_short = False
        try:
            for alternative in expand_braces(pattern):
                cut_short |= self._collect(sandbox, alternative, base_arg, matches, ctx)
        except _Refused as exc:
            return refused_result(str(exc))
        if not matches:
            return ok_result(ctx, "No files found" + (" (search cut short)" if cut_short else ""))
        ordered = sorted(matches.values(), key=lambda m: (-m.mtime_ns, m.path))
        lines = [m.path for m in ordered[:limit]]
        if len(ordered) > limit:
            lines.append(f"({len(ordered) - limit} more files not shown; narrow the pattern)")
        if cut_short:
            lines.append(f"(search stopped after {MAX_WALK_ENTRIES} entries)")
        return ok_result(ctx, "\n".join(lines))

    @staticmethod
    def _collect(
        sandbox: PathSandbox,
        pattern: str,
        base_arg: str,
        out: dict[str, _Match],
        ctx: ExecContext,
    ) -> bool:
        """Add the matches of one brace alternative; returns whether the walk was cut."""
        literal, rest = split_glob(pattern)
        if pattern.startswith("/"):
            base = literal
        elif literal:
            base = os.path.join(base_arg, literal) if base_arg else literal
        else:
            base = base_arg or sandbox.cwd
        if ".." in rest.split("/") or "\0" in rest:
            raise _Refused("glob patterns with a '..' component are refused")
        decision = sandbox.check(base)
        if not decision.allowed:
            raise _Refused(decision.reason)
        root = decision.resolved
        if not os.path.isdir(root):
            if not rest:
                return False
            raise _Refused(f"{root} is not a directory")
        rest_parts = [p for p in rest.split("/") if p not in ("", ".")]
        depth = None if "**" in rest_parts else len(rest_parts)
        count = 0
        for entry in walk(
            sandbox,
            root,
            max_entries=MAX_WALK_ENTRIES,
            max_depth=depth,
            should_stop=ctx.cancel.is_set,
        ):
            count += 1
            if entry.is_dir or not match_relative_glob(rest, entry.rel):
                continue
            if entry.is_symlink:
                # The walk never follows links; a listed one must itself lead inside the roots.
                if not sandbox.check(entry.path).allowed:
                    continue
            elif is_protected_write(entry.path, sandbox.denied_read_globs):
                continue
            out[entry.path] = _Match(entry.path, entry.mtime_ns)
        return count >= MAX_WALK_ENTRIES
