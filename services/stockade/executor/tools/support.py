"""Helpers shared by the file tools: argument parsing, results, race-free writes."""

from __future__ import annotations

import asyncio
import os
import secrets
import stat
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from stockade.errors import PathRefused, ResourceExhausted, StaleWrite
from stockade.executor.output import shape_output
from stockade.executor.paths import PathSandbox
from stockade.executor.readstate import FileStamp, ReadLedger, stamp_fd
from stockade.executor.tools.base import Chunk, ExecContext, Status, ToolResult

__all__ = [
    "SKIP_DIRS",
    "ArgError",
    "BlockingTool",
    "WalkEntry",
    "atomic_write",
    "bool_arg",
    "error_result",
    "expand_braces",
    "int_arg",
    "load_existing",
    "ok_result",
    "refused_result",
    "str_arg",
    "walk",
    "write_failure",
]


class ArgError(ValueError):
    """An argument is missing or has the wrong type; the message is for the model."""


def str_arg(args: Mapping[str, Any], name: str, *, required: bool = True, default: str = "") -> str:
    """A string argument."""
    value = args.get(name)
    if value is None:
        if required:
            raise ArgError(f"missing required argument {name!r}")
        return default
    if not isinstance(value, str):
        raise ArgError(f"argument {name!r} must be a string")
    return value


def int_arg(
    args: Mapping[str, Any], name: str, *, default: int, minimum: int, maximum: int | None = None
) -> int:
    """An integer argument (JSON numbers arrive as floats through google.protobuf.Struct)."""
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ArgError(f"argument {name!r} must be an integer")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ArgError(f"argument {name!r} must be {bound}")
    return number


def bool_arg(args: Mapping[str, Any], name: str, *, default: bool = False) -> bool:
    """A boolean argument."""
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ArgError(f"argument {name!r} must be true or false")
    return value


def ok_result(ctx: ExecContext, content: str) -> ToolResult:
    """A successful result, cut to the output limit (the whole persisted if cut, EXE-10)."""
    library = ctx.limits.library_dir
    shaped = shape_output(
        content,
        call_id=ctx.call_id,
        session_id=ctx.session_id,
        library_dir=os.fspath(library) if library else None,
        max_chars=ctx.limits.max_output_chars,
    )
    return ToolResult(
        status=Status.OK,
        content=shaped.content,
        truncated=shaped.truncated,
        persisted_path=shaped.persisted_path,
    )


def error_result(message: str) -> ToolResult:
    """The tool ran but failed (bad arguments, not found, stale write ...)."""
    return ToolResult(status=Status.ERROR, content=f"Error: {message}", error=message)


def refused_result(message: str) -> ToolResult:
    """The executor's own checks refused the call (sandbox, size limit)."""
    return ToolResult(status=Status.REFUSED, content=f"Refused: {message}", error=message)


class BlockingTool:
    """Base of the tools whose whole call is one blocking function, run in a worker thread.

    Subclasses set ``name`` and implement ``_run``, which parses its arguments first: an
    ArgError it raises becomes an error result, so every tool reports bad arguments alike.
    """

    name: str

    async def run(
        self, args: Mapping[str, Any], ctx: ExecContext
    ) -> AsyncIterator[Chunk | ToolResult]:
        """Yield the one result, computed in a worker thread (file tools are small and fast
        enough not to stream). The executor tries :meth:`run_now` first."""
        yield await asyncio.to_thread(self._checked_run, args, ctx)

    def run_now(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult | None:
        """The result, computed on the event loop, when the call is cheap enough (the
        thread hand-off costs more than a tiny call); None when it must go to a thread, as
        it must by default."""
        return None

    def _checked_run(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
        try:
            return self._run(args, ctx)
        except ArgError as exc:
            return error_result(str(exc))

    def _run(self, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
        raise NotImplementedError


def write_failure(exc: PathRefused | StaleWrite | OSError, verb: str, path: str) -> ToolResult:
    """The result of a file tool whose write of ``path`` failed: refused by the sandbox,
    stale (changed since this session read it), or an OS error."""
    if isinstance(exc, PathRefused):
        return refused_result(exc.message)
    if isinstance(exc, StaleWrite):
        return error_result(exc.message)
    return error_result(f"cannot {verb} {path}: {exc.strerror or exc}")


def atomic_write(
    sandbox: PathSandbox,
    resolved: str,
    data: bytes,
    *,
    read_state: ReadLedger | None = None,
    session_id: str = "",
) -> FileStamp:
    """Write ``data`` to ``resolved`` by a temporary file and a rename in the same directory.

    The directory is opened through the sandbox (no symlink can redirect it), the temporary
    file is created with O_EXCL|O_NOFOLLOW relative to that fd and renamed over the target,
    so readers never see a half-written file and a symlink at the target is replaced, not
    followed. An existing file keeps its permission bits. Records the new content in
    ``read_state`` so that the session can edit again without re-reading its own write.
    """
    parent, name = os.path.split(resolved)
    sandbox.makedirs(parent)
    dir_fd = sandbox.open(parent, os.O_RDONLY | os.O_DIRECTORY, write=True)
    tmp = f".{name[:200]}.stockade-{secrets.token_hex(6)}.tmp"
    try:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o644
            if stat.S_ISDIR(st.st_mode):
                raise PathRefused(f"{resolved} is a directory", path=resolved)
        except FileNotFoundError:
            mode = 0o644
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=dir_fd,
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)  # the umask may have narrowed it
            stamp = FileStamp.of_bytes(data, os.fstat(fd))
        finally:
            os.close(fd)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)
    if read_state is not None:
        try:
            read_state.record(session_id, resolved, stamp)
        except ResourceExhausted:
            # The write is done; failing the call now would say it was not. The session
            # must read the file before its next edit, and that read names the limit.
            pass
    return stamp


def load_existing(sandbox: PathSandbox, resolved: str) -> tuple[FileStamp, bytes] | None:
    """The current stamp and content of ``resolved``, or None when no file is there.

    Opened through the sandbox (race-free); raises PathRefused when something other than a
    regular file is there or the open is refused.
    """
    if not os.path.lexists(resolved):
        return None
    fd = sandbox.open(resolved, os.O_RDONLY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PathRefused(f"{resolved} is not a regular file", path=resolved)
        return stamp_fd(fd)
    finally:
        os.close(fd)


SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
"""Version-control internals: huge, never what a search is after (ripgrep skips them too)."""


@dataclass(frozen=True)
class WalkEntry:
    """One file or folder met by :func:`walk`."""

    path: str
    """Absolute path (the walk's canonical base joined with ``rel``)."""
    rel: str
    """Path relative to the base, ``/``-separated."""
    is_dir: bool
    """Whether it is a directory (symlinks are reported, never followed: False)."""
    is_symlink: bool
    """Whether it is a symbolic link."""
    mtime_ns: int
    """Modification time of the entry itself (lstat)."""


def walk(
    sandbox: PathSandbox,
    base: str,
    *,
    max_entries: int,
    max_depth: int | None = None,
    skip_dirs: frozenset[str] = SKIP_DIRS,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[WalkEntry]:
    """Breadth-first walk of the canonical folder ``base`` that never follows symlinks.

    Every folder is opened through the sandbox (no symlink anywhere on its path, beneath
    its root) and listed from that fd, so a folder swapped for a symlink mid-walk is
    skipped instead of listed. Stops after ``max_entries`` entries (the caller reports that
    the search was cut short) or when ``should_stop()`` turns true. Unreadable or refused
    folders are skipped.
    """
    seen = 0
    queue: deque[tuple[str, str, int]] = deque([(base, "", 0)])
    while queue:
        folder, rel_folder, depth = queue.popleft()
        try:
            fd = sandbox.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except PathRefused:
            continue
        try:
            with os.scandir(fd) as it:
                listed = []
                for entry in it:
                    try:
                        listed.append((entry.name, entry.stat(follow_symlinks=False)))
                    except OSError:
                        continue
        except OSError:
            continue
        finally:
            os.close(fd)
        for name, st in sorted(listed, key=lambda item: item[0]):
            seen += 1
            if seen > max_entries or should_stop():
                return
            path = f"{folder.rstrip('/')}/{name}"
            rel = f"{rel_folder}/{name}" if rel_folder else name
            is_link = stat.S_ISLNK(st.st_mode)
            is_dir = stat.S_ISDIR(st.st_mode)
            yield WalkEntry(path, rel, is_dir, is_link, st.st_mtime_ns)
            if is_dir and name not in skip_dirs and (max_depth is None or depth + 1 < max_depth):
                queue.append((path, rel, depth + 1))


def expand_braces(pattern: str) -> list[str]:
    """Expand ``{a,b}`` alternatives (``*.{ts,tsx}``), innermost-first, as shells do."""
    close = pattern.find("}")
    open_ = pattern.rfind("{", 0, close) if close >= 0 else -1
    if open_ < 0 or close < 0:
        return [pattern]
    head, body, tail = pattern[:open_], pattern[open_ + 1 : close], pattern[close + 1 :]
    if "," not in body:
        # Not an alternative list: keep the braces literally (escaped for fnmatch).
        return [p.replace("\0", "{") for p in expand_braces(head + "\0" + body + "}" + tail)]
    out: list[str] = []
    for alt in body.split(","):
        out.extend(expand_braces(head + alt + tail))
    return out
