"""Stockade's own files inside the roots (EXE-9 rev 2, reach): state, keys, policy.

Every service keeps its state in ``STATE_DIR`` (default ``.stockade/state`` of its working
directory) and the executor's workspace defaults to that same working directory, so
``stockade serve all`` started in a project put the decision service's grant-signing key,
its session database (modes, rules, approvals), the audit log and the executor's state
inside the writable root: ``cat .stockade/state/grant_signing_key.pem`` was ALLOWED and a
command could rewrite the decision database. Key, token and policy files named by
``STOCKADE_*_FILE`` settings can lie in a root too.

:func:`own_paths` names them; the executor refuses reads and writes of the state
directories and of secret files, refuses writes of the other files it is configured with
(a project policy file an agent could widen), and hides the state directories in every
command's mount namespace like its socket directories.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# Settings whose file is a secret (a key, a token, a password, a DSN with one).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "DSN", "COOKIE", "LOGIN", "CREDENTIAL")
_DEFAULT_DIRS = (".stockade/state", ".stockade/spool")
_GLOB_CHARS = frozenset("*?[]{}\\")


@dataclass(frozen=True)
class OwnPaths:
    """Stockade's own paths, absolute and canonical (spelled ones too)."""

    state_dirs: tuple[str, ...]
    """Directories of state (databases, spools, generated keys): no read, no write, hidden."""
    secret_files: tuple[str, ...]
    """Key, token and password files the settings name: no read, no write."""
    files: tuple[str, ...]
    """Other files the settings name (policy files, scripts): no write."""

    def denied_read_globs(self) -> tuple[str, ...]:
        """Globs for the sandbox's denied reads: the state directories and secret files
        that exist now (one that does not exist holds nothing to read, and a denied path
        under a tree makes every recursive read of it a question)."""
        dirs = [d for d in self.state_dirs if os.path.isdir(d)]
        secrets = [f for f in self.secret_files if os.path.lexists(f)]
        return (*dirs, *(f"{d}/**" for d in dirs), *secrets)

    def protected_write_globs(self) -> tuple[str, ...]:
        """Globs for the sandbox's protected writes (existing or not: a planted database
        or key would be used by the next start)."""
        return (
            *self.state_dirs,
            *(f"{d}/**" for d in self.state_dirs),
            *self.secret_files,
            *self.files,
        )


def _spellings(path: str, cwd: str) -> list[str]:
    absolute = os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))
    return list(dict.fromkeys((absolute, os.path.realpath(absolute))))


def own_paths(
    state_dir: str | os.PathLike[str] | None = None,
    *,
    roots: tuple[str, ...] = (),
    environ: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> OwnPaths:
    """Stockade's own paths for an executor with ``state_dir`` whose processes share
    ``environ`` and ``cwd`` (``serve all``, one pod's containers). A directory that is, or
    holds, one of ``roots`` is left out (refusing it would refuse the whole root: a
    configuration to fix, not to guess around), and so is a path with glob characters
    or outside every root (out of reach already)."""
    environ = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    # The defaults of a Stockade started here, or in any root (its working directory is
    # its default workspace).
    dirs: list[str] = [*_DEFAULT_DIRS]
    dirs += [os.path.join(r, d) for r in roots for d in _DEFAULT_DIRS]
    if state_dir:
        dirs.append(os.fspath(state_dir))
    secret: list[str] = []
    files: list[str] = []
    for key, value in environ.items():
        if not key.startswith("STOCKADE_") or not value:
            continue
        if key.endswith(("_STATE_DIR", "_SPOOL_DIR")):
            dirs.append(value)
        elif key.endswith(("_FILE", "_FILES")):
            items = [v.strip() for v in value.split(",") if v.strip()]
            (secret if any(w in key for w in _SECRET_WORDS) else files).extend(items)
    real_roots = [os.path.realpath(r) for r in roots]

    def usable(path: str) -> bool:
        # Only what a root can reach: Landlock and the sandbox keep the rest out already.
        inside = any(path == r or path.startswith(r.rstrip("/") + "/") for r in real_roots)
        return inside and not (_GLOB_CHARS & set(path)) and path != "/"

    def holds_a_root(path: str) -> bool:
        return any(r == path or r.startswith(path.rstrip("/") + "/") for r in real_roots)

    state = [
        p
        for d in dirs
        for p in _spellings(d, cwd)
        if usable(p) and not holds_a_root(os.path.realpath(p))
    ]
    secret_files = [p for f in secret for p in _spellings(f, cwd) if usable(p)]
    other = [p for f in files for p in _spellings(f, cwd) if usable(p)]
    return OwnPaths(
        tuple(dict.fromkeys(state)),
        tuple(dict.fromkeys(secret_files)),
        tuple(p for p in dict.fromkeys(other) if p not in secret_files),
    )
