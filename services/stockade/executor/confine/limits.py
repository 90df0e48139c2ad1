"""Resource limits: rlimits per process, and a pids and a memory cgroup per command.

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
        return cls(*_create_root("pids", name))

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


@dataclass(frozen=True)
class MemoryCgroupRoot:
    """The launcher's memory cgroup, under which each worker gets one with its limit.

    RLIMIT_AS bounds one process; a command that starts several (or maps many files)
    could still hold many GB. The memory controller counts the whole command, every
    process it starts included, and the kernel's OOM killer ends it past the limit.
    """

    path: str
    """Directory of the launcher's memory cgroup."""
    version: int
    """1 (the v1 ``memory`` hierarchy) or 2 (unified)."""

    @classmethod
    def create(cls, name: str) -> MemoryCgroupRoot:
        """Create ``name`` under a writable memory hierarchy; raise ``OSError`` if none."""
        return cls(*_create_root("memory", name))

    def child(self, name: str, limit_bytes: int) -> str:
        """Create (or reuse: v2 shares one tree with pids) a child cgroup with the limit."""
        path = os.path.join(self.path, name)
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        set_memory(path, limit_bytes)
        return path

    def remove(self) -> None:
        """Remove every (empty) child and the root itself; best effort."""
        PidsCgroupRoot(self.path, self.version).remove()


def _create_root(controller: str, name: str) -> tuple[str, int]:
    """Create ``name`` under the first writable hierarchy of ``controller`` and delegate
    the controller to its children; (path, cgroup version), or ``OSError`` if none."""
    errors: list[str] = []
    for base, version in _candidates(controller):
        _sweep(base)
        path = os.path.join(base, name)
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError as exc:
            errors.append(f"{base}: {exc.strerror}")
            continue
        try:
            if version == 2:
                _write(os.path.join(path, "cgroup.subtree_control"), f"+{controller}")
            elif controller == "memory":
                # Children count in their parent's usage (the default on most hosts).
                _write_if_present(os.path.join(path, "memory.use_hierarchy"), "1")
        except OSError as exc:
            errors.append(f"{path}: cannot delegate {controller}: {exc.strerror}")
            remove_cgroup(path)
            continue
        return path, version
    raise OSError(0, f"no writable {controller} cgroup: " + ("; ".join(errors) or "none mounted"))


def set_memory(cgroup: str, limit_bytes: int) -> None:
    """Set the memory limit of a cgroup, swap included (so the limit cannot be dodged by
    pushing pages to swap)."""
    if os.path.exists(os.path.join(cgroup, "memory.max")):
        _write(os.path.join(cgroup, "memory.max"), str(limit_bytes))
        _write_if_present(os.path.join(cgroup, "memory.swap.max"), "0")
        return
    # v1: memsw (memory + swap, where swap accounting is on) must stay >= the memory
    # limit, so it goes first when raising and last when lowering: write it on both sides
    # (the write that would break the order fails quietly).
    memsw = os.path.join(cgroup, "memory.memsw.limit_in_bytes")
    _write_if_present(memsw, str(limit_bytes))
    _write(os.path.join(cgroup, "memory.limit_in_bytes"), str(limit_bytes))
    _write_if_present(memsw, str(limit_bytes))


def memory_limit(cgroup: str) -> int:
    """The memory limit in force in a cgroup (bytes)."""
    for name in ("memory.max", "memory.limit_in_bytes"):
        try:
            with open(os.path.join(cgroup, name)) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        return -1 if text == "max" else int(text)
    raise OSError(0, f"{cgroup} has no memory limit file")


def _write_if_present(path: str, text: str) -> None:
    try:
        _write(path, text)
    except FileNotFoundError:
        pass
    except OSError:
        # memsw refuses a value below the current memory limit ordering on some
        # kernels; the memory limit itself has been set (or raised) already.
        pass


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


def _candidates(controller: str) -> list[tuple[str, int]]:
    """Hierarchies of ``controller``: a v1 mount of it, or the unified one if it has it."""
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
        if fstype == "cgroup" and controller in options:
            found.append((os.path.join(mount_point, own.get(controller, "/").lstrip("/")), 1))
        elif fstype == "cgroup2":
            base = os.path.join(mount_point, own.get("", "/").lstrip("/"))
            try:
                with open(os.path.join(base, "cgroup.controllers")) as fh:
                    if controller in fh.read().split():
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
