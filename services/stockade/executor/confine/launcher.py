"""The launcher process: ``python -m stockade.executor.confine.launcher --fd N``.

Started once per executor. It is small and single-threaded, so forking it is cheap
and, above all, does not grow with the executor's memory (PERF-4/5): the executor
never forks. At start it settles what this host allows (pid and mount namespaces, an
empty network namespace it then lives in, Landlock, a pids cgroup, dropping
capabilities) and keeps a small pool of pre-forked, prepared workers (``worker.py``).

Protocol over the control socket (AF_UNIX SOCK_SEQPACKET, one JSON object a message):

* launcher -> executor: ``{"ev": "hello", "pid", "layers"}`` once, then
  ``{"ev": "worker", "wid", "pid"}`` with the executor's end of a socket to a ready
  worker attached (SCM_RIGHTS). The executor sends its request straight to the worker
  (see ``worker.serve``); the launcher is off the critical path. ``{"ev": "failed",
  "message"}`` when no worker can be prepared.
* executor -> launcher: ``{"op": "took", "wid"}`` (a worker was used: refill the pool),
  ``{"op": "want"}`` (none left and a command waits: fork one now), ``{"op": "kill",
  "wid"}`` (kill the worker and its whole command), ``{"op": "shutdown"}``; closing the
  socket does the same as shutdown.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import selectors
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

from stockade.executor.confine import kernel, landlock, limits, protect, worker
from stockade.executor.confine.policy import (
    CAPABILITIES,
    GIT_NEUTRALISED,
    LANDLOCK,
    MEMORY_CGROUP,
    MOUNT_MASK,
    NETNS,
    NO_NEW_PRIVS,
    PID_NAMESPACE,
    PIDS_CGROUP,
    PROCESS_GROUP,
    RLIMITS,
    SECCOMP,
    Layer,
    Rlimits,
)

MAX_MESSAGE = 1 << 20
POOL_SIZE = 2


@dataclass
class _Worker:
    wid: int
    pid: int
    pidfd: int
    slot: worker.Slot


class LauncherServer:
    """The launcher's state and event loop."""

    def __init__(
        self,
        control: socket.socket,
        pool_size: int = POOL_SIZE,
        disabled: frozenset[str] = frozenset(),
    ) -> None:
        """Serve ``control`` (the executor's end is the peer); ``disabled`` names layers
        not to use even where the host allows them (reported inactive)."""
        self.control = control
        self.disabled = disabled
        self.pool_size = pool_size
        self.selector = selectors.DefaultSelector()
        self.idle = 0
        self.workers: dict[int, _Worker] = {}
        # Not the tempfile module: every import makes each forked worker bigger.
        tmp_root = os.environ.get("TMPDIR") or "/tmp"
        limits.sweep_tmp(tmp_root)
        self.base = os.path.join(
            tmp_root, f"{limits.LAUNCHER_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
        )
        os.mkdir(self.base, 0o700)
        self.cgroup_root: limits.PidsCgroupRoot | None = None
        self.memory_root: limits.MemoryCgroupRoot | None = None
        self.counter = 0
        self.failed = False
        self.layers: tuple[Layer, ...] = ()
        self.plan = self._settle()

    # --- start-up: find out, by doing, what this host allows -------------------------

    def _settle(self) -> worker.Plan:
        empty = os.path.join(self.base, "empty")
        with open(empty, "w"):
            pass
        os.chmod(empty, 0o444)
        os.chmod(self.base, 0o711)
        layers: list[Layer] = [
            Layer(PROCESS_GROUP, True, "own session and process group; killed as a group"),
        ]
        pidns = self._off(PID_NAMESPACE) or _try_pid_namespace()
        layers.append(
            Layer(
                PID_NAMESPACE,
                pidns is None,
                "each command is pid 1 of its own pid namespace (no orphans)"
                if pidns is None
                else f"unavailable: {pidns}",
            )
        )
        default = Rlimits()
        layers.append(
            Layer(
                RLIMITS,
                True,
                "nproc, cpu, address space, file size, open files"
                + ("" if limits.nproc_enforced() else " (nproc not enforced for uid 0)"),
            )
        )
        try:
            if self._off(PIDS_CGROUP):
                raise OSError(0, "disabled by configuration")
            self.cgroup_root = limits.PidsCgroupRoot.create(
                f"{limits.LAUNCHER_PREFIX}{os.getpid()}"
            )
            layers.append(Layer(PIDS_CGROUP, True, f"pids cgroup v{self.cgroup_root.version}"))
        except OSError as exc:
            layers.append(Layer(PIDS_CGROUP, False, f"unavailable: {exc.strerror or exc}"))
        try:
            if self._off(MEMORY_CGROUP):
                raise OSError(0, "disabled by configuration")
            self.memory_root = limits.MemoryCgroupRoot.create(
                f"{limits.LAUNCHER_PREFIX}{os.getpid()}"
            )
            # Prove the limit file takes a value here (a read-only or undelegated
            # controller fails now, at start, not on the first command).
            probe = self.memory_root.child("probe", default.memory_bytes)
            limits.memory_limit(probe)
            limits.remove_cgroup(probe)
            layers.append(
                Layer(
                    MEMORY_CGROUP,
                    True,
                    f"memory cgroup v{self.memory_root.version}, default limit "
                    f"{default.memory_bytes // (1024 * 1024)} MiB per command",
                )
            )
        except OSError as exc:
            if self.memory_root is not None:
                self.memory_root.remove()
                self.memory_root = None
            layers.append(Layer(MEMORY_CGROUP, False, f"unavailable: {exc.strerror or exc}"))
        layers.append(Layer(NO_NEW_PRIVS, True, "prctl(PR_SET_NO_NEW_PRIVS)"))
        seccomp = self._off(SECCOMP) or _try_seccomp()
        layers.append(
            Layer(
                SECCOMP,
                seccomp is None,
                "keyctl, add_key, request_key refused (the kernel keyrings of the uid), "
                "foreign syscall ABIs killed"
                if seccomp is None
                else f"unavailable: {seccomp}",
            )
        )
        drop_caps = not self._off(CAPABILITIES) and kernel.has_effective_capability(
            kernel.CAP_SETPCAP
        )
        layers.append(
            Layer(
                CAPABILITIES,
                drop_caps,
                "every capability dropped before exec"
                if drop_caps
                else self._off(CAPABILITIES) or "the launcher holds no capabilities to drop",
            )
        )
        orig_net_fd = -1
        netns_ok = False
        try:
            if self._off(NETNS):
                raise OSError(0, "disabled by configuration")
            orig_net_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            kernel.unshare(kernel.CLONE_NEWNET)
            netns_ok = True
            layers.append(
                Layer(NETNS, True, "commands run in a network namespace without interfaces")
            )
        except OSError as exc:
            if orig_net_fd >= 0:
                os.close(orig_net_fd)
                orig_net_fd = -1
            layers.append(Layer(NETNS, False, f"unavailable: {exc.strerror or exc}"))
        abi = 0 if self._off(LANDLOCK) else landlock.abi_version()
        layers.append(
            Layer(
                LANDLOCK,
                abi > 0,
                f"ABI {abi}" if abi > 0 else self._off(LANDLOCK) or "the kernel offers no Landlock",
            )
        )
        mountns, ipcns = (self._off(MOUNT_MASK), False)
        if mountns is None:
            mountns, ipcns = _try_mount_namespace()
        layers.append(
            Layer(
                MOUNT_MASK,
                mountns is None,
                (
                    "policy-denied paths masked in a private mount namespace"
                    + (
                        ", in a private IPC namespace (no System V IPC or POSIX message "
                        "queues of the host)"
                        if ipcns
                        else "; the host's IPC namespace is shared (no CLONE_NEWIPC)"
                    )
                )
                if mountns is None
                else f"unavailable: {mountns}",
            )
        )
        layers.append(Layer(GIT_NEUTRALISED, True, "git ignores system/global config and hooks"))
        self.layers = tuple(layers)
        self.default_nproc = default.nproc
        self.default_memory = default.memory_bytes
        return worker.Plan(
            pid_namespace=pidns is None,
            mount_namespace=mountns is None,
            netns=netns_ok,
            orig_net_fd=orig_net_fd,
            landlock_abi=abi,
            drop_caps=drop_caps,
            cgroup=self.cgroup_root is not None,
            empty_file=empty,
            inactive=tuple((x.name, x.detail) for x in layers if not x.active),
            ipc_namespace=ipcns,
            seccomp=seccomp is None,
        )

    def _off(self, layer: str) -> str | None:
        return "disabled by configuration" if layer in self.disabled else None

    # --- workers ---------------------------------------------------------------------

    def _fork_worker(self) -> None:
        self.counter += 1
        wid = self.counter
        tmp_dir = os.path.join(self.base, f"w{wid}")
        os.mkdir(tmp_dir, 0o700)
        cgroup = ""
        if self.cgroup_root is not None:
            cgroup = self.cgroup_root.child(f"w{wid}", self.default_nproc)
        memory = ""
        if self.memory_root is not None:
            memory = self.memory_root.child(f"w{wid}", self.default_memory)
        git_state = os.open(
            os.path.join(self.base, f"w{wid}.git"),
            os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
            0o600,
        )
        slot = worker.Slot(
            tmp_dir=tmp_dir,
            cgroup=cgroup,
            cgroup_max=self.default_nproc,
            memory_cgroup=memory,
            memory_max=self.default_memory,
            git_state_fd=git_state,
        )
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        own_pidns = -1
        if self.plan.pid_namespace:
            own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            kernel.unshare(kernel.CLONE_NEWPID)
        try:
            pid = os.fork()
        except BaseException:
            if own_pidns >= 0:
                kernel.setns(own_pidns, kernel.CLONE_NEWPID)
                os.close(own_pidns)
            raise
        if pid == 0:  # the worker: it must never return into the launcher's loop
            try:
                ours.close()
                prepared = worker.prepare(
                    self.plan, (theirs.fileno(), self.plan.orig_net_fd, git_state)
                )
                worker.serve(theirs, self.plan, slot, prepared)
            finally:
                os._exit(worker.SETUP_FAILED)
        if own_pidns >= 0:
            # Reset, so the next worker gets a fresh namespace of its own again.
            kernel.setns(own_pidns, kernel.CLONE_NEWPID)
            os.close(own_pidns)
        theirs.close()
        os.close(git_state)
        # Before the executor learns of the worker, so the command starts inside.
        for group in dict.fromkeys(g for g in (cgroup, memory) if g):
            limits.enter(group, pid)
        pidfd = os.pidfd_open(pid)
        w = _Worker(wid=wid, pid=pid, pidfd=pidfd, slot=slot)
        self.workers[wid] = w
        self.selector.register(pidfd, selectors.EVENT_READ, w)
        try:
            socket.send_fds(
                self.control,
                [json.dumps({"ev": "worker", "wid": wid, "pid": pid}).encode()],
                [ours.fileno()],
            )
        except OSError:
            pass
        ours.close()
        self.idle += 1

    def _fill_pool(self, *, extra: bool = False) -> None:
        """Fork workers up to the pool size (one more with ``extra``: a caller waits)."""
        # After a failure, stop until the executor asks again rather than fork in a
        # tight loop; the waiting run is told why.
        wanted = self.pool_size + (1 if extra else 0)
        while self.idle < wanted and not self.failed:
            try:
                self._fork_worker()
            except OSError as exc:
                self.failed = True
                message = f"cannot prepare a worker: {exc}"
                print(f"stockade-launcher: {message}", file=sys.stderr)
                try:
                    self.control.sendall(json.dumps({"ev": "failed", "message": message}).encode())
                except OSError:
                    pass

    def _kill(self, w: _Worker) -> None:
        try:
            signal.pidfd_send_signal(w.pidfd, signal.SIGKILL)
        except OSError:
            pass
        if not self.plan.pid_namespace:
            self._kill_descendants(w)

    def _kill_descendants(self, w: _Worker) -> None:
        """Without a pid namespace, the group and the cgroup find the descendants."""
        try:
            os.killpg(w.pid, signal.SIGKILL)
        except OSError:
            pass
        self._kill_cgroup(w)

    def _kill_cgroup(self, w: _Worker) -> None:
        if not w.slot.cgroup:
            return
        for _ in range(1000):
            pids = limits.members(w.slot.cgroup)
            if not pids:
                return
            _kill_all(pids)

    def _reap(self, w: _Worker) -> None:
        self.selector.unregister(w.pidfd)
        try:
            os.waitpid(w.pid, 0)
        except ChildProcessError:
            pass
        os.close(w.pidfd)
        self.workers.pop(w.wid, None)
        if not self.plan.pid_namespace:
            # Background children may outlive the worker: the command is over, they go.
            self._kill_descendants(w)
            self._kill_orphans()
        limits.remove_tree(w.slot.tmp_dir)
        self._finish_git_cleanup(w)
        if w.slot.cgroup:
            self._kill_cgroup(w)
            limits.remove_cgroup(w.slot.cgroup)
        if w.slot.memory_cgroup:
            for pid in limits.members(w.slot.memory_cgroup):
                _kill_all([pid])
            limits.remove_cgroup(w.slot.memory_cgroup)

    def _finish_git_cleanup(self, w: _Worker) -> None:
        """A worker killed mid-command (time limit, cancel) could not remove the git
        directories and protected files its command created: do it here, in a child
        confined by Landlock to the command's writable roots (and the removal opens every
        directory without following symlinks: one swapped in by a concurrent command
        cannot lead it anywhere else)."""
        path = os.path.join(self.base, f"w{w.wid}.git")
        try:
            with open(path, "rb") as fh:
                # Our own private file, bounded by the walk's bound (200,000 entries).
                data = fh.read()
            os.unlink(path)
        except OSError:
            return
        if not data:
            return  # the worker finished the job itself (or had none)
        try:
            snapshot = protect.Snapshot.from_dict(json.loads(data))
        except (ValueError, KeyError, TypeError) as exc:
            print(
                f"stockade-launcher: WARNING: the killed command's snapshot is unreadable ({exc}):"
                " what it created in its writable roots was not checked",
                file=sys.stderr,
            )
            return
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                kernel.set_no_new_privs()
                if self.plan.landlock_abi > 0:
                    everything = landlock.fs_rights(self.plan.landlock_abi)
                    landlock.restrict(
                        [landlock.PathRule(r, everything) for r in snapshot.roots],
                        abi=self.plan.landlock_abi,
                        deny_tcp=True,
                    )
                removed = protect.clean_up(snapshot)
                for what, paths in (
                    ("removed git control", removed.git),
                    ("removed protected", removed.protected),
                    ("set aside changed protected", removed.quarantined),
                    ("could not remove", removed.failed),
                ):
                    if paths:
                        print(
                            f"stockade-launcher: {what} path(s) of a killed command: "
                            + ", ".join(paths[:5]),
                            file=sys.stderr,
                        )
                code = 0
            finally:
                os._exit(code)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

    def _kill_orphans(self) -> None:
        """Kill and reap our children that are not workers.

        We are a child subreaper: what a killed worker's command left behind (even after
        setsid, which the group kill misses) is re-parented to us rather than to init.
        """
        workers = {w.pid for w in self.workers.values()}
        for _ in range(1000):
            orphans = [pid for pid in worker.own_children() if pid not in workers]
            if not orphans:
                return
            _kill_all(orphans)
            for pid in orphans:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass

    def _on_control(self) -> bool:
        try:
            data = self.control.recv(MAX_MESSAGE)
        except OSError:
            return False
        if not data:
            return False
        request = json.loads(data)
        op = request.get("op")
        if op == "took":
            self.idle = max(self.idle - 1, 0)
        elif op == "want":
            # The executor has no worker left and a command waiting: fork now, and try
            # again even after a failure.
            self.failed = False
            self._fill_pool(extra=True)
        elif op == "kill":
            w = self.workers.get(int(request["wid"]))
            if w is not None:
                self._kill(w)
        elif op == "shutdown":
            return False
        return True

    def serve(self) -> None:
        """Say hello, then run until the executor closes the socket or asks to stop."""
        # Orphans of killed commands come to us, not to init (see _kill_orphans).
        kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
        hello = {"ev": "hello", "pid": os.getpid(), "layers": [x.to_dict() for x in self.layers]}
        self.control.sendall(json.dumps(hello).encode())
        self.selector.register(self.control, selectors.EVENT_READ, None)
        # Everything allocated so far lives as long as we do: keep the collector off
        # it, so forked workers share those pages instead of copying them.
        for _ in range(16):  # past 3.11's specialisation threshold
            worker.warm_up()
        gc.collect()
        gc.freeze()
        self._fill_pool()
        try:
            while True:
                for key, _ in self.selector.select():
                    if key.data is None:
                        if not self._on_control():
                            return
                    else:
                        self._reap(key.data)
                self._fill_pool()
        finally:
            self.close()

    def close(self) -> None:
        """Kill every worker and command, remove the cgroups and tmp dirs."""
        for w in list(self.workers.values()):
            self._kill(w)
            self._reap(w)
        if self.cgroup_root is not None:
            self.cgroup_root.remove()
        if self.memory_root is not None:
            self.memory_root.remove()
        limits.remove_tree(self.base)


def _kill_all(pids: list[int]) -> None:
    """SIGKILL each of ``pids``; one already gone (or not ours to kill) is passed over."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _try_pid_namespace() -> str | None:
    """None if a worker can be pid 1 of a new pid namespace, else why not."""
    try:
        own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return str(exc)
    try:
        kernel.unshare(kernel.CLONE_NEWPID)
    except OSError as exc:
        os.close(own)
        return f"unshare(CLONE_NEWPID): {exc.strerror}"
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if os.getpid() == 1 else 1)
        kernel.setns(own, kernel.CLONE_NEWPID)
        _, status = os.waitpid(pid, 0)
    except OSError as exc:
        return f"pid namespace: {exc.strerror}"
    finally:
        os.close(own)
    return None if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else "not pid 1"


def _in_forked_child(probe: Callable[[], bytes]) -> bytes:
    """What ``probe`` answers when run in a forked child (which then exits): a probe
    that changes the process (a namespace, a seccomp filter) leaves the launcher as it was."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.write(w, probe())
        finally:
            os._exit(0)
    os.close(w)
    answer = b""
    while chunk := os.read(r, 256):
        answer += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return answer


def _try_seccomp() -> str | None:
    """None if a forked child can install the keyring seccomp filter, else why not."""
    if not kernel.keyring_filter_supported():
        return f"no filter for {os.uname().machine}"

    def child() -> bytes:
        try:
            kernel.set_no_new_privs()
            kernel.deny_keyring_syscalls()
        except OSError as exc:
            return f"seccomp: {exc.strerror or exc}".encode()
        return b"ok"

    answer = _in_forked_child(child)
    return None if answer == b"ok" else answer.decode(errors="replace") or "probe failed"


def _try_mount_namespace() -> tuple[str | None, bool]:
    """(None if a forked child can get a private mount namespace, else why not; whether
    it can also get a private IPC namespace: without one a command reaches the System V
    shared memory, semaphores and message queues of every process of its uid on the host,
    which neither Landlock nor the masks govern)."""

    def child() -> bytes:
        try:
            kernel.unshare(kernel.CLONE_NEWNS)
            kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_SLAVE, None)
        except OSError as exc:
            return f"unshare(CLONE_NEWNS): {exc.strerror}".encode()
        try:
            kernel.unshare(kernel.CLONE_NEWIPC)
        except OSError:
            return b"ok"
        return b"ok+ipc"

    answer = _in_forked_child(child)
    if answer in (b"ok", b"ok+ipc"):
        return None, answer == b"ok+ipc"
    return answer.decode(errors="replace") or "probe failed", False


def main(argv: list[str] | None = None) -> int:
    """Entry point; ``--probe`` prints the layers as JSON and exits."""
    parser = argparse.ArgumentParser(prog="stockade-launcher")
    parser.add_argument("--fd", type=int, help="the control socket (SOCK_SEQPACKET)")
    parser.add_argument("--probe", action="store_true", help="print the layers and exit")
    parser.add_argument("--pool", type=int, default=POOL_SIZE)
    parser.add_argument(
        "--disable",
        action="append",
        default=[],
        choices=[
            PID_NAMESPACE,
            PIDS_CGROUP,
            MEMORY_CGROUP,
            CAPABILITIES,
            NETNS,
            LANDLOCK,
            MOUNT_MASK,
            SECCOMP,
        ],
        help="do not use this layer (reported inactive)",
    )
    args = parser.parse_args(argv)
    # The executor handles signals; the launcher ends when its socket closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.probe:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server = LauncherServer(a, pool_size=0, disabled=frozenset(args.disable))
        json.dump([x.to_dict() for x in server.layers], sys.stdout)
        server.close()
        return 0
    if args.fd is None:
        parser.error("--fd is required")
    control = socket.socket(fileno=args.fd)
    server = LauncherServer(control, pool_size=max(args.pool, 0), disabled=frozenset(args.disable))
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
