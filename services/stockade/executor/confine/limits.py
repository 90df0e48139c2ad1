"""Resource limits: rlimits per process, and a pids cgroup per command.

The kernel never enforces RLIMIT_NPROC for uid 0 (``copy_process`` exempts INIT_USER),
so when commands run as root a fork bomb is only stopped by the pids cgroup controller;
for other uids RLIMIT_NPROC works too. Both are set when available.
"""

from __future__ import annotations

import os
import resource
import shutil
from dataclasses import dataclass

from stockade.executor.confine.policy import Rlimits


def apply_rlimits(limits: Rlimits) -> None:
    """Set the rlimits of the calling process (soft = hard, except CPU: hard = soft + 1).

    The one-second gap lets SIGXCPU arrive before SIGKILL, so programs can report it.
    """
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.nproc, limits.nproc))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.as_bytes, limits.as_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.fsize_bytes, limits.fsize_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.nofile, limits.nofile))
    # A core dump of a confined process could be large and land in the workspace.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def nproc_enforced() -> bool:
    """Whether the kernel enforces RLIMIT_NPROC for processes of our uid."""
    return os.getuid() != 0


@dataclass(frozen=True)
class PidsCgroupRoot:
    """A cgroup directory under which the launcher creates one cgroup per worker."""

    path: str
    """Directory of the launcher's own cgroup (created at start, removed at close)."""
    version: int
    """1 (the v1 ``pids`` hierarchy) or 2 (unified)."""

    @classmethod
    def create(cls, name: str) -> PidsCgroupRoot:
        """Create ``name`` under a writable pids hierarchy; raise ``OSError`` if none."""
        errors: list[str] = []
        for base, version in _candidates():
            _sweep(base)
            path = os.path.join(base, name)
            try:
                os.mkdir(path)
            except FileExistsError:
                pass
            except OSError as exc:
                errors.append(f"{base}: {exc.strerror}")
                continue
            if version == 2:
                try:
                    _write(os.path.join(path, "cgroup.subtree_control"), "+pids")
                except OSError as exc:
                    errors.append(f"{path}: cannot delegate pids: {exc.strerror}")
                    os.rmdir(path)
                    continue
            return cls(path, version)
        raise OSError(0, "no writable pids cgroup: " + ("; ".join(errors) or "none mounted"))

    def child(self, name: str, max_pids: int) -> str:
        """Create a child cgroup with ``pids.max``; return its path."""
        path = os.path.join(self.path, name)
        os.mkdir(path)
        _write(os.path.join(path, "pids.max"), str(max_pids))
        return path

    def remove(self) -> None:
        """Remove every (empty) child and the root itself; best effort."""
        if not os.path.isdir(self.path):
            return
        for entry in os.listdir(self.path):
            sub = os.path.join(self.path, entry)
            if os.path.isdir(sub):
                remove_cgroup(sub)
        remove_cgroup(self.path)


LAUNCHER_PREFIX = "stockade-launcher-"


def launcher_alive(pid: int) -> bool:
    """Whether ``pid`` is a running launcher (names of its cgroup and tmp dir carry it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"stockade.executor.confine.launcher" in fh.read()
    except OSError:
        return False


def stale_owner(name: str) -> bool:
    """Whether ``name`` (``stockade-launcher-<pid>[-...]``) belongs to a dead launcher."""
    if not name.startswith(LAUNCHER_PREFIX):
        return False
    digits = name[len(LAUNCHER_PREFIX) :].split("-", 1)[0]
    return digits.isdigit() and not launcher_alive(int(digits))


def _stale_entries(base: str) -> list[str]:
    """The entries of ``base`` owned by dead launchers (none when it cannot be listed)."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    return [os.path.join(base, name) for name in names if stale_owner(name)]


def _sweep(base: str) -> None:
    """Remove the cgroups of launchers that died without cleaning up (best effort)."""
    for path in _stale_entries(base):
        PidsCgroupRoot(path, 1).remove()


def sweep_tmp(tmp_root: str) -> None:
    """Remove the tmp dirs of launchers that died without cleaning up (best effort)."""
    for path in _stale_entries(tmp_root):
        remove_tree(path)


def set_max(cgroup: str, max_pids: int) -> None:
    """Change ``pids.max`` of a cgroup."""
    _write(os.path.join(cgroup, "pids.max"), str(max_pids))


def enter(cgroup: str, pid: int) -> None:
    """Move process ``pid`` into ``cgroup``."""
    _write(os.path.join(cgroup, "cgroup.procs"), str(pid))


def members(cgroup: str) -> list[int]:
    """Pids in ``cgroup`` (empty when it is gone)."""
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as fh:
            return [int(line) for line in fh if line.strip()]
    except OSError:
        return []


def remove_cgroup(cgroup: str) -> bool:
    """rmdir a cgroup (only works once empty); True on success or if already gone."""
    try:
        os.rmdir(cgroup)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _candidates() -> list[tuple[str, int]]:
    """Writable pids hierarchies: a v1 ``pids`` mount, or the unified one if it has pids."""
    found: list[tuple[str, int]] = []
    try:
        with open("/proc/self/mountinfo") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return found
    own = _own_cgroups()
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        rfields = right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        mount_point, fstype, options = fields[4], rfields[0], rfields[2].split(",")
        if fstype == "cgroup" and "pids" in options:
            found.append((os.path.join(mount_point, own.get("pids", "/").lstrip("/")), 1))
        elif fstype == "cgroup2":
            base = os.path.join(mount_point, own.get("", "/").lstrip("/"))
            try:
                with open(os.path.join(base, "cgroup.controllers")) as fh:
                    if "pids" in fh.read().split():
                        found.append((base, 2))
            except OSError:
                continue
    return found


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) -> our cgroup path, from /proc/self/cgroup."""
    result: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    result[controller] = path
    except (OSError, ValueError):
        pass
    return result


def remove_tree(path: str) -> None:
    """Remove a private tmp dir; best effort (a command may leave odd permissions)."""
    shutil.rmtree(path, ignore_errors=True)
