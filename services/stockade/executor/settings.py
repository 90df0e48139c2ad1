"""Executor settings (``STOCKADE_EXECUTOR_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from stockade.executor.globs import validate_globs
from stockade.server.settings import ServerSettings, split_csv, stockade_socket_dirs


class ExecutorSettings(ServerSettings):
    """Settings of the executor service."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="STOCKADE_EXECUTOR_")

    listen: str = "127.0.0.1:50052"
    workspace: Path = Path(".")
    """The working directory: a read-write root; relative paths resolve against it."""
    library_dir: Path | None = None
    """A read-write root for the agent's library; large outputs go to its tool-results/."""
    skills_dir: Path | None = None
    """A read-only root holding skills."""
    additional_dirs: Annotated[list[str], NoDecode] = []
    """More roots, comma-separated: ``PATH`` (read-write) or ``PATH:ro`` (read-only)."""
    network_enabled: bool = False
    """Let commands use the network (otherwise network commands are refused)."""
    default_timeout_s: float = 60.0
    """Time limit of a call that names none."""
    max_timeout_s: float = 120.0
    """The largest time limit a call may ask for."""
    max_output_chars: int = 4000
    """Output the model sees; the rest is cut (head and tail kept) and persisted."""
    max_file_write_bytes: int = 10 * 1024 * 1024
    """Largest file file_write may write and the file-size rlimit for commands."""
    denied_read_globs: Annotated[list[str], NoDecode] = []
    """More paths nothing may read, comma-separated globs (masked for bash too), e.g.
    ``**/.env``. They add to the policy file's read denials, never replace them (DEC-16)."""
    policy_file: Path | None = None
    """The decision service's policy file (the same file, mounted read-only): its DENY/ASK
    rules on reads (``read_file(...)``, ``*(...)``) bind every executor tool and the
    run-time masks (DEC-16). Reloaded when it changes; a bad file keeps the last good one."""
    project_policy_file: Path | None = None
    """The project policy file, if the decision service has one (its read rules add)."""
    policy_poll_s: float = Field(2.0, gt=0)
    """How often the policy file(s) are checked for changes, in seconds."""
    grant_public_key_file: Path | None = None
    """Ed25519 public key that verifies the decision service's grants (PEM)."""
    grant_public_key_files: Annotated[list[Path], NoDecode] = []
    """More accepted grant public keys, comma-separated PEM files (a key rotation: the new
    key is listed before the decision service signs with it, the old one removed after its
    last grant expired). Grants are verified by the key their ``kid`` names."""
    grant_key_poll_s: float = Field(2.0, gt=0)
    """How often the grant public key files are re-read, in seconds: a file that now holds
    another key puts it in force and drops the one it held (a rotation needs no restart;
    a Kubernetes Secret volume updates its files in place). A file that becomes unreadable,
    empty or invalid keeps its last good key, and the executor says so (log, GetCapabilities)."""
    state_dsn: str = Field(default="", repr=False)
    """Where spent grants and session reads are recorded (STORE-3, EXE-11): empty for an
    SQLite file in ``state_dir`` (one node; survives restarts), ``sqlite:///path`` for
    another file, ``postgresql://…`` for many replicas (the role needs only EXECUTE on the
    ``stockade_executor`` functions). Not shown in repr: it may hold a password."""
    store_wait_s: float = Field(10.0, gt=0, le=300)
    """How long a call waits for the state store (a lock held by another executor on the
    SQLite file, a PostgreSQL connection or answer) before it is refused, UNAVAILABLE:
    the grant stays unspent, the edit is not made."""
    execute_identities: Annotated[list[str], NoDecode] = ["agent"]
    """Certificate identities allowed to call Execute and Cancel when mTLS is on."""
    allow_ungranted: bool = False
    """Run Execute without grants when no public key is configured (local development
    only). Otherwise an executor without a key refuses every Execute (fail closed)."""
    protected_write_globs: Annotated[list[str] | None, NoDecode] = None
    """Paths the file tools never write even inside a writable root, comma-separated globs;
    unset: ``stockade.executor.paths.DEFAULT_PROTECTED_WRITES`` (git hooks and config, shell
    rc files, editor task folders, .ssh, .envrc, .npmrc). Set to empty to protect nothing."""

    memory_limit_mb: int = Field(default=2048, ge=16, le=1024 * 1024)
    """Memory of one command and everything it starts (a memory cgroup per command, EXE-9
    rev 2); past it the kernel's OOM killer ends the command."""
    socket_dirs_extra: Annotated[list[str], NoDecode] = []
    """More directories to hide from every command, comma-separated (absolute paths): where
    other Stockade services keep unix sockets that this executor's settings do not name."""

    _split_lists = field_validator(
        "additional_dirs",
        "grant_public_key_files",
        "denied_read_globs",
        "protected_write_globs",
        "socket_dirs_extra",
        mode="before",
    )(classmethod(lambda cls, v: split_csv(v)))

    def grant_key_files(self) -> list[Path]:
        """Every configured grant public key file, ``grant_public_key_file`` first."""
        first = [self.grant_public_key_file] if self.grant_public_key_file else []
        return list(dict.fromkeys([*first, *self.grant_public_key_files]))

    def socket_dirs(self) -> list[str]:
        """Directories of Stockade's own unix sockets, hidden in every command's mount
        namespace (EXE-9 rev 2): this service's listener, the listeners and addresses the
        other services' settings name (read from the same environment), and the extras."""
        return stockade_socket_dirs(self, self.socket_dirs_extra)

    @field_validator("socket_dirs_extra")
    @classmethod
    def _absolute(cls, value: list[str]) -> list[str]:
        for item in value:
            if not item.startswith("/"):
                raise ValueError(f"{item!r} is not an absolute path")
        return value

    @field_validator("denied_read_globs", "protected_write_globs")
    @classmethod
    def _valid_globs(cls, value: list[str] | None) -> list[str] | None:
        # A glob that can match nothing (``secret[z-a]``) would silently protect nothing:
        # refuse it here, naming it, rather than find out from a leaked file.
        return None if value is None else validate_globs(value)

    @field_validator("default_timeout_s", "max_timeout_s")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be positive")
        return value
