"""Output shaping for the model (SPEC EXE-10).

Tool output is cut to ``max_chars`` keeping its head and its tail (the end of a build log
or a traceback matters as much as its start), with the cut marked in the text. When the
output is over the limit, the whole of it is saved to
``{library_dir}/tool-results/{session_id}/{call_id}.txt`` (both made safe as file names)
and the content says where, so the model can page through it with read_file. The session
folder matters: call ids are the model's (or the provider's) and repeat across sessions, so
two sessions using the same call id must not overwrite each other's output.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

__all__ = ["RESULTS_SUBDIR", "ShapedOutput", "persist_output", "safe_call_id", "shape_output"]

RESULTS_SUBDIR = "tool-results"

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_MAX_ID_CHARS = 100


@dataclass(frozen=True)
class ShapedOutput:
    """Output ready for the model."""

    content: str
    """The text, at most ``max_chars`` characters, with the cut marked if truncated."""
    truncated: bool
    """Whether anything was cut."""
    persisted_path: str
    """Where the whole output was saved ("" when it was not)."""


def safe_call_id(call_id: str) -> str:
    """A file name for ``call_id`` that cannot escape its folder.

    Characters other than ``[A-Za-z0-9_.-]`` become ``_`` and leading dots are dropped; when
    anything had to change, a short digest of the original id is appended, so that two
    different ids never share a file.
    """
    cleaned = _UNSAFE.sub("_", call_id).lstrip(".")[:_MAX_ID_CHARS]
    if cleaned == call_id and cleaned:
        return cleaned
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned}-{digest}" if cleaned else f"call-{digest}"


def _subdir(parent_fd: int, name: str) -> int:
    """Open (creating if needed) the folder ``name`` under ``parent_fd``, refusing a symlink."""
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    except FileExistsError:
        pass
    return os.open(
        name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd
    )


def persist_output(text: str, *, call_id: str, library_dir: str, session_id: str = "") -> str:
    """Save ``text`` as ``{library_dir}/tool-results/{safe session}/{safe id}.txt``; returns
    the path.

    Each folder is opened relative to its parent's fd with ``O_NOFOLLOW``, so a symlink
    planted at ``tool-results``, at the session folder or at the file name cannot redirect
    the write. Raises OSError when the file cannot be written.
    """
    name = safe_call_id(call_id) + ".txt"
    # An empty session id gets a folder of its own too (``call-<digest>``), distinct from
    # every real session's.
    session_dir = safe_call_id(session_id)
    lib_fd = os.open(library_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        results_fd = _subdir(lib_fd, RESULTS_SUBDIR)
    finally:
        os.close(lib_fd)
    try:
        dir_fd = _subdir(results_fd, session_dir)
    finally:
        os.close(results_fd)
    try:
        fd = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=dir_fd,
        )
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
        fh.write(text)
    return os.path.join(os.path.realpath(library_dir), RESULTS_SUBDIR, session_dir, name)


def _cut_at_newline(text: str, budget: int, *, from_end: bool) -> str:
    """Take ``budget`` characters from one end, preferring a line boundary when one is near."""
    if budget <= 0:
        return ""
    if not from_end:
        piece = text[:budget]
        nl = piece.rfind("\n")
        # Only back off to the line boundary if that loses less than a fifth of the budget.
        return piece[: nl + 1] if nl >= budget * 4 // 5 else piece
    piece = text[-budget:]
    nl = piece.find("\n")
    return piece[nl + 1 :] if 0 <= nl <= budget // 5 else piece


def shape_output(
    text: str,
    *,
    call_id: str,
    library_dir: str | None,
    max_chars: int = 4000,
    session_id: str = "",
) -> ShapedOutput:
    """Cut ``text`` to ``max_chars`` (head + marked cut + tail), persisting the whole if cut."""
    if max_chars <= 0:
        raise ValueError("max_chars must be positive")
    if len(text) <= max_chars:
        return ShapedOutput(text, False, "")
    persisted = ""
    where = "the full output was not saved (no library_dir configured)"
    if library_dir:
        try:
            persisted = persist_output(
                text, call_id=call_id, library_dir=library_dir, session_id=session_id
            )
            where = f"the full output is saved in {persisted} (read it with read_file)"
        except OSError as exc:
            where = f"the full output could not be saved ({exc.strerror or exc})"
    # The marker's length depends on how much is cut, which depends on the marker: size it
    # with the largest possible count, then fill the remaining budget.
    marker_tpl = "\n[... {cut} of {total} characters cut; " + where + " ...]\n"
    marker_len = len(marker_tpl.format(cut=len(text), total=len(text)))
    budget = max_chars - marker_len
    if budget < 2:
        marker = marker_tpl.format(cut=len(text), total=len(text)).strip()
        return ShapedOutput(marker[:max_chars], True, persisted)
    head = _cut_at_newline(text, budget - budget * 2 // 5, from_end=False)
    tail = _cut_at_newline(text, budget - len(head), from_end=True)
    cut = len(text) - len(head) - len(tail)
    marker = marker_tpl.format(cut=cut, total=len(text))
    return ShapedOutput(head + marker + tail, True, persisted)
