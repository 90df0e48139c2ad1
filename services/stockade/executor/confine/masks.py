"""Masking of policy-denied paths for bash, in the command's private mount namespace.

The read tools refuse ``read_file(**/.env)``; without masking, ``cat .env``,
``grep -r KEY .`` or ``find -exec cat`` would read it anyway. Before exec, every path
inside the roots that matches a denied glob is covered: a file by a read-only bind
mount of an empty file, a directory by an empty read-only tmpfs. The mounts exist only
in the command's mount namespace, and Landlock then forbids unmounting them.

Globs are matched by :mod:`stockade.executor.globs`, the sandbox's own matcher (so bash
hides exactly what ``read_file`` refuses): ``**`` spans directories, a relative glob
matches at any depth.
"""

from __future__ import annotations

import glob as globmod
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from stockade.executor.confine import kernel
from stockade.executor.globs import GlobSet, compile_globs

# Stop walking pathological trees rather than stall every command: past this many
# entries the command is refused (fail closed) instead of run with files unmasked.
MAX_ENTRIES = 200_000
MAX_OUTSIDE = 20_000


@dataclass(frozen=True)
class GlobMatcher:
    """The denied globs, compiled once by :mod:`stockade.executor.globs` (the sandbox's own
    matcher, linear in the path: the walk tests every entry, it must be fast)."""

    globs: GlobSet
    """The compiled globs."""

    @classmethod
    def compile(cls, globs: Sequence[str]) -> GlobMatcher:
        """Compile ``globs`` (never raises: a class like ``[z-a]`` simply matches nothing)."""
        return cls(compile_globs(globs))

    def file(self, path: str) -> bool:
        """Whether a file at ``path`` is named by a glob."""
        return self.globs.matches(path)

    def dir(self, path: str) -> bool:
        """Whether the directory ``path`` (or everything below it) is named by a glob.

        A glob ``D/**`` names ``D`` itself (``**`` matches zero components), so the
        directory is masked whole, as the sandbox refuses reading it.
        """
        return self.globs.matches(path)


def find_masked(roots: Iterable[str], globs: Sequence[str]) -> tuple[list[str], list[str]]:
    """(files, directories) inside ``roots`` that match ``globs``.

    Symlinks are neither followed nor masked: what they point to is masked where it
    lives if it matches, and Landlock keeps anything outside the roots unreadable.
    """
    files: list[str] = []
    dirs: list[str] = []
    if not globs:
        return files, dirs
    # Bound once: the walk tests every entry (file() and dir() are the same test).
    masked = GlobMatcher.compile(globs).globs.matches
    seen = 0
    pending = sorted({os.path.realpath(r) for r in roots})
    visited: set[str] = set()
    while pending:
        top = pending.pop()
        if top in visited:
            continue
        visited.add(top)
        if masked(top):
            dirs.append(top)
            continue
        try:
            scan = os.scandir(top)
        except OSError:
            continue
        with scan:
            for entry in scan:
                seen += 1
                if seen > MAX_ENTRIES:
                    raise OSError(0, f"more than {MAX_ENTRIES} entries under the roots to scan")
                try:
                    # d_type from the directory listing: no stat() per entry.
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and masked(entry.path):
                        files.append(entry.path)
                except OSError:
                    continue
    return files, dirs


_GLOB_META = frozenset("*?[")


def find_credentials(
    globs: Sequence[str], roots: Sequence[str]
) -> tuple[list[str], list[str], list[str]]:
    """The credential files of the bash analysis's list (``~`` already the home directory:
    ``PathSandbox.credential_globs``) that lie inside ``roots``: (files, directories, and
    the globs with wildcards, left to the mask walk). A literal glob (``~/.netrc``,
    ``~/.ssh/**``) costs one lstat, not a walk of the home directory. A credential path
    that is a symlink is masked where it points, when that is inside a root (outside,
    Landlock already refuses the read)."""
    real_roots = [os.path.realpath(r) for r in roots]
    files: list[str] = []
    dirs: list[str] = []
    rest: list[str] = []
    for glob in globs:
        base = glob[:-3] if glob.endswith("/**") else glob
        if _GLOB_META & set(base):
            literal: list[str] = []
            for part in glob.split("/")[1:]:
                if _GLOB_META & set(part):
                    break
                literal.append(part)
            prefix = "/" + "/".join(literal)
            if any(_within(prefix, r) or _within(r, prefix) for r in real_roots):
                rest.append(glob)
            continue
        try:
            mode = os.lstat(base).st_mode
            if stat.S_ISLNK(mode):
                base = os.path.realpath(base)
                mode = os.stat(base).st_mode
        except OSError:
            continue  # missing: nothing to hide (what a command puts there is its own)
        if not any(_within(base, r) for r in real_roots):
            continue
        if stat.S_ISDIR(mode):
            dirs.append(base)
        elif stat.S_ISREG(mode):
            files.append(base)
    return list(dict.fromkeys(files)), list(dict.fromkeys(dirs)), rest


def _regular_files(tops: Iterable[str], limit: int, what: str) -> Iterator[os.DirEntry[str]]:
    """The regular files below ``tops`` (symlinks not followed, each directory listed
    once). Raises OSError past ``limit`` entries listed (fail closed), naming ``what``."""
    seen = 0
    pending = list(tops)
    visited: set[str] = set()
    while pending:
        top = pending.pop()
        if top in visited:
            continue
        visited.add(top)
        try:
            with os.scandir(top) as scan:
                entries = list(scan)
        except OSError:
            continue
        seen += len(entries)
        if seen > limit:
            raise OSError(0, f"more than {limit} entries {what}")
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry
            except OSError:
                continue


def other_names(
    roots: Iterable[str], linked: dict[tuple[int, int], str], *, limit: int = MAX_ENTRIES
) -> list[str]:
    """Every regular file in ``roots`` whose identity (st_dev, st_ino) is in ``linked``
    under another path than the one given there: the hard links of those files. The walk
    compares the inode number from the directory listing (no stat per entry) and confirms
    a hit with lstat. Raises OSError past ``limit`` entries (fail closed)."""
    if not linked:
        return []
    inos = {ino for _, ino in linked}
    hits: list[str] = []
    tops = sorted({os.path.realpath(r) for r in roots})
    for entry in _regular_files(tops, limit, "under the roots to scan for hard links"):
        if entry.inode() not in inos:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        original = linked.get((st.st_dev, st.st_ino))
        if original is not None and original != entry.path:
            hits.append(entry.path)
    return hits


def files_under(directory: str, *, limit: int = MAX_ENTRIES) -> list[str]:
    """Every regular file below ``directory`` (symlinks not followed). Raises OSError
    past ``limit`` entries."""
    return [entry.path for entry in _regular_files([directory], limit, f"in {directory} to scan")]


def outside_files(globs: Sequence[str], *, limit: int = MAX_OUTSIDE) -> dict[tuple[int, int], str]:
    """The files the absolute ``globs`` name (dot files too; symlinks not followed at the
    end) that have more than one link, by (device, inode), the first name found for each: a
    hard link inside a root reads them past Landlock. Raises OSError past ``limit`` names
    (fail closed). The worker masks their other names; the path sandbox refuses reads
    through them."""
    found: dict[tuple[int, int], str] = {}
    seen = 0
    for pattern in globs:
        for path in globmod.iglob(pattern, recursive=True, include_hidden=True):
            seen += 1
            if seen > limit:
                raise OSError(0, f"more than {limit} denied files outside the roots to scan")
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                found.setdefault((st.st_dev, st.st_ino), path)
    return found


def linked_names(
    roots: Sequence[str], files: Sequence[str], dirs: Sequence[str], *, limit: int = MAX_ENTRIES
) -> list[str]:
    """Other names of the files a mask hides (the masked files, and the files inside the
    masked directories): a hard link made before (``ln .env notes``) reads the same file
    under a name no glob matches, and a mask covers a path, not an inode. Only files
    with more than one link cost a walk. Raises OSError past ``limit`` entries."""
    linked: dict[tuple[int, int], str] = {}
    for path in files:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            linked[(st.st_dev, st.st_ino)] = path
    for directory in dirs:
        for path in files_under(directory, limit=limit):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_nlink > 1:
                linked[(st.st_dev, st.st_ino)] = path
    return [
        p for p in other_names(roots, linked, limit=limit) if not any(_within(p, d) for d in dirs)
    ]


def _remount_read_only(path: str) -> None:
    """Make the bind mount at ``path`` read-only (a bind mount takes flags only so)."""
    kernel.mount(
        None,
        path,
        None,
        kernel.MS_BIND | kernel.MS_REMOUNT | kernel.MS_RDONLY | kernel.MS_NOSUID,
        None,
    )


def apply_masks(files: Sequence[str], dirs: Sequence[str], empty_file: str) -> int:
    """Cover each path (call in a private mount namespace); return how many were masked."""
    for path in files:
        kernel.mount(empty_file, path, None, kernel.MS_BIND, None)
        _remount_read_only(path)
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


def within(path: str, base: str) -> bool:
    """Whether ``path`` is ``base`` or below it (by components)."""
    return _within(path, base)


def nested_read_only(readable: Sequence[str], writable: Sequence[str]) -> list[str]:
    """Read-only roots that lie inside a writable root."""
    rw = set(writable)
    return [r for r in readable if r not in rw and any(_within(r, w) and r != w for w in writable)]


def bind_read_only(paths: Sequence[str]) -> None:
    """Bind each file or directory onto itself, read-only (in a private mount namespace)."""
    for path in paths:
        kernel.mount(path, path, None, kernel.MS_BIND | kernel.MS_REC, None)
        _remount_read_only(path)


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
            with os.scandir(top) as scan:
                entries = list(scan)
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


# Secrets of the host in the system directories a command may read. A command running
# as uid 0 (without capabilities) still owns these files, so only masking hides them.
# The system entries of the bash analysis's CREDENTIAL_PATHS under /etc, kept here as
# literals (the launcher does not import the analysis; a test holds the two together);
# /etc/ssh/ssh_host_* is expanded by find_sensitive.
SENSITIVE_SYSTEM_FILES: tuple[str, ...] = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    # Cluster and TLS keys (a node's admin kubeconfig, k3s, RHEL's and certbot's keys).
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/pki",
    "/etc/rancher/k3s/k3s.yaml",
    "/etc/pki/tls/private",
    "/etc/letsencrypt/live",
    "/etc/letsencrypt/archive",
    # Stockade's own configuration in its images and manifests: the executor's mTLS key
    # (`/etc/stockade/tls`, the mtls overlay), grant keys and policy. /etc is readable to
    # commands (Landlock's system dirs), and a command runs as the executor's uid.
    "/etc/stockade",
)


def find_sensitive() -> tuple[list[str], list[str]]:
    """Existing secret system (files, directories), not symlinks; plus the SSH host keys
    (``/etc/ssh/ssh_host_*``)."""
    candidates = list(SENSITIVE_SYSTEM_FILES)
    try:
        candidates += [
            os.path.join("/etc/ssh", n) for n in os.listdir("/etc/ssh") if n.startswith("ssh_host_")
        ]
    except OSError:
        pass
    files: list[str] = []
    dirs: list[str] = []
    for path in candidates:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode):
            files.append(path)
        elif stat.S_ISDIR(mode):
            dirs.append(path)
    return files, dirs


def hide_dirs(dirs: Sequence[str], roots: Sequence[str], empty_file: str) -> int:
    """Hide each directory (Stockade's own socket dirs) under an empty read-only tmpfs.

    A directory that holds a root (the socket next to the workspace) cannot be covered
    whole: its sockets are covered one by one instead. Returns how many mounts were made.
    """
    count = 0
    real_roots = [os.path.realpath(r) for r in roots]
    for directory in dict.fromkeys(os.path.realpath(d) for d in dirs):
        if not os.path.isdir(directory):
            continue
        if any(_within(r, directory) for r in real_roots):
            sockets = find_sockets(((directory, 1),))
            count += apply_masks(sockets, (), empty_file)
        else:
            count += apply_masks((), (directory,), empty_file)
    return count
