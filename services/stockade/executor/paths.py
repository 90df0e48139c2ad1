"""The executor's path sandbox (SPEC EXE-1 … EXE-5).

Every path a tool touches goes through :class:`PathSandbox`:

* ``check`` decides whether a path may be read (or written) and returns its canonical form.
  Paths are resolved component by component by this module (not by ``os.path.realpath``),
  so that every symlink hop is seen: a chain that leaves the roots and comes back, a loop,
  or a route through ``/proc`` or ``/dev/fd`` (magic links whose kernel meaning differs
  from their ``readlink`` text) is refused.
* ``open`` turns a checked path into a file descriptor without following any symlink
  swapped in after the check (EXE-4): ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``
  from the root's directory fd where the kernel has it, otherwise a walk from that fd with
  ``O_NOFOLLOW`` on every component.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import threading
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from mypy_extensions import mypyc_attr

from stockade.errors import PathRefused
from stockade.executor import gitconfig
from stockade.executor.globs import compile_globs, match_relative
from stockade.executor.openat2 import entry_exists, symlink_free_errno, symlink_free_links
from stockade.executor.openat2 import openat2 as _openat2
from stockade.executor.openat2 import probe as _openat2_probe

__all__ = [
    "DEFAULT_PROTECTED_WRITES",
    "PathDecision",
    "GIT_LAYOUT_MARKERS",
    "PathSandbox",
    "Root",
    "credential_read_globs",
    "dirname",
    "fold_for_match",
    "git_dir_layout",
    "is_protected_write",
    "lexists",
    "match_relative_glob",
    "matches_path_glob",
    "openat2_available",
    "protected_matcher",
]

DEFAULT_PROTECTED_WRITES: Final[tuple[str, ...]] = (
    # Git runs hooks and honours config (core.fsmonitor, core.pager, aliases) on ordinary
    # commands such as `git status`, and takes them from more places than .git/config:
    # commondir, config.worktree, modules/**, worktrees/**, a `.git` FILE (`gitdir:`
    # pointer) and nested repositories. A person's own git reads them later on the host,
    # outside any sandbox, so the whole git directory, at any depth, is protected (EXE-3
    # rev 2). `D/**` also names D itself: a `.git` file or symlink is covered.
    ".git/**",
    ".gitmodules",
    ".gitconfig",
    # git-lfs reads lfs.url / lfs.pushurl from this committed file: a person's next push
    # would send the large files to whatever server it names.
    ".lfsconfig",
    # Hooks outside .git: the hook managers' files that the installed hook (already in
    # .git/hooks or core.hooksPath) reads on the person's next commit, checkout or push
    # and runs as commands. (A hooks directory named by the repository's own config,
    # wherever it is, is protected too: gitconfig.py.)
    ".githooks/**",  # the usual `git config core.hooksPath .githooks` directory
    ".husky/**",  # husky v5+: core.hooksPath=.husky/_, which runs .husky/<hook>
    ".huskyrc",  # husky v4: hooks are commands in these (or package.json)
    ".huskyrc.*",
    "husky.config.*",
    ".pre-commit-config.yaml",  # pre-commit: `repo: local` hooks run any entry
    ".pre-commit-config.yml",
    ".pre-commit-hooks.yaml",  # a hook repository's manifest (`pre-commit try-repo .`)
    "lefthook.*",  # lefthook: yml, yaml, toml, json, jsonc; at the top or in .config/
    ".lefthook.*",
    "lefthook-local.*",
    ".lefthook-local.*",
    ".lefthook/**",  # lefthook's script directories (source_dir, source_dir_local)
    ".lefthook-local/**",
    ".overcommit.yml",  # overcommit, and its repository hooks directory
    ".git-hooks/**",
    # What git and its helpers read from the home directory (when it is a root, an agent
    # started in ~): git's XDG global config (config, attributes, gitk's Tcl), husky's
    # init.sh sourced by every husky hook, pre-commit's clones and environments that
    # every pre-commit hook runs, gpg's agent config (pinentry-program runs on a signed
    # commit), and the commands on a login PATH that shadow `git` itself.
    ".config/git/**",
    ".config/husky/**",
    ".gnupg/**",
    "~/.cache/pre-commit/**",
    "~/.local/bin/**",
    "~/bin/**",
    # Shell start-up files run on the next interactive or login shell.
    ".bashrc",
    ".bash_aliases",  # sourced by the default .bashrc of Debian and Ubuntu
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".cshrc",
    ".tcshrc",
    ".kshrc",
    ".config/fish/**",
    # direnv executes .envrc on `cd`.
    ".envrc",
    # Editors run tasks and extensions declared in these folders when a project opens.
    ".vscode/**",
    ".idea/**",
    # Persistence through SSH keys (authorized_keys, config with ProxyCommand).
    ".ssh/**",
    # npm honours script-shell / node-options from .npmrc: code on the next `npm run`.
    ".npmrc",
    # yarn runs the file named by yarn-path / yarnPath on every `yarn` call.
    ".yarnrc",
    ".yarnrc.yml",
    # ripgrep's configuration file (RIPGREP_CONFIG_PATH): `--pre CMD` runs on every search.
    ".ripgreprc",
    # Coding agents and dev containers run the commands these declare (MCP servers, hooks,
    # a dev container's initializeCommand on the host) when a person opens the project.
    ".mcp.json",
    ".claude.json",
    ".claude/**",
    ".devcontainer/**",
)
"""Write-protected paths, matched against the trailing components of the canonical path.

``*`` matches within one component, ``**`` matches any number of components; a pattern
starting with ``/`` is anchored at the file-system root, one starting with ``~/`` at the
executor's home directory (HOME), any other matches at any depth.
"""

GIT_LAYOUT_MARKERS: Final[frozenset[str]] = frozenset({"HEAD", "objects", "refs", "commondir"})
"""Entries that make a directory a git directory (git's ``is_git_directory``: HEAD, and
objects/ and refs/ or a ``commondir`` naming where they are). A directory with a HEAD and
one of the others is taken for a (bare) repository (``git_dir_layout``): git discovers it
by itself when a person's shell is in it, whatever its name. Writing one of them where
another already is, is the step that would build one, and is refused."""

_GIT_LAYOUT_ENTRIES: Final[frozenset[str]] = GIT_LAYOUT_MARKERS | frozenset(
    {"config", "config.worktree", "gitdir", "packed-refs", "hooks", "info", "worktrees", "modules"}
)
"""Entries of a git directory that carry configuration, hooks or what git reads first."""

_GLOB_META: Final = frozenset("*?[")
_MAX_SYMLINK_HOPS: Final = 40  # what Linux allows (MAXSYMLINKS) before ELOOP

# Kernel "magic links" live here: their readlink text is not what the kernel follows
# (/proc/self/root, /proc/<pid>/cwd, /proc/<pid>/fd/N, /dev/fd/N -> /proc/self/fd/N).
_MAGIC_PREFIXES: Final[tuple[str, ...]] = (
    "/proc",
    "/dev/fd",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
)
_MAGIC_EXACT: Final = frozenset(_MAGIC_PREFIXES)
_MAGIC_BELOW: Final = tuple(prefix + "/" for prefix in _MAGIC_PREFIXES)


@dataclass(frozen=True)
class Root:
    """An allowed root directory (EXE-1)."""

    path: str
    """Canonical absolute path of the root."""
    writable: bool
    """Whether tools may create or modify files below it."""


@dataclass(frozen=True)
class PathDecision:
    """The sandbox's answer for one path."""

    allowed: bool
    """Whether the access may proceed."""
    resolved: str
    """Canonical absolute path ("" if it could not be resolved)."""
    reason: str
    """Why it was refused, or ``inside <root>`` when allowed."""
    root: Root | None
    """The root that contains ``resolved`` (None when outside every root)."""
    write: bool = False
    """Whether this answers a write (else a read)."""

    # Written out (dataclass keeps an __init__ the class defines): compiled with mypyc, the
    # generated one is an interpreted function (about 15x slower), and one is made for
    # every path a command names.
    def __init__(
        self, allowed: bool, resolved: str, reason: str, root: Root | None, write: bool = False
    ) -> None:
        object.__setattr__(self, "allowed", allowed)
        object.__setattr__(self, "resolved", resolved)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "write", write)


class _Refusal(Exception):
    """Internal: resolution stopped with a reason (and the path reached so far)."""

    def __init__(self, reason: str, resolved: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.resolved = resolved


def _is_within(path: str, base: str) -> bool:
    """Containment by components: ``/srv/ws2`` is not within ``/srv/ws``."""
    if base == "/":
        return path.startswith("/")
    return path == base or path.startswith(base + "/")


def _parent(path: str) -> str:
    """``os.path.dirname`` of a normalised absolute path (no ``//``, no trailing ``/``),
    without its call layers: this runs for every path checked."""
    cut = path.rfind("/")
    return path[:cut] if cut > 0 else "/"


def dirname(path: str) -> str:
    """``os.path.dirname`` (POSIX, text), without its call layers (posixpath is not
    compiled: a call costs more than the rest of a small judge)."""
    cut = path.rfind("/") + 1
    head = path[:cut]
    if head and head != "/" * len(head):
        head = head.rstrip("/")
    return head


def _is_normal(path: str) -> bool:
    """Whether ``os.path.normpath`` returns the absolute ``path`` (free of ``..``) as it is:
    no empty component (``//``, a trailing ``/``) and no ``.`` component."""
    return "//" not in path and "/./" not in path and not path.endswith(("/", "/."))


def _is_magic(path: str) -> bool:
    """Whether ``path`` is one of the magic-link prefixes or below one (``_is_within`` for
    each prefix, in one ``startswith`` of a tuple: this runs for every path component)."""
    return path in _MAGIC_EXACT or path.startswith(_MAGIC_BELOW)


def is_protected_write(resolved: str, globs: Sequence[str]) -> str | None:
    """Return the first glob in ``globs`` that matches the absolute path ``resolved``, or None.

    Used for protected writes and for policy-denied reads alike; the syntax and the
    matcher are :mod:`stockade.executor.globs` (compiled once per set of globs, linear in
    the path). An unanchored glob matches at any component boundary.
    """
    return compile_globs(globs).match(resolved)


def fold_for_match(path: str) -> str:
    """``path`` (or a glob) spelled the way a protected name is compared: case folded,
    Unicode compatibility forms folded (NFKC: a full-width ``．`` is ``.``), invisible
    format characters (zero-width space and joiners, bidi marks: category Cf) dropped, and
    trailing dots and blanks of each component dropped (Windows and macOS file systems,
    and git's own ``.git`` checks, treat ``.GIT``, ``.git.`` and ``.git\u200c`` as
    ``.git``). Only for matching, fail-closed: ``.ENV`` may be another file on this file
    system, but a case-insensitive one (a casefold directory, a mounted share) opens
    ``.env`` by that name, and no legitimate project needs the look-alike.
    """
    if path.isascii():
        folded = path.lower()
    else:
        folded = "".join(
            ch for ch in unicodedata.normalize("NFKC", path) if unicodedata.category(ch) != "Cf"
        )
        # casefold, then NFKC again: a few folds (e.g. U+1E9E) leave non-normal text.
        folded = unicodedata.normalize("NFKC", folded.casefold())
    if " /" in folded or "./" in folded or folded.endswith((" ", ".")):
        folded = "/".join(_strip_trailing(part) for part in folded.split("/"))
    return folded


def _strip_trailing(part: str) -> str:
    stripped = part.rstrip(". ")
    # '.' and '..' (glob or path components) keep their meaning; a name of dots only too.
    return stripped if stripped else part


@functools.lru_cache(maxsize=32)
def credential_read_globs(home: str) -> tuple[str, ...]:
    """The executor's credential files (the bash analysis's list, ``~`` as ``home``):
    reading them is refused by the file tools too, even when ``home`` lies inside a root
    (an agent started in the home directory), so ``read_file .ssh/id_rsa`` is refused as
    ``cat ~/.ssh/id_rsa`` is."""
    # Imported here: the bash package imports this module.
    from stockade.executor.bash.lists import CREDENTIAL_PATHS

    home = home.rstrip("/") or "/"
    return tuple((home.rstrip("/") + p[1:]) if p.startswith("~") else p for p in CREDENTIAL_PATHS)


def _home() -> str:
    """What ``os.path.expanduser("~")`` gives (HOME first, as the bash analysis reads it)."""
    home = os.environ.get("HOME")
    return (home.rstrip("/") or "/") if home is not None else os.path.expanduser("~")


def git_dir_layout(directory: str) -> bool:
    """Whether ``directory`` holds the entries of a git directory: git takes a directory
    for one only with a HEAD (``is_git_directory``), and with objects/, refs/ or a
    ``commondir`` beside it. HEAD is looked up first: one lstat for almost every
    directory (this runs for each ancestor of every write)."""
    # os.path.join's result, without its call layers (this runs per ancestor).
    prefix = directory + "/" if directory and not directory.endswith("/") else directory
    if not lexists(prefix + "HEAD"):
        return False
    return lexists(prefix + "objects") or lexists(prefix + "refs") or lexists(prefix + "commondir")


def lexists(path: str) -> bool:
    """Whether ``path`` exists, a final symlink not followed: ``os.path.lexists`` (an lstat
    that succeeds) without building a stat result or raising an error for the common
    answer, no. faccessat2(F_OK, AT_SYMLINK_NOFOLLOW | AT_EACCESS) makes the same lookup
    with the same (effective) ids; only a security module denying getattr could tell them
    apart (it then answers yes: the entry is there, whatever its attributes)."""
    return entry_exists(path)  # executor/_openat2.c, or os.access without it (openat2.py)


def _glob_ancestors(globs: Sequence[str]) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Folded leading literal components of the globs that have two or more of them
    (``.config/fish/**`` -> ``.config``: (``.config``, ``fish``)), keyed by each proper
    prefix's last component."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for glob in globs:
        parts = [p for p in fold_for_match(glob).split("/") if p]
        if parts and parts[0] == "**":
            parts = parts[1:]
        lead: list[str] = []
        for part in parts:
            if _GLOB_META & set(part):
                break
            lead.append(part)
        if glob.startswith("/") or len(lead) < 2 or lead[0] == ".git":
            # (`.git/hooks/**` without `.git/**`: a deployment that lets commands commit
            # writes the git directory itself; `git commit` is such a write of `.git`.)
            continue
        for i in range(1, len(lead)):
            out.setdefault(lead[i - 1], []).append(tuple(lead[: i + 1]))
    return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}


def git_protected(globs: Sequence[str]) -> bool:
    """Whether a set of protected-write globs protects git directories (the default does;
    a deployment that lets commands commit drops ``.git/**`` and so these checks too)."""
    return any(g.rstrip("/") in (".git", ".git/**", "**/.git", "**/.git/**") for g in globs)


def matches_path_glob(path: str, glob: str) -> bool:
    """Whether the absolute ``path`` matches one sandbox glob (see DEFAULT_PROTECTED_WRITES)."""
    return is_protected_write(path, (glob,)) is not None


def match_relative_glob(pattern: str, rel: str) -> bool:
    """Whether the relative path ``rel`` matches the whole of ``pattern`` (``**`` spans dirs)."""
    return match_relative(pattern, rel)


_OPENAT2: bool | None = None

# Missing levels a path may have (`mkdir -p a/b/c`) and still be settled by the
# symlink-free check on its ancestors; a deeper one takes the walk.
_FAST_MISSING_LEVELS: Final = 4

_ENOENT: Final = errno.ENOENT
_EMLINK: Final = errno.EMLINK


def openat2_available() -> bool:
    """Whether this kernel lets us use openat2 (probed once)."""
    global _OPENAT2
    if _OPENAT2 is None:
        _OPENAT2 = _openat2_probe()
    return _OPENAT2


_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _FoldedGlobs:
    """A set of globs compiled once, in their own spelling and folded (:func:`fold_for_match`)."""

    __slots__ = ("_folded", "_globs", "_same")

    def __init__(self, globs: tuple[str, ...]) -> None:
        self._globs = compile_globs(globs)
        folded = tuple(dict.fromkeys(fold_for_match(g) for g in globs))
        self._folded = compile_globs(folded)
        self._same = folded == globs

    def match(self, resolved: str, lexical: str) -> str | None:
        """The glob that the path matches, as resolved or as given, in its own spelling or
        folded (``.GIT/config``, ``.env`` + ZERO WIDTH SPACE, FULLWIDTH FULL STOP + ``env``
        are judged as ``.git/config``, ``.env``, ``.env``)."""
        if not self._globs:
            return None
        glob = self._globs.match(resolved)
        if glob is None and lexical != resolved:
            glob = self._globs.match(lexical)
        if glob is not None:
            return glob
        for path in (resolved, lexical) if lexical != resolved else (resolved,):
            folded_path = fold_for_match(path)
            if folded_path != path or not self._same:
                glob = self._folded.match(folded_path)
                if glob is not None:
                    return f"{glob}, matched as {folded_path!r}"
        return None


class _LinkedSecrets:
    """Identities (st_dev, st_ino) of the files the sandbox refuses to read that have
    more than one link: another name of such a file (a hard link made before, under a
    name no glob matches) is refused too. Found on demand, only when a file with more than
    one link is read, by the run-time mask walk over the roots and by expanding the
    absolute denied and credential globs outside them (``/etc/shadow``, ``~/.ssh/**``: a
    link inside a root reads such a file past Landlock, which judges paths). Bounded: past
    it every such read is refused, fail closed. Kept ``ttl_s`` seconds (files denied since
    are seen after that). Shared by a sandbox and its ``with_cwd`` copies."""

    def __init__(
        self, roots: tuple[str, ...], globs: tuple[str, ...], outside: tuple[str, ...] = ()
    ) -> None:
        self.ttl_s = 2.0
        """How long a lookup is kept."""
        self._roots = roots
        self._globs = globs
        self._outside = outside
        self._lock = threading.Lock()
        self._when = -1.0
        self._found: dict[tuple[int, int], str] = {}
        self._problem = ""

    def holder(self, identity: tuple[int, int], path: str) -> str | None:
        """Why reading ``path`` (a file of that identity with several links) is refused,
        or None."""
        if not self._globs and not self._outside:
            return None
        with self._lock:
            now = time.monotonic()
            if self._when < 0 or now - self._when > self.ttl_s:
                self._refresh()
                self._when = now
            if self._problem:
                return f"{path} has other names (hard links) and {self._problem}"
            other = self._found.get(identity)
        if other is None or other == path:
            return None
        return f"{path} is another name (a hard link) of {other}, which reading is denied"

    def _refresh(self) -> None:
        # Imported here: the confine package imports this module.
        from stockade.executor.confine import masks

        self._found, self._problem = {}, ""
        try:
            files, dirs = masks.find_masked(self._roots, self._globs)
            for d in dirs:
                files += masks.files_under(d)
            for f in files:
                try:
                    st = os.lstat(f)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    self._found[(st.st_dev, st.st_ino)] = f
            # The denied files outside the roots with several links (the absolute globs
            # expanded, dot files too): the same scan as the worker's masks.
            for identity, f in masks.outside_files(self._outside).items():
                self._found.setdefault(identity, f)
        except OSError as exc:
            self._problem = f"the denied files could not all be found ({exc.strerror or exc})"


def protected_matcher(globs: tuple[str, ...]) -> Callable[[str], str | None]:
    """The sandbox's own matcher for ``globs`` (each path also in its folded spelling),
    for the run-time walks that must find exactly what the sandbox refuses."""
    folded = _FoldedGlobs(globs)
    return lambda path: folded.match(path, path)


# Compiled by `make native` (mypyc); tests subclass it to count or replay its checks.
@mypyc_attr(allow_interpreted_subclasses=True)
class PathSandbox:
    """Decides which paths tools may read or write, and opens them race-free."""

    def __init__(
        self,
        roots: Sequence[Root],
        cwd: str,
        *,
        protected_write_globs: Sequence[str] = DEFAULT_PROTECTED_WRITES,
        denied_read_globs: Sequence[str] = (),
    ) -> None:
        """Build a sandbox; root paths and ``cwd`` are canonicalised here.

        ``denied_read_globs`` (same syntax as the protected writes) are paths nothing may
        read, judged on both the path as given and its canonical form.
        """
        canon: dict[str, bool] = {}
        for root in roots:
            if "\0" in root.path or not root.path:
                raise ValueError(f"invalid root path {root.path!r}")
            path = os.path.realpath(os.path.abspath(root.path))
            # The same directory listed twice with different modes: the stricter wins.
            canon[path] = canon.get(path, True) and root.writable
        # Longest first, so the most specific root decides (a read-only folder nested in
        # a writable workspace stays read-only).
        self.roots: tuple[Root, ...] = tuple(
            Root(path=p, writable=w)
            for p, w in sorted(canon.items(), key=lambda kv: len(kv[0]), reverse=True)
        )
        self.cwd: str = os.path.realpath(os.path.abspath(cwd))
        # `~/x` entries name the executor's home directory (HOME): kept only when a root
        # can reach them (an agent started in ~), like the credential globs below.
        # The home as spelled and as resolved: roots are canonical, so a home reached
        # through a symlink (/home -> /data/home) must be matched by its real path too.
        home = _home()
        homes = tuple(dict.fromkeys((home, os.path.realpath(home))))
        self.protected_write_globs: tuple[str, ...] = tuple(
            dict.fromkeys(
                g
                for glob in protected_write_globs
                for g in (
                    [h.rstrip("/") + glob[1:] for h in homes] if glob.startswith("~/") else [glob]
                )
                if not g.startswith("/") or self._reachable(g)
            )
        )
        self.denied_read_globs: tuple[str, ...] = tuple(denied_read_globs)
        # Only those a root can reach are kept: the rest are outside every root, refused
        # anyway (and the common case, a workspace beside ~/.ssh, then pays nothing).
        self.credential_globs: tuple[str, ...] = tuple(
            dict.fromkeys(g for h in homes for g in credential_read_globs(h) if self._reachable(g))
        )
        """Credential files nothing may read through the file tools (beside the policy's)."""
        # Every read is judged against both sets, and every check against the folded
        # spellings too; compiled once here (a check runs for every path a command names).
        read_globs = tuple(dict.fromkeys((*self.denied_read_globs, *self.credential_globs)))
        self._read_match = _FoldedGlobs(read_globs)
        self._write_match = _FoldedGlobs(self.protected_write_globs)
        # Leading literal directories of protected globs (`.config/fish/**`: `.config`):
        # a write OF such a directory (`mv evil .config`, `cp -r x .config`, `ln -s d
        # .config`) lays out the protected path below it.
        self._glob_ancestors: dict[str, tuple[tuple[str, ...], ...]] = _glob_ancestors(
            self.protected_write_globs
        )
        # Outside the roots, the absolute ones (the executor's credentials, `/etc/shadow`,
        # a policy's `/srv/keys/**`): a hard link inside a root reads them too.
        outside = tuple(
            dict.fromkeys(
                g
                for g in (
                    *(g for h in homes for g in credential_read_globs(h)),
                    *self.denied_read_globs,
                )
                if g.startswith("/") and not g.startswith(("/proc/", "/sys/", "/dev/"))
            )
        )
        self.outside_denied_globs: tuple[str, ...] = outside
        """Absolute globs of files reading is denied outside the roots: a hard link inside
        a root to one of them is refused (and masked at run time)."""
        self._linked = _LinkedSecrets(tuple(r.path for r in self.roots), read_globs, outside)
        self._writable_paths: tuple[str, ...] = tuple(r.path for r in self.roots if r.writable)
        self.protects_git: bool = git_protected(self.protected_write_globs)
        """Whether git directories by layout (bare repositories) are protected too."""

    @classmethod
    def from_settings(
        cls,
        workspace: str | os.PathLike[str],
        library_dir: str | os.PathLike[str] | None,
        skills_dir: str | os.PathLike[str] | None,
        additional_dirs: Sequence[str],
        *,
        protected_write_globs: Sequence[str] = DEFAULT_PROTECTED_WRITES,
        denied_read_globs: Sequence[str] = (),
    ) -> PathSandbox:
        """Build the sandbox from executor settings.

        ``workspace`` is the working directory and, with ``library_dir``, a writable root;
        ``skills_dir`` is read-only (skills are instructions the agent loads: letting it
        rewrite them would let one session plant instructions for the next). Each
        additional dir is ``"PATH"`` (read-write), ``"PATH:rw"`` or ``"PATH:ro"``
        (read-only); relative paths are taken from the workspace.
        """
        ws = os.fspath(workspace)
        roots = [Root(ws, True)]
        if library_dir:
            roots.append(Root(os.path.join(ws, os.fspath(library_dir)), True))
        if skills_dir:
            roots.append(Root(os.path.join(ws, os.fspath(skills_dir)), False))
        for spec in additional_dirs:
            path, writable = spec, True
            if spec.endswith(":ro"):
                path, writable = spec[:-3], False
            elif spec.endswith(":rw"):
                path = spec[:-3]
            if not path:
                raise ValueError(f"invalid additional dir {spec!r}")
            roots.append(Root(os.path.join(ws, path), writable))
        return cls(
            roots,
            ws,
            protected_write_globs=protected_write_globs,
            denied_read_globs=denied_read_globs,
        )

    def with_cwd(self, cwd: str) -> PathSandbox:
        """This sandbox with another working directory (itself when ``cwd`` is its own), for
        a command whose relative paths resolve against its own working directory."""
        if cwd == self.cwd:
            return self
        box = PathSandbox(
            self.roots,
            cwd,
            protected_write_globs=self.protected_write_globs,
            denied_read_globs=self.denied_read_globs,
        )
        box._linked = self._linked  # same roots and globs: one lookup for both
        return box

    def _reachable(self, glob: str) -> bool:
        """Whether an absolute glob can match a path inside one of the roots: its literal
        leading directories are within a root, or a root is within them."""
        literal: list[str] = []
        for part in glob.split("/")[1:]:
            if _GLOB_META & set(part):
                break
            literal.append(part)
        prefix = "/" + "/".join(literal)
        return not glob.startswith("/") or any(
            _is_within(prefix, root.path) or _is_within(root.path, prefix) for root in self.roots
        )

    # --- queries -------------------------------------------------------------------

    def root_for(self, resolved: str) -> Root | None:
        """The most specific root containing the canonical path ``resolved``."""
        for root in self.roots:
            if _is_within(resolved, root.path):
                return root
        return None

    def inside_cwd(self, resolved: str) -> bool:
        """Whether the canonical path ``resolved`` lies inside the working directory."""
        return _is_within(resolved, self.cwd)

    def check(
        self, path: str, *, write: bool = False, known_dirs: set[str] | None = None
    ) -> PathDecision:
        """Decide whether ``path`` may be read (or written, with ``write=True``).

        ``known_dirs``: directories already found to exist without a symlink on their way,
        shared by the checks of ONE analysis (a bash command line judges several paths,
        mostly in the same directories) and extended by this one. Never keep it longer:
        the file system changes between analyses, and a symlink planted since must be
        seen.
        """
        try:
            lexical = self._lexical(path)
            # A read needs no deepest existing ancestor (only the write checks below
            # start from it): one probe fewer for a file that does not exist.
            resolved, existing, several = self._resolve_existing(
                lexical, known_dirs, need_existing=write, links=not write
            )
        except _Refusal as refusal:
            return PathDecision(False, refusal.resolved, refusal.reason, None)
        root = self.root_for(resolved)
        if root is None:
            return PathDecision(False, resolved, f"{resolved} is outside the allowed roots", None)
        if not write:
            glob = self._read_match.match(resolved, lexical)
            if glob is not None:
                return PathDecision(
                    False, resolved, f"reading {resolved} is denied by policy ({glob!r})", root
                )
            if several:
                # A regular file with more than one link: another of its names may be a
                # file reading is denied (a hard link made before, under an ordinary
                # name), as read_file's open finds; the bash analysis asks here.
                why = self._linked_holder(resolved)
                if why is not None:
                    return PathDecision(False, resolved, why, root)
        if write:
            if not root.writable:
                return PathDecision(False, resolved, f"{root.path} is read-only", root)
            # The path as given counts too: `sub/.git` may be a symlink to a directory
            # whose canonical name matches nothing, and git follows it.
            glob = self._write_match.match(resolved, lexical) or self._ancestor_match(
                resolved, lexical, root
            )
            if glob is not None:
                return PathDecision(
                    False,
                    resolved,
                    f"writes to {resolved} are refused: it matches the protected pattern "
                    f"{glob!r} (files that make other programs run code)",
                    root,
                )
            if self.protects_git:
                layout = self._git_layout(resolved, root, existing) or self._config_named(
                    resolved, lexical, existing
                )
                if layout is not None:
                    return PathDecision(False, resolved, layout, root)
        return PathDecision(True, resolved, f"inside {root.path}", root, write)

    def require(self, path: str, *, write: bool = False) -> str:
        """The canonical path of ``path``, or raise :class:`PathRefused`."""
        decision = self.check(path, write=write)
        if not decision.allowed:
            raise PathRefused(decision.reason, path=path, resolved=decision.resolved)
        return decision.resolved

    # --- opening -------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o644, *, write: bool | None = None) -> int:
        """Open ``path`` (checked like :meth:`check`) without following any symlink.

        ``write`` says which check applies; by default it follows from ``flags`` (any of
        O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND is a write).

        The canonical path has no symlinks left, so the open walks it from the root's
        directory fd refusing every symlink: one swapped in after the check makes the open
        fail (PathRefused) instead of redirecting it. Only regular files and directories
        are opened (a FIFO would block the executor). Returns a new fd (O_CLOEXEC).
        """
        if write is None:
            write = bool(flags & _WRITE_FLAGS)
        return self.open_checked(self.check(path, write=write), flags, mode, path=path)

    def open_checked(
        self, decision: PathDecision, flags: int, mode: int = 0o644, *, path: str = ""
    ) -> int:
        """:meth:`open` for a path the caller has just checked (one check, not two).

        Safe to reuse the answer: the open below walks the canonical path from the root's
        fd refusing every symlink, so nothing changed since the check can redirect it. A
        refused decision, or a read decision used to write, raises PathRefused.
        """
        path = path or decision.resolved
        if not decision.allowed or decision.root is None:
            raise PathRefused(decision.reason, path=path, resolved=decision.resolved)
        if flags & _WRITE_FLAGS and not decision.write:
            raise PathRefused(
                f"{decision.resolved} was checked for reading, not writing", path=path
            )
        rel = os.path.relpath(decision.resolved, decision.root.path)
        # O_NONBLOCK so that opening a FIFO planted in the workspace cannot hang us.
        open_flags = flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
        try:
            root_fd = os.open(decision.root.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise PathRefused(
                f"cannot open root {decision.root.path}: {exc.strerror}", path=path
            ) from exc
        try:
            if openat2_available():
                fd = _openat2(root_fd, rel, open_flags, mode)
            else:
                fd = self._walk_open(root_fd, rel, open_flags, mode)
        except OSError as exc:
            raise PathRefused(self._open_error(decision.resolved, exc), path=path) from exc
        finally:
            os.close(root_fd)
        try:
            st = os.fstat(fd)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise PathRefused(f"{decision.resolved} is not a regular file", path=path)
            if st.st_nlink > 1 and not decision.write and stat.S_ISREG(st.st_mode):
                # The path was judged, not the file: another name of a denied file reads
                # the same bytes (the identity is that of what was really opened).
                why = self._linked.holder((st.st_dev, st.st_ino), decision.resolved)
                if why is not None:
                    raise PathRefused(why, path=path, resolved=decision.resolved)
            if not flags & os.O_NONBLOCK:
                os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def makedirs(self, path: str) -> str:
        """Create ``path`` and missing parents inside a writable root, race-free.

        Each level is created with ``mkdirat`` relative to its parent's fd and re-opened
        with ``O_NOFOLLOW``, so a symlink planted mid-way cannot redirect the creation.
        Returns the canonical path.
        """
        decision = self.check(path, write=True)
        if not decision.allowed or decision.root is None:
            raise PathRefused(decision.reason, path=path, resolved=decision.resolved)
        rel = os.path.relpath(decision.resolved, decision.root.path)
        fd = os.open(decision.root.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in [] if rel == "." else rel.split("/"):
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                try:
                    nfd = os.open(
                        part,
                        os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=fd,
                    )
                except OSError as exc:
                    raise PathRefused(self._open_error(decision.resolved, exc), path=path) from exc
                os.close(fd)
                fd = nfd
        finally:
            os.close(fd)
        return decision.resolved

    # --- internals -----------------------------------------------------------------

    @staticmethod
    def _open_error(resolved: str, exc: OSError) -> str:
        if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
            return f"{resolved} changed while being opened (a symlink appeared): refused"
        return f"cannot open {resolved}: {exc.strerror or exc}"

    @staticmethod
    def _walk_open(root_fd: int, rel: str, flags: int, mode: int) -> int:
        """Fallback for kernels without openat2: O_NOFOLLOW on every component."""
        parts = [] if rel == "." else rel.split("/")
        if not parts:
            return os.open(".", flags & ~os.O_NOFOLLOW, mode, dir_fd=root_fd)
        fd = os.dup(root_fd)
        try:
            for part in parts[:-1]:
                nfd = os.open(
                    part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
                os.close(fd)
                fd = nfd
                # O_PATH|O_NOFOLLOW would hand us the symlink itself: insist on a directory.
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    raise OSError(errno.ELOOP, "symlink in path", part)
            return os.open(parts[-1], flags, mode, dir_fd=fd)
        finally:
            os.close(fd)

    def _lexical(self, path: str) -> str:
        """EXE-2: the syntactic checks, then an absolute, normalised path."""
        if not isinstance(path, str) or not path:
            raise _Refusal("empty path")
        if "\0" in path:
            raise _Refusal("path contains a NUL byte")
        if not path.isascii():  # ASCII always encodes (no copy made to find out)
            try:
                path.encode("utf-8")
            except UnicodeEncodeError:
                # Lone surrogates cannot reach the kernel as text; refuse rather than guess.
                raise _Refusal("path is not valid UTF-8 text") from None
        if path.startswith("~"):
            raise _Refusal("paths starting with '~' are refused (home directory expansion)")
        if ".." in path and ".." in path.split("/"):
            raise _Refusal("paths with a '..' component are refused")
        absolute = path if path.startswith("/") else os.path.join(self.cwd, path)
        if _is_normal(absolute):
            normalised = absolute  # what normpath would return (most paths: no copy made)
        else:
            # normpath keeps a leading '//' (POSIX allows it to mean something else):
            # collapse.
            normalised = os.path.normpath(absolute)
            if normalised.startswith("//"):
                normalised = "/" + normalised.lstrip("/")
        if _is_magic(normalised):
            raise _Refusal(f"{normalised} goes through /proc or /dev/fd (magic links)")
        return normalised

    def _resolve(self, absolute: str) -> str:
        """EXE-3: the canonical form of ``absolute`` (see :meth:`_resolve_existing`)."""
        return self._resolve_existing(absolute)[0]

    def _linked_holder(self, resolved: str) -> str | None:
        """Why reading the file ``resolved`` (several links) is refused, or None."""
        try:
            st = os.lstat(resolved)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
            return None
        return self._linked.holder((st.st_dev, st.st_ino), resolved)

    def _resolve_existing(
        self,
        absolute: str,
        known_dirs: set[str] | None = None,
        *,
        need_existing: bool = True,
        links: bool = False,
    ) -> tuple[str, str, bool]:
        """EXE-3: canonicalise, following symlinks one hop at a time.

        Returns the canonical path (for a path that does not exist yet: the canonical
        deepest existing ancestor plus the remaining components), that deepest existing
        ancestor (the path itself when it exists), and whether the path is a regular file
        with more than one link (with ``links``, for reads: the symlink-free check's fstat
        says so; a write does not pay for it). Raises _Refusal
        for loops, routes through magic links, unreadable directories, and symlinks that
        lead out of the roots after the walk had entered one (a chain out and back in is
        refused too: the outside hop can be changed by whoever controls it).

        Most paths have no symlink at all: one openat2 that refuses every symlink settles
        that (the path, already normalised, is then canonical: what the walk below would
        return after an lstat per component; its chain checks only act on symlinks). A
        path that does not exist yet (ENOENT: a component is missing, and no symlink was
        met on the way, which is ELOOP) is settled by the same check on its ancestors: the
        first that passes is the deepest existing one, and the component after it is the
        missing one. Anything else, including any other error, takes the walk. Nothing is
        kept between calls: a symlink planted since the last check is seen.

        ``known_dirs`` (see :meth:`check`): when the parent is one of them, an lstat of
        the last component alone settles the path (one system call, no descriptor), as
        the walk would after that parent; the directories found here are added to it.

        ``need_existing=False`` (a read): a path the check finds missing (ENOENT) is
        canonical already (no symlink on the way to the missing component, none can lie
        beyond it), so its ancestors are not probed for the deepest existing one, which
        is then returned as ``""`` (unknown).
        """
        if openat2_available():
            parent = _parent(absolute)
            if known_dirs is not None and parent in known_dirs and parent != absolute:
                try:
                    st = os.lstat(absolute)
                except FileNotFoundError:
                    return absolute, parent, False
                except OSError:
                    pass  # the checks below, then the walk, say what it is
                else:
                    if not stat.S_ISLNK(st.st_mode):
                        if stat.S_ISDIR(st.st_mode):
                            known_dirs.add(absolute)
                        several = stat.S_ISREG(st.st_mode) and st.st_nlink > 1
                        return absolute, absolute, several
            error = symlink_free_links(absolute) if links else symlink_free_errno(absolute)
            if not error or error == _EMLINK:
                if known_dirs is not None and parent != absolute:
                    known_dirs.add(parent)  # the parent of an existing path: a directory
                return absolute, absolute, error == _EMLINK
            if error == _ENOENT and not need_existing:
                return absolute, "", False
            probe = absolute
            for _ in range(_FAST_MISSING_LEVELS):
                if error != _ENOENT:
                    break
                parent = _parent(probe)
                if parent == probe:
                    break
                error = symlink_free_errno(parent)
                if not error:
                    if known_dirs is not None:
                        # ENOENT below it (not ENOTDIR): a directory.
                        known_dirs.add(parent)
                    return absolute, parent, False
                probe = parent
        stack = list(reversed(absolute.split("/")))
        current = "/"
        hops = 0
        exists = True
        several = False  # the last component met is a regular file with several links
        entered = False  # the walk reached a point inside a root
        escaped = ""  # a symlink target that left the roots after entering one
        while stack:
            part = stack.pop()
            if part in ("", "."):
                continue
            if part == "..":
                # Only symlink targets bring '..' here; `current` is canonical, so its
                # dirname is the real parent (what the kernel does).
                current = os.path.dirname(current)
                continue
            candidate = os.path.join(current, part)
            if _is_magic(candidate):
                raise _Refusal(f"{candidate} goes through /proc or /dev/fd (magic links)")
            if not exists:
                current = candidate
                continue
            try:
                st = os.lstat(candidate)
            except (FileNotFoundError, NotADirectoryError):
                exists = False
                current = candidate
                continue
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    raise _Refusal("path component too long") from exc
                raise _Refusal(f"cannot resolve {candidate}: {exc.strerror}") from exc
            if not stat.S_ISLNK(st.st_mode):
                current = candidate
                several = stat.S_ISREG(st.st_mode) and st.st_nlink > 1
                if self.root_for(current) is not None:
                    entered = True
                elif entered and not self._is_ancestor_of_root(current):
                    escaped = escaped or current
                continue
            if entered and self.root_for(candidate) is None:
                # A link outside the roots, reached after entering one: whoever controls
                # it controls where the chain goes.
                escaped = escaped or candidate
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                raise _Refusal(f"too many symlinks (a loop?) at {candidate}")
            try:
                target = os.readlink(candidate)
            except OSError as exc:
                raise _Refusal(f"cannot read symlink {candidate}: {exc.strerror}") from exc
            if target.startswith("/"):
                current = "/"
            stack.extend(reversed(target.split("/")))
        if escaped and self.root_for(current) is not None:
            raise _Refusal(f"a symlink chain leaves the allowed roots (through {escaped})", current)
        # The walk claims no missing levels: after a missing component, a symlink's `..`
        # can bring it back to directories that exist (`missing/../x`).
        return current, current, several and exists

    @staticmethod
    def _git_layout(resolved: str, root: Root, existing: str | None = None) -> str | None:
        """Why a write to ``resolved`` would change or make a git directory, or None.

        ``existing``: the deepest ancestor of ``resolved`` that exists (from the
        resolution); the directories below it do not exist, so they hold no HEAD and are
        not looked up (one lstat fewer per missing level of a file about to be written).

        Refused: anything inside a directory laid out as a git directory (a bare
        repository under any name, including ``resolved`` itself), and one of the layout
        entries (HEAD, objects, refs, commondir, config ...) in a directory that already
        holds one of HEAD, objects, refs, commondir: the step that would complete a
        layout, in whatever order the entries are made.
        """
        here = resolved if existing is None else existing
        while _is_within(here, root.path):
            if git_dir_layout(here):
                return (
                    f"writes to {resolved} are refused: {here} is laid out as a git "
                    "directory (a bare repository git would read config and hooks from)"
                )
            if here == root.path:
                break
            here = _parent(here)
        name = os.path.basename(resolved)
        if name in _GIT_LAYOUT_ENTRIES:
            parent = os.path.dirname(resolved)
            for marker in GIT_LAYOUT_MARKERS - {name}:
                if os.path.lexists(os.path.join(parent, marker)):
                    return (
                        f"writes to {resolved} are refused: {parent} already holds "
                        f"{marker!r}, and {name!r} would help lay it out as a git directory"
                    )
        return None

    def _ancestor_match(self, resolved: str, lexical: str, root: Root) -> str | None:
        """The protected glob that lies below the directory ``resolved`` names (the write
        would put a tree there: ``.config`` for ``.config/fish/**``), or None. A root
        itself never counts (``cp x .`` writes inside it)."""
        if not self._glob_ancestors or resolved == root.path:
            return None
        for path in (resolved, lexical) if lexical != resolved else (resolved,):
            folded = fold_for_match(path)
            for lead in self._glob_ancestors.get(folded.rsplit("/", 1)[-1], ()):
                if folded.endswith("/" + "/".join(lead[:-1])):
                    return f"{'/'.join(lead)}/…, below the directory written"
        return None

    def config_named(self, *places: str) -> tuple[str, ...]:
        """What the git configuration of the repositories git finds from ``places`` (and
        from the working directory) makes code or configuration outside the git directory:
        the hooks directory (``core.hooksPath``), included files, programs its commands
        name (:mod:`stockade.executor.gitconfig`), and so does the configuration of every
        repository in the writable roots (a ``core.hooksPath`` may name a directory
        anywhere), the system and global one. Absolute paths, each with everything under
        it."""
        return gitconfig.named_for((*places, self.cwd), _home(), self._writable_paths)

    def _config_named(self, resolved: str, lexical: str, existing: str) -> str | None:
        """Why a write to ``resolved`` would change what a person's git runs (a hook in
        ``core.hooksPath``, an included config file, a program a command names), or None."""
        start = existing if existing != resolved else os.path.dirname(resolved)
        names = self.config_named(start)
        problem = gitconfig.walk_problem(self._writable_paths)  # of the walk just made
        if problem:
            return f"writes to {resolved} are refused: {problem}"
        if not names:
            return None
        paths = {resolved, lexical, fold_for_match(resolved), fold_for_match(lexical)}
        # A directory above a named path, below the roots, the working directory and the
        # repository's top (`mv evil tools` lays out `tools/hooks`; `ln -s elsewhere
        # tools` sends git there; `cp x .` writes inside the top).
        above = not (
            self._is_ancestor_of_root(resolved)
            or _is_within(self.cwd, resolved)
            or os.path.lexists(os.path.join(resolved, ".git"))
        )
        for named in names:
            for candidate in (named, fold_for_match(named)):
                if any(_is_within(path, candidate) for path in paths):
                    return (
                        f"writes to {resolved} are refused: git's configuration names "
                        f"{named} (a hooks directory, an included config file, or a program "
                        "a git command runs), so a person's git on the host would run it"
                    )
                if above and any(_is_within(candidate, path) for path in paths):
                    return (
                        f"writes to {resolved} are refused: it holds {named}, which git's "
                        "configuration names (a hooks directory, an included config file, "
                        "or a program a git command runs)"
                    )
        return None

    def _is_ancestor_of_root(self, path: str) -> bool:
        return any(_is_within(root.path, path) for root in self.roots)
