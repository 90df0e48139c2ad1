"""Masking of policy-denied paths for bash, in the command's private mount namespace.

The read tools refuse ``read_file(**/.env)``; without masking, ``cat .env``,
``grep -r KEY .`` or ``find -exec cat`` would read it anyway. Before exec, every path
inside the roots that matches a denied glob is covered: a file by a read-only bind
mount of an empty file, a directory by an empty read-only tmpfs. The mounts exist only
in the command's mount namespace, and Landlock then forbids unmounting them.

Globs use the sandbox's syntax (:func:`stockade.executor.paths.is_protected_write`):
``**`` spans directories, a relative glob matches at any depth.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence

from stockade.executor.confine import kernel
from stockade.executor.paths import is_protected_write

# Stop walking pathological trees rather than stall every command: past this many
# entries the command is refused (fail closed) instead of run with files unmasked.
MAX_ENTRIES = 200_000


def _matches(path: str, globs: Sequence[str]) -> bool:
    if is_protected_write(path, globs) is not None:
        return True
    # "secrets/**" also covers the directory "secrets" itself.
    return is_protected_write(path + "/.", [g for g in globs if g.endswith("/**")]) is not None


def find_masked(roots: Iterable[str], globs: Sequence[str]) -> tuple[list[str], list[str]]:
    """(files, directories) inside ``roots`` that match ``globs``.

    Symlinks are neither followed nor masked: what they point to is masked where it
    lives if it matches, and Landlock keeps anything outside the roots unreadable.
    """
    files: list[str] = []
    dirs: list[str] = []
    if not globs:
        return files, dirs
    seen = 0
    pending = sorted({os.path.realpath(r) for r in roots})
    visited: set[str] = set()
    while pending:
        top = pending.pop()
        if top in visited:
            continue
        visited.add(top)
        if _matches(top, globs):
            dirs.append(top)
            continue
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                raise OSError(0, f"more than {MAX_ENTRIES} entries under the roots to scan")
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                pending.append(entry.path)
            elif stat.S_ISREG(mode) and _matches(entry.path, globs):
                files.append(entry.path)
    return files, dirs


def apply_masks(files: Sequence[str], dirs: Sequence[str], empty_file: str) -> int:
    """Cover each path (call in a private mount namespace); return how many were masked."""
    for path in files:
        kernel.mount(empty_file, path, None, kernel.MS_BIND, None)
        kernel.mount(
            None,
            path,
            None,
            kernel.MS_BIND | kernel.MS_REMOUNT | kernel.MS_RDONLY | kernel.MS_NOSUID,
            None,
        )
    for path in dirs:
        kernel.mount(
            "stockade-mask",
            path,
            "tmpfs",
            kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC,
            "size=4k,mode=0555",
        )
    return len(files) + len(dirs)


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def nested_read_only(readable: Sequence[str], writable: Sequence[str]) -> list[str]:
    """Read-only roots that lie inside a writable root."""
    rw = set(writable)
    return [r for r in readable if r not in rw and any(_within(r, w) and r != w for w in writable)]


def bind_read_only(paths: Sequence[str]) -> None:
    """Bind each directory onto itself, read-only (call in a private mount namespace)."""
    for path in paths:
        kernel.mount(path, path, None, kernel.MS_BIND | kernel.MS_REC, None)
        kernel.mount(
            None,
            path,
            None,
            kernel.MS_BIND | kernel.MS_REMOUNT | kernel.MS_RDONLY | kernel.MS_NOSUID,
            None,
        )


# Where host services keep pathname unix sockets. Landlock (ABI <= 7) does not govern
# connect() on them, so each socket found is covered with the empty file: a command
# cannot talk to the container runtime, D-Bus or Stockade's own unix-socket servers.
SOCKET_DIRS: tuple[tuple[str, int], ...] = (
    ("/run", 4),
    ("/var/run", 4),
    ("/dev", 1),  # /dev/log; deeper are device nodes only
    ("/tmp/.X11-unix", 1),
)


def find_sockets(
    dirs: Sequence[tuple[str, int]] = SOCKET_DIRS, *, skip: Sequence[str] = ()
) -> list[str]:
    """Pathname sockets under ``dirs`` (each to its depth), except below ``skip``."""
    found: list[str] = []
    seen: set[str] = set()
    pending = [(os.path.realpath(d), depth) for d, depth in dirs]
    while pending:
        top, depth = pending.pop()
        if top in seen or any(_within(top, s) for s in skip):
            continue
        seen.add(top)
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISSOCK(mode):
                found.append(entry.path)
            elif stat.S_ISDIR(mode) and depth > 1:
                pending.append((entry.path, depth - 1))
    return found
