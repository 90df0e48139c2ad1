"""The pre-forked worker: one per command, forked by the launcher ahead of need.

A worker is prepared before any request arrives (own session, pid namespace, private
mount namespace with a fresh /proc, the fixed part of its Landlock ruleset), so the
costly fork is off the command's critical path. The executor then talks to it directly:
it sends the request with three pipe ends attached (stdout, stderr, status). The worker
applies the per-command layers to itself in an order that lets each still be set
(mounts need capabilities, Landlock forbids mounts, so: network namespace -> masks ->
limits -> no_new_privs -> Landlock -> drop capabilities), spawns ``/bin/bash -c CMD``
(vfork-based ``posix_spawn``: it inherits every layer) and stays as pid 1 of the
namespace (or as a child subreaper), reaping orphans. When bash ends, the worker kills
whatever the command left behind, then writes one line to the status pipe: the layers
applied and the exit code. The command never holds the status pipe, so it cannot forge
either.

Any failure is written to the status pipe and nothing runs: a layer the launcher
promised is never silently skipped.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
from dataclasses import dataclass
from typing import Any, NoReturn

from stockade.executor.confine import kernel, landlock, limits, masks, protect
from stockade.executor.confine.env import command_env
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
    ConfinementPolicy,
    Layer,
)
from stockade.executor.paths import DEFAULT_PROTECTED_WRITES

BASH = "/bin/bash"
SETUP_FAILED = 126

# Read-only system directories needed to run programs; /etc minus masked files.
SYSTEM_READ_DIRS: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
)
# Devices a shell script expects; the rest of /dev (disks, /dev/mem, ttys) is out.
DEVICES_RW: tuple[str, ...] = ("/dev/null", "/dev/zero", "/dev/full")
DEVICES_RO: tuple[str, ...] = ("/dev/random", "/dev/urandom")
# Resolver files some distributions keep outside /etc (only when the network is on).
NETWORK_READ_DIRS: tuple[str, ...] = ("/run/systemd/resolve",)
# Signals Python (and the launcher) ignore; the command must get the defaults back,
# or `yes | head` would print EPIPE errors instead of ending quietly.
RESET_SIGNALS: tuple[int, ...] = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGQUIT)


@dataclass(frozen=True)
class Plan:
    """What the launcher found it can do on this host (decided once, at start)."""

    pid_namespace: bool
    """Fork workers as pid 1 of their own pid namespace."""
    mount_namespace: bool
    """Give each worker a private mount namespace (needed for masking)."""
    netns: bool
    """The launcher lives in an empty network namespace."""
    orig_net_fd: int
    """fd of the host network namespace (for network-enabled commands), or -1."""
    landlock_abi: int
    """Landlock ABI (0: unavailable)."""
    drop_caps: bool
    """The launcher holds CAP_SETPCAP, so workers can drop every capability."""
    cgroup: bool
    """Workers are placed in a pids cgroup."""
    empty_file: str
    """The empty read-only file bind-mounted over masked files."""
    inactive: tuple[tuple[str, str], ...] = ()
    """(layer, why) for every layer the launcher found unavailable or was told not to use."""
    ipc_namespace: bool = False
    """Give each worker a private IPC namespace too (with the mount namespace)."""
    seccomp: bool = False
    """Install the keyring seccomp filter before the command (kernel.deny_keyring_syscalls)."""

    def why(self, layer: str) -> str:
        """Why ``layer`` is inactive on this host."""
        return dict(self.inactive).get(layer, "unavailable")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Slot:
    """Per-worker resources the launcher made before forking it."""

    tmp_dir: str
    """The command's private, writable tmp dir (removed by the launcher afterwards)."""
    cgroup: str
    """The worker's pids cgroup ("" when there is none)."""
    cgroup_max: int = 0
    """The ``pids.max`` the launcher already wrote there."""
    memory_cgroup: str = ""
    """The worker's memory cgroup ("" when there is none; the pids one on cgroup v2)."""
    memory_max: int = 0
    """The memory limit the launcher already wrote there."""
    git_state_fd: int = -1
    """A file (in the launcher's private dir) where the worker leaves the git directories
    it found before the command; emptied once it has removed what the command created.
    If the worker is killed first (time limit, cancel), the launcher finishes the job."""


@dataclass
class Prepared:
    """What the worker readied before the request."""

    problems: list[str]
    """Preparation failures; reported (and nothing run) when the request comes."""
    rulesets: dict[bool, landlock.Ruleset]
    """Landlock rulesets with the system rules, keyed by ``deny_tcp``."""
    devnull: int
    """/dev/null opened for reading: the command's stdin."""


def prepare(plan: Plan, keep_fds: tuple[int, ...]) -> Prepared:
    """Prefork part, run right after fork."""
    # A garbage collection would touch every object and copy the launcher's pages
    # (copy-on-write) on the command's critical path; a worker lives for one command.
    gc.disable()
    problems: list[str] = []
    kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
    # Orphans of the command come to us (as they would to pid 1 of a pid namespace),
    # so we can find and kill them even without one.
    kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
    os.setsid()
    _close_other_fds(keep_fds)
    if plan.mount_namespace:
        try:
            kernel.unshare(kernel.CLONE_NEWNS)
            # Masks must not propagate back to the host's mount namespace.
            kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_SLAVE, None)
        except OSError as exc:
            problems.append(f"mount namespace: {exc}")
        else:
            if plan.ipc_namespace:
                try:
                    # The host's System V IPC objects and POSIX message queues of the
                    # command's uid (Landlock does not govern them) stay out of reach.
                    kernel.unshare(kernel.CLONE_NEWIPC)
                except OSError as exc:
                    problems.append(f"ipc namespace: {exc}")
            try:
                masks.apply_masks(masks.find_sockets(), (), plan.empty_file)
            except OSError as exc:
                problems.append(f"masking host unix sockets: {exc}")
            try:
                masks.apply_masks(*masks.find_sensitive(), plan.empty_file)
            except OSError as exc:
                problems.append(f"masking secret system files: {exc}")
            if plan.pid_namespace:
                try:
                    # A /proc of our own pid namespace: other processes are invisible.
                    kernel.mount(
                        "proc",
                        "/proc",
                        "proc",
                        kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC,
                        None,
                    )
                except OSError as exc:
                    problems.append(f"private /proc: {exc}")
    if plan.drop_caps:
        try:
            kernel.drop_bounding_set()
        except OSError as exc:
            problems.append(f"capability bounding set: {exc}")
    rulesets: dict[bool, landlock.Ruleset] = {}
    if plan.landlock_abi > 0:
        try:
            for deny_tcp in (False, True):
                ruleset = landlock.Ruleset(abi=plan.landlock_abi, deny_tcp=deny_tcp)
                for rule in _system_rules(network=not deny_tcp):
                    ruleset.add(rule)
                rulesets[deny_tcp] = ruleset
        except OSError as exc:
            problems.append(f"landlock ruleset: {exc}")
    warm_up()
    devnull = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    return Prepared(problems, rulesets, devnull)


def warm_up() -> None:
    """Run the request path's pure parts once, without effect.

    A worker is a copy-on-write copy of the launcher: the first time it touches an
    object (even to count a reference), runs a function (3.11 specialises bytecode in
    place) or looks up a C function, the kernel copies that page. Doing it here, before
    the request, takes those copies off the command's critical path; the launcher also
    calls this before forking, so the specialised code is shared.
    """
    sample = ConfinementPolicy(readable_roots=("/",), writable_roots=("/",))
    policy = ConfinementPolicy.from_dict(json.loads(json.dumps(sample.to_dict())))
    layers = [Layer(PROCESS_GROUP, True, f"{policy.rlimits.nproc}") for _ in range(3)]
    json.dumps({"layers": [[x.name, x.active, x.detail] for x in layers]})
    command_env(cwd="/", tmp_dir="/")
    masks.find_masked((), ())
    # The default protected list's matchers, compiled once here (cached): each command's
    # survey would otherwise compile them again (about 1 ms).
    protect.Names.compile(DEFAULT_PROTECTED_WRITES)
    masks.nested_read_only(policy.readable_roots, policy.writable_roots)
    limits.nproc_enforced()
    kernel.warm_up()
    landlock.warm_up()


def _close_other_fds(keep: tuple[int, ...]) -> None:
    keep_sorted = sorted(k for k in keep if k > 2)
    low = 3
    for fd in keep_sorted:
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 65536)


def serve(sock: socket.socket, plan: Plan, slot: Slot, prepared: Prepared) -> NoReturn:
    """Wait for the one request, confine, run, report. Never returns."""
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
    except OSError:
        os._exit(SETUP_FAILED)
    if not msg:
        os._exit(0)  # the pool is being closed
    for fd in fds:
        os.set_inheritable(fd, False)
    if len(fds) != 3:
        os._exit(SETUP_FAILED)
    status = fds[2]
    try:
        request = json.loads(msg)
        if prepared.problems:
            raise OSError(0, "; ".join(prepared.problems))
        layers, argv, env, policy, guard = _confine(request, fds, plan, slot, prepared)
        if guard is not None and slot.git_state_fd >= 0:
            _save_state(slot.git_state_fd, guard.snapshot)
        devnull = prepared.devnull
        pid = os.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, devnull, 0),
                (os.POSIX_SPAWN_DUP2, fds[0], 1),
                (os.POSIX_SPAWN_DUP2, fds[1], 2),
            ],
            setsigdef=RESET_SIGNALS,
            setsigmask=(),
        )
        # A copy of stderr (not inherited: os.dup is close-on-exec) for a note after the
        # command, such as git directories or rc files it created and that were removed.
        note_fd = os.dup(fds[1]) if guard is not None else -1
        for fd in (devnull, fds[0], fds[1]):
            os.close(fd)
    except BaseException as exc:
        try:
            _report(status, {"error": f"{type(exc).__name__}: {exc}"})
        finally:
            os._exit(SETUP_FAILED)
    code = _wait_for(pid)
    # Whatever the command left running dies before its end is reported: when the
    # executor sees the exit code, nothing of the command is left.
    _kill_leftovers(plan.pid_namespace)
    if guard is not None:
        layers = _clean_up(layers, guard, note_fd)
        if slot.git_state_fd >= 0:
            os.ftruncate(slot.git_state_fd, 0)  # done: nothing for the launcher to do
    # One report at the end (one wake-up of the executor): layers and exit code.
    _report(status, {"layers": [[x.name, x.active, x.detail] for x in layers], "code": code})
    os._exit(0)


@dataclass(frozen=True)
class Guard:
    """The run-time protection of git directories and protected files for one command."""

    snapshot: protect.Snapshot
    """What was there before the command."""
    skip: frozenset[protect.Identity]
    """Identities of our own mounts (masks), seen after the command in place of what they
    cover: never taken for something the command created."""


def _save_state(fd: int, snapshot: protect.Snapshot) -> None:
    """Leave the pre-run snapshot where the launcher finds it if we are killed."""
    data = json.dumps(snapshot.to_dict()).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _clean_up(layers: list[Layer], guard: Guard, note_fd: int) -> list[Layer]:
    """Git directories, ``.git`` files, bare layouts and protected files (rc files,
    ``.envrc``, ``.vscode/`` …) the command made (through a program the analysis could not
    see into) are removed before a person's programs on the host read them; the layers
    and the command's stderr say what went."""
    git_note = protected_note = ""
    removed = protect.Removed([], [])
    try:
        removed = protect.clean_up(guard.snapshot, skip=guard.skip)
    except OSError as exc:
        problem = f"; could not check for protected paths the command created: {exc}"
        git_note = protected_note = problem
        if note_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(note_fd, f"stockade: WARNING{problem[1:]}\n".encode())
    if removed.git:
        git_note = (
            f"; removed {len(removed.git)} git control path(s) the command created: "
            + ", ".join(removed.git[:5])
        )
    if removed.protected:
        protected_note = (
            f"; removed {len(removed.protected)} protected path(s) the command created: "
            + ", ".join(removed.protected[:5])
        )
    if removed.quarantined:
        protected_note += (
            f"; set aside {len(removed.quarantined)} protected file(s) the command changed: "
            + ", ".join(removed.quarantined[:5])
        )
    if removed.failed:
        problem = "; could NOT remove: " + ", ".join(removed.failed[:5])
        git_note += problem
        protected_note += problem
    if note_fd >= 0:
        for note, paths in (
            ("WARNING: could not remove protected paths this command created", removed.failed),
            (
                "removed git repository data this command created (git directories are "
                "protected; a person's git would read their config and hooks)",
                removed.git,
            ),
            (
                "removed protected files this command created (they make other programs "
                "run code: shell rc files, .envrc, editor tasks, .npmrc ...)",
                removed.protected,
            ),
            (
                "set aside protected files this command changed (renamed so that nothing "
                "runs them; their owner can check them)",
                removed.quarantined,
            ),
        ):
            if paths:
                with contextlib.suppress(OSError):
                    os.write(note_fd, f"stockade: {note}: {', '.join(paths[:20])}\n".encode())
        os.close(note_fd)
    notes = {GIT_NEUTRALISED: git_note if guard.snapshot.git else "", MOUNT_MASK: protected_note}
    return [Layer(x.name, x.active, x.detail + notes.get(x.name, "")) for x in layers]


def _kill_leftovers(pid_namespace: bool) -> None:
    """Kill and reap every remaining descendant (we are pid 1 or a child subreaper)."""
    for _ in range(100_000):
        if pid_namespace:
            # As pid 1 of the namespace, kill(-1) reaches exactly the command's processes.
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            children = own_children()
            for child in children:
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not children:
                # No /proc/<pid>/task/<tid>/children here: do not wait for what we
                # cannot kill; the launcher kills the group and cgroup after we exit.
                try:
                    while os.waitpid(-1, os.WNOHANG)[0]:
                        pass
                except ChildProcessError:
                    pass
                return
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def own_children() -> list[int]:
    """Pids of this process's children (empty where the kernel does not list them)."""
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _wait_for(pid: int) -> int:
    """Reap children (we may be pid 1 of the namespace) until ``pid`` ends; its code."""
    while True:
        try:
            done, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            return SETUP_FAILED
        except InterruptedError:
            continue
        if done == pid:
            if os.WIFSIGNALED(wait_status):
                return 128 + os.WTERMSIG(wait_status)
            return os.WEXITSTATUS(wait_status)


def _report(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, json.dumps(message).encode() + b"\n")


def _confine(
    request: dict[str, Any], fds: list[int], plan: Plan, slot: Slot, prepared: Prepared
) -> tuple[list[Layer], list[str], dict[str, str], ConfinementPolicy, Guard | None]:
    policy = ConfinementPolicy.from_dict(request["policy"])
    cwd: str = request["cwd"]
    layers: list[Layer] = [
        Layer(PROCESS_GROUP, True, "own session and process group; killed as a group"),
        Layer(
            PID_NAMESPACE,
            plan.pid_namespace,
            "pid 1 is the worker: every descendant dies with it, even after setsid"
            if plan.pid_namespace
            else plan.why(PID_NAMESPACE)
            + "; the worker (a child subreaper) kills what the command leaves behind",
        ),
    ]

    # 1. Network: the launcher's namespace has no interfaces; opt back in if allowed.
    if policy.network_enabled:
        if plan.netns:
            kernel.setns(plan.orig_net_fd, kernel.CLONE_NEWNET)
        layers.append(Layer(NETNS, False, "network enabled by policy"))
    elif plan.netns:
        layers.append(Layer(NETNS, True, "own network namespace: only loopback, and it is down"))
    else:
        layers.append(Layer(NETNS, False, plan.why(NETNS)))
    if plan.orig_net_fd >= 0:
        os.close(plan.orig_net_fd)

    # 2. Masks (needs the private mount namespace and capabilities, before Landlock).
    roots = tuple(dict.fromkeys(policy.readable_roots + policy.writable_roots))
    found: protect.Survey | None = None
    snapshot: protect.Snapshot | None = None
    if policy.protect_git or policy.read_only_globs:
        # Before any mask: the snapshot must see what a person on the host sees (a
        # repository or an rc file inside a masked folder is still theirs, never
        # "created" by the command when the launcher compares after a kill). One walk of
        # the writable roots finds git directories and protected files at any depth.
        names = protect.Names.compile(policy.read_only_globs) if policy.read_only_globs else None
        found = protect.survey(policy.writable_roots, names, git=policy.protect_git)
        snapshot = protect.Snapshot.of(
            found, policy.writable_roots, policy.read_only_globs, git=policy.protect_git
        )
    skip: set[protect.Identity] = set()
    if plan.mount_namespace:
        # The credential files of the analysis's list, when the home directory is inside
        # a root (an agent started in ~): a few lstat calls, not a walk of the home.
        cred_files, cred_dirs, cred_globs = masks.find_credentials(policy.masked_credentials, roots)
        files, dirs = masks.find_masked(roots, (*policy.masked_globs, *cred_globs))
        files = list(dict.fromkeys((*files, *cred_files)))
        dirs = list(dict.fromkeys((*dirs, *cred_dirs)))
        # A mask covers a path, not an inode: other names (hard links made before) of a
        # masked file, or of a file in a masked directory, are masked too.
        # So are the names in the roots of denied files outside them (`ln ~/.ssh/id_rsa
        # notes.txt` made before: Landlock judges the path, the link reads the file).
        outside = masks.outside_files(policy.linked_outside) if policy.linked_outside else {}
        links = masks.linked_names(roots, [*files, *outside.values()], dirs)
        count = masks.apply_masks([*files, *links], dirs, plan.empty_file)
        # Landlock grants are a union: a read-only root inside a writable one would be
        # writable. A read-only bind mount keeps it read-only.
        nested = masks.nested_read_only(policy.readable_roots, policy.writable_roots)
        masks.bind_read_only(nested)
        protected: list[str] = []
        git_binds: list[str] = []
        if found is not None:
            # What a mask now hides is out of the command's reach already.
            def unmasked(paths: list[str]) -> list[str]:
                return [p for p in paths if not any(masks.within(p, d) for d in dirs)]

            # Files that make other programs run code later (rc files, .envrc, editor
            # tasks; at any depth, with every other name of their inode) stay read-only
            # even for commands the user approved.
            protected = unmasked(protect.bind_targets(found, policy.writable_roots))
            masks.bind_read_only(protected)
            # Every git directory, `.git` file and bare layout in the writable roots is
            # read-only (EXE-3 rev 2): a person's git on the host reads them later.
            if policy.protect_git:
                git_binds = unmasked(protect.git_bind_targets(found.git, policy.writable_roots))
                masks.bind_read_only(git_binds)
        # Stockade's own unix sockets: a command must not call the services judging it.
        hidden = masks.hide_dirs(policy.masked_dirs, (*policy.writable_roots, cwd), plan.empty_file)
        if snapshot is not None:
            # Our own mounts show their source's identity afterwards (the empty file, a
            # tmpfs): the clean-up must not take them for something the command made.
            for path in (plan.empty_file, *dirs, *policy.masked_dirs):
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    skip.add((st.st_dev, st.st_ino))
        layers.append(
            Layer(
                MOUNT_MASK,
                True,
                f"{count} policy-denied path(s) masked (of which {len(cred_files) + len(cred_dirs)}"
                f" credential path(s) and {len(links)} hard link(s) of masked files),"
                f" {len(nested)} nested read-only"
                f" root(s), {len(protected)} protected path(s) and {len(git_binds)} git"
                f" director(ies) read-only, {hidden} Stockade socket mask(s), in a private"
                " mount namespace"
                + (
                    " and a private IPC namespace"
                    if plan.ipc_namespace
                    else "; the host's IPC namespace is shared"
                )
                + ("; protected paths the command creates are removed" if snapshot else ""),
            )
        )
    else:
        # No mount namespace: existing git dirs and protected files stay writable (the
        # analysis's refusal holds alone), but what the command creates is still
        # removed afterwards.
        layers.append(
            Layer(
                MOUNT_MASK,
                False,
                plan.why(MOUNT_MASK)
                + ("; protected paths the command creates are still removed" if snapshot else ""),
            )
        )
    guard = Guard(snapshot, frozenset(skip)) if snapshot is not None else None

    # 3. Limits.
    r = policy.rlimits
    if slot.cgroup:
        if r.nproc != slot.cgroup_max:
            limits.set_max(slot.cgroup, r.nproc)
        layers.append(Layer(PIDS_CGROUP, True, f"pids.max={r.nproc}"))
    else:
        layers.append(Layer(PIDS_CGROUP, False, plan.why(PIDS_CGROUP)))
    if slot.memory_cgroup:
        if r.memory_bytes != slot.memory_max:
            limits.set_memory(slot.memory_cgroup, r.memory_bytes)
        layers.append(
            Layer(
                MEMORY_CGROUP,
                True,
                f"memory limit {r.memory_bytes // (1024 * 1024)} MiB for the whole command",
            )
        )
    else:
        layers.append(Layer(MEMORY_CGROUP, False, plan.why(MEMORY_CGROUP)))
    os.chdir(cwd)
    limits.apply_rlimits(r)
    nproc_note = (
        f"nproc={r.nproc}"
        if limits.nproc_enforced()
        else f"nproc={r.nproc} (not enforced by the kernel for uid 0: see pids_cgroup)"
    )
    layers.append(
        Layer(
            RLIMITS,
            True,
            f"{nproc_note}, cpu={r.cpu_s}s, as={r.as_bytes}B, fsize={r.fsize_bytes}B,"
            f" nofile={r.nofile}",
        )
    )

    # 4. no_new_privs, then Landlock (which requires it without CAP_SYS_ADMIN).
    kernel.set_no_new_privs()
    layers.append(Layer(NO_NEW_PRIVS, True, "exec cannot gain privileges (setuid, file caps)"))
    if plan.seccomp:
        # The kernel keyrings of the uid are reached without a path (keyctl): refused.
        kernel.deny_keyring_syscalls()
        layers.append(Layer(SECCOMP, True, "keyctl, add_key, request_key refused"))
    else:
        layers.append(Layer(SECCOMP, False, plan.why(SECCOMP)))
    ruleset = prepared.rulesets.get(not policy.network_enabled)
    if ruleset is not None:
        everything = landlock.fs_rights(plan.landlock_abi)
        for path in policy.readable_roots:
            ruleset.add(landlock.PathRule(path, landlock.READ_RIGHTS))
        for path in policy.writable_roots:
            ruleset.add(landlock.PathRule(path, everything))
        ruleset.add(landlock.PathRule(slot.tmp_dir, everything))
        ruleset.restrict_self()
        layers.append(
            Layer(
                LANDLOCK,
                True,
                f"ABI {plan.landlock_abi}: writes only under {len(policy.writable_roots)}"
                f" writable root(s) and a private tmp; reads under {len(roots)} root(s) and"
                " system dirs"
                + ("; TCP bind/connect denied" if not policy.network_enabled else ""),
            )
        )
    else:
        layers.append(Layer(LANDLOCK, False, plan.why(LANDLOCK)))
    for other in prepared.rulesets.values():
        other.close()

    # The worker stays alive as pid 1 next to the command: not dumpable, so the command
    # cannot read its memory, environment or descriptors through /proc/1.
    kernel.prctl(kernel.PR_SET_DUMPABLE, 0)

    # 5. Capabilities last: the steps above needed them.
    if plan.drop_caps:
        kernel.drop_all_capabilities()
        layers.append(Layer(CAPABILITIES, True, "all capabilities dropped, securebits locked"))
    else:
        layers.append(Layer(CAPABILITIES, False, plan.why(CAPABILITIES)))

    layers.append(Layer(GIT_NEUTRALISED, True, "git ignores system/global config and hooks"))
    argv = [BASH, "--noprofile", "--norc", "-c", str(request["command"])]
    return layers, argv, command_env(cwd=cwd, tmp_dir=slot.tmp_dir), policy, guard


def _system_rules(*, network: bool) -> list[landlock.PathRule]:
    rules = [landlock.PathRule(p, landlock.READ_RIGHTS) for p in SYSTEM_READ_DIRS]
    if network:
        rules += [landlock.PathRule(p, landlock.READ_RIGHTS) for p in NETWORK_READ_DIRS]
    rules += [
        landlock.PathRule(
            p, landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE | landlock.IOCTL_DEV
        )
        for p in DEVICES_RW
    ]
    rules += [landlock.PathRule(p, landlock.READ_FILE) for p in DEVICES_RO]
    return rules
