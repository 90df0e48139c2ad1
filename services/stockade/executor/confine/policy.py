"""Value objects of the confinement API: layers, limits, the per-call policy, outcomes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Layer names, in the order they are reported.
PROCESS_GROUP = "process_group"
PID_NAMESPACE = "pid_namespace"
RLIMITS = "rlimits"
PIDS_CGROUP = "pids_cgroup"
MEMORY_CGROUP = "memory_cgroup"
NO_NEW_PRIVS = "no_new_privs"
SECCOMP = "seccomp"
CAPABILITIES = "capabilities"
NETNS = "netns"
LANDLOCK = "landlock"
MOUNT_MASK = "mount_mask"
GIT_NEUTRALISED = "git_neutralised"

LAYER_NAMES: tuple[str, ...] = (
    PROCESS_GROUP,
    PID_NAMESPACE,
    RLIMITS,
    PIDS_CGROUP,
    MEMORY_CGROUP,
    NO_NEW_PRIVS,
    SECCOMP,
    CAPABILITIES,
    NETNS,
    LANDLOCK,
    MOUNT_MASK,
    GIT_NEUTRALISED,
)


@dataclass(frozen=True)
class Layer:
    """One confinement layer and whether it is in force."""

    name: str
    """One of ``LAYER_NAMES``."""
    active: bool
    """True only when the layer was really applied (or, for probing, can be)."""
    detail: str
    """What it does here, or why it is inactive."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layer:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data["name"]), bool(data["active"]), str(data["detail"]))


@dataclass(frozen=True)
class Rlimits:
    """Resource limits of one command and everything it starts."""

    nproc: int = 256
    """Processes (and threads) the command may have at once: stops fork bombs."""
    cpu_s: int = 120
    """CPU seconds (SIGXCPU at this soft limit, SIGKILL one second later)."""
    as_bytes: int = 4 * 1024**3
    """Address space per process."""
    fsize_bytes: int = 10 * 1024**2
    """Largest file a process may write (SIGXFSZ / EFBIG beyond)."""
    nofile: int = 1024
    """Open file descriptors per process."""
    memory_bytes: int = 2 * 1024**3
    """Memory of the whole command (every process it starts), by the memory cgroup."""

    def __post_init__(self) -> None:
        for name in ("nproc", "cpu_s", "as_bytes", "fsize_bytes", "nofile", "memory_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"rlimit {name} must be positive")


@dataclass(frozen=True)
class ConfinementPolicy:
    """What one command may touch."""

    readable_roots: tuple[str, ...]
    """Directories the command may read (and execute from), besides the system dirs."""
    writable_roots: tuple[str, ...]
    """Directories the command may create, change and delete files in."""
    network_enabled: bool = False
    """False: the command runs in a network namespace without interfaces."""
    masked_globs: tuple[str, ...] = ()
    """Paths inside the roots that read as empty files (e.g. ``**/.env``)."""
    read_only_globs: tuple[str, ...] = ()
    """Paths kept read-only inside the writable roots (persistence: ``.git/hooks/**``,
    ``.git/config``, ``.bashrc`` ...). Checked where they matter, at each writable root
    and at the working directory and its parents: globs without wildcards only."""
    rlimits: Rlimits = field(default_factory=Rlimits)
    """Resource limits."""
    protect_git: bool = False
    """Keep every git directory, ``.git`` file and bare layout in the writable roots
    read-only, and remove the ones the command creates (EXE-3 rev 2)."""
    masked_dirs: tuple[str, ...] = ()
    """Directories hidden (an empty read-only tmpfs) from the command: where Stockade's
    own unix sockets live, so a command cannot call the services that judge it."""
    masked_credentials: tuple[str, ...] = ()
    """The credential files of the bash analysis's list (``~/.ssh/**``, ``~/.aws/**`` …,
    ``~`` the executor's home) that a root can reach (``PathSandbox.credential_globs``):
    masked like ``masked_globs`` when the home directory lies inside a root."""
    linked_outside: tuple[str, ...] = ()
    """Absolute globs of files denied for reading outside the roots (the credential list
    with the executor's home, ``/etc/shadow``, a policy's ``/srv/keys/**``): Landlock
    keeps them unreadable by path, but a hard link inside a root reads the same file, so
    every such other name in the roots is masked."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the launcher protocol)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfinementPolicy:
        """Inverse of :meth:`to_dict`."""
        return cls(
            readable_roots=tuple(data["readable_roots"]),
            writable_roots=tuple(data["writable_roots"]),
            network_enabled=bool(data["network_enabled"]),
            masked_globs=tuple(data["masked_globs"]),
            read_only_globs=tuple(data.get("read_only_globs", ())),
            rlimits=Rlimits(**data["rlimits"]),
            protect_git=bool(data.get("protect_git", False)),
            masked_dirs=tuple(data.get("masked_dirs", ())),
            masked_credentials=tuple(data.get("masked_credentials", ())),
            linked_outside=tuple(data.get("linked_outside", ())),
        )


@dataclass(frozen=True)
class RunOutcome:
    """How one confined command ended."""

    exit_code: int
    """The command's exit status; 128+N when killed by signal N."""
    timed_out: bool
    """Killed because the time limit passed."""
    cancelled: bool
    """Killed because the caller cancelled."""
    stdout: str
    """Everything it wrote to stdout (up to the launcher client's capture cap)."""
    stderr: str
    """Everything it wrote to stderr (same cap)."""
    elapsed_s: float
    """Wall time from request to exit."""
    layers: tuple[Layer, ...]
    """The layers applied to this very command."""
    output_dropped: bool = False
    """True when output beyond the capture cap was discarded."""
