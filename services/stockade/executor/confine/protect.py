"""Protected paths at run time (EXE-3): files that make other programs run code later.

The path sandbox and the bash analysis refuse writes to the protected list
(:data:`stockade.executor.paths.DEFAULT_PROTECTED_WRITES`, or the deployment's own: shell
rc files, ``.envrc``, ``.vscode/``, ``.npmrc`` …) at any depth. A program the analysis
cannot see into (an approved ``python3 x.py``, a build script, ``touch .bashrc; ln
.bashrc b2; echo … >> b2``) can still write them, and a person opening the workspace on
the host would then run the payload: direnv runs the ``.envrc`` of every directory it
enters, VS Code the ``.vscode/tasks.json`` of whatever folder is opened, npm reads the
``.npmrc`` of the nearest package root of a monorepo. So, for each command:

* **before** it runs, one walk of the writable roots (the one that also finds git
  directories, :func:`survey`) notes every protected entry, at any depth, by identity
  (``st_dev``, ``st_ino``: a renamed entry is still the same one), with everything
  beneath a protected directory;
* the ones that exist are bound read-only in the command's mount namespace
  (:func:`bind_targets`), with every other name of a protected file's inode (a hard link
  made before the command writes the same file; :func:`masks.other_names`);
* **after** it ends (by the worker, or by the launcher when the worker was killed), the
  same walk finds the protected entries whose identity was not there before, and removes
  them (:func:`remove_created`): files, symlinks (never followed) and whole directories,
  through directory fds opened without following any symlink, so a command that swaps a
  parent directory for a symlink cannot lead the removal out of the root. The removal
  also runs inside the command's Landlock domain (writes only under the writable roots).

The bound on the walk is the mask walk's (``masks.MAX_ENTRIES`` before the command: past
it the command is refused). After the command a larger bound applies
(:data:`MAX_ENTRIES_AFTER`): past it the clean-up says it could not check, in the result
and on the command's stderr.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from stockade.executor.confine import masks
from stockade.executor.paths import fold_for_match, git_dir_layout, protected_matcher

# A workspace with more protected entries than this (each needs a bind mount) is refused
# rather than run with some of them writable.
MAX_BINDS = 1_000
# What the command created is looked for in a tree this large at most (it may have made
# many entries; the walk before it is bounded by masks.MAX_ENTRIES).
MAX_ENTRIES_AFTER = 5_000_000

_GLOB_META = frozenset("*?[")
# O_PATH: a handle for the *at calls that needs no access right (Landlock grants the
# command's domain no reading of "/" or of the roots' parents) and opens nothing.
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Identity = tuple[int, int]
Stamp = tuple[int, int, int]


def layout(names: set[str]) -> bool:
    """Whether a directory listing holds a git directory's layout: git takes a directory
    for one only with a HEAD, and objects/, refs/ or a commondir beside it (the same
    test as the path sandbox's ``git_dir_layout``)."""
    return "HEAD" in names and not names.isdisjoint(("objects", "refs", "commondir"))


@dataclass(frozen=True)
class GitControl:
    """A place a person's git would read configuration or hooks from (EXE-3 rev 2)."""

    path: str
    """The ``.git`` entry (dir, file or symlink) or the directory laid out as a git dir."""
    identity: Identity
    """(st_dev, st_ino) of the entry itself: a renamed entry is still the same one."""
    named: bool
    """True for an entry named ``.git``; False for a bare layout under another name."""


@dataclass(frozen=True)
class Entry:
    """A protected entry found by the walk."""

    path: str
    """Absolute path, as walked (below a canonical root)."""
    identity: Identity
    """(st_dev, st_ino) of the entry itself (a symlink's own, never its target's)."""
    mode: int
    """``st_mode`` of the entry itself."""
    nlink: int
    """``st_nlink``: above 1, another name writes the same file."""
    ctime: int = 0
    """``st_ctime_ns``: any write, chmod, link or rename of the entry moves it, and no
    program can set it back (a changed file is told apart from an untouched one)."""

    def stamp(self) -> Stamp:
        """(dev, ino, ctime) of a file or symlink; directories are followed by their
        entries, not their own ctime (which every new entry inside moves)."""
        return (*self.identity, self.ctime)


@dataclass(frozen=True)
class Names:
    """The protected list, ready for the walk: a cheap test on each entry's name first,
    then the sandbox's own matcher (same globs, same folded spellings) on the path."""

    match: Callable[[str], str | None]
    """The sandbox's folded matcher (``.BASHRC`` is ``.bashrc``)."""
    names: frozenset[str] | None
    """Folded literal components of the globs: an entry whose folded name is not one of
    them cannot match (None: some glob has a wildcard component; test every path)."""
    globs: tuple[str, ...]
    """The globs."""

    @classmethod
    def compile(cls, globs: Sequence[str]) -> Names:
        """Compile ``globs`` (the path sandbox's protected-write list)."""
        literal: set[str] = set()
        generic = False
        for glob in globs:
            for part in glob.split("/"):
                if not part or part == "**":
                    continue
                if _GLOB_META & set(part):
                    generic = True
                literal.add(fold_for_match(part))
        return cls(
            protected_matcher(tuple(globs)), None if generic else frozenset(literal), tuple(globs)
        )

    def protected(self, name: str, path: str) -> bool:
        """Whether the entry ``name`` at ``path`` is on the list."""
        if self.names is not None:
            # fold_for_match's own ASCII case, inline: this runs for every entry walked.
            plain = name.isascii() and not name.endswith((".", " "))
            if (name.lower() if plain else fold_for_match(name)) not in self.names:
                return False
        return self.match(path) is not None


@dataclass
class Survey:
    """One walk of the writable roots: git control entries and protected entries."""

    git: list[GitControl] = field(default_factory=list)
    """``.git`` entries and bare-repository layouts (git directories are not walked)."""
    protected: list[Entry] = field(default_factory=list)
    """Protected entries not inside another protected directory."""
    inside: list[Entry] = field(default_factory=list)
    """Entries beneath a protected directory (protected as part of it)."""

    def known(self) -> set[Identity]:
        """Identities of every protected entry and of everything beneath one."""
        return {e.identity for e in self.protected} | {e.identity for e in self.inside}

    def stamps(self) -> set[Stamp]:
        """Stamps of every protected file and symlink (and of those beneath a protected
        directory)."""
        return {e.stamp() for e in (*self.protected, *self.inside) if not stat.S_ISDIR(e.mode)}


def survey(
    roots: Iterable[str],
    names: Names | None,
    *,
    git: bool,
    limit: int = masks.MAX_ENTRIES,
    skip: frozenset[Identity] = frozenset(),
    modes: _Modes | None = None,
) -> Survey:
    """Walk ``roots`` (never following symlinks) for git control entries (with ``git``)
    and protected entries (with ``names``). Git directories are not descended into (they
    are protected whole by the git mechanism). Entries whose identity is in ``skip`` (our
    own mask mounts) are passed over. With ``modes`` (the walk after a command, which
    runs without capabilities), a directory the command made unreadable is opened up to
    be listed. Raises OSError past ``limit`` entries."""
    found = Survey()
    seen = 0
    pending: list[tuple[str, bool]] = [
        (r, False) for r in sorted({os.path.realpath(r) for r in roots})
    ]
    visited: set[str] = set()
    while pending:
        top, beneath = pending.pop()
        if top in visited:
            continue
        visited.add(top)
        try:
            scan = _scan(top, modes)
        except OSError:
            continue
        with scan:
            # One lstat of HEAD per directory (git's own test, as the sandbox's), so the
            # listing streams: a directory of millions of entries is never held whole.
            if git and not beneath and git_dir_layout(top):
                st = os.lstat(top)
                found.git.append(GitControl(top, (st.st_dev, st.st_ino), False))
                continue
            try:
                for entry in scan:
                    seen += 1
                    if seen > limit:
                        raise _TooMany(limit)
                    _visit(entry, beneath, found, names, git=git, skip=skip, pending=pending)
            except _TooMany:
                raise OSError(
                    0, f"more than {limit} entries under the writable roots to scan"
                ) from None
            except OSError:
                continue
    return found


class _TooMany(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(limit)


def _visit(
    entry: os.DirEntry[str],
    beneath: bool,
    found: Survey,
    names: Names | None,
    *,
    git: bool,
    skip: frozenset[Identity],
    pending: list[tuple[str, bool]],
) -> None:
    try:
        if git and entry.name == ".git" and not beneath:
            st = entry.stat(follow_symlinks=False)
            found.git.append(GitControl(entry.path, (st.st_dev, st.st_ino), True))
            return
        hit = beneath or (names is not None and names.protected(entry.name, entry.path))
        if hit:
            st = entry.stat(follow_symlinks=False)
            identity = (st.st_dev, st.st_ino)
            if identity in skip:
                return
            item = Entry(entry.path, identity, st.st_mode, st.st_nlink, st.st_ctime_ns)
            (found.inside if beneath else found.protected).append(item)
            if stat.S_ISDIR(st.st_mode):
                pending.append((entry.path, True))
        elif entry.is_dir(follow_symlinks=False):
            pending.append((entry.path, False))
    except OSError:
        return


def _scan(top: str, modes: _Modes | None) -> os._ScandirIterator[str]:
    """``os.scandir(top)``; with ``modes``, after opening up a directory the command made
    unreadable."""
    try:
        return os.scandir(top)
    except PermissionError:
        if modes is None:
            raise
    fd = open_dir_nofollow(top)
    try:
        if not modes.open_up(fd):
            raise PermissionError(13, "cannot list", top)
    finally:
        os.close(fd)
    return os.scandir(top)


def bind_targets(found: Survey, writable: Sequence[str]) -> list[str]:
    """What to bind read-only so the existing protected entries cannot change: each
    entry (a directory whole), a symlink's target when it lies in a writable root (a
    bind mount cannot sit on a symlink), and every other name of a protected file with
    more than one link. Raises OSError past :data:`MAX_BINDS` (fail closed)."""
    roots = [os.path.realpath(w) for w in writable]
    targets: list[str] = []
    linked: dict[Identity, str] = {}
    for item in found.protected:
        path = item.path
        if stat.S_ISLNK(item.mode):
            path = os.path.realpath(path)
            if not any(masks.within(path, r) for r in roots) or not os.path.exists(path):
                continue  # outside the writable roots Landlock already refuses writes
        elif stat.S_ISREG(item.mode) and item.nlink > 1:
            linked[item.identity] = item.path
        targets.append(path)
    for item in found.inside:
        if stat.S_ISREG(item.mode) and item.nlink > 1:
            linked[item.identity] = item.path
    targets += masks.other_names(roots, linked)
    targets = list(dict.fromkeys(targets))
    if len(targets) > MAX_BINDS:
        raise OSError(
            0, f"more than {MAX_BINDS} protected paths in the writable roots to keep read-only"
        )
    return targets


def changed(before: Snapshot, after: Survey) -> list[Entry]:
    """Protected files and symlinks of ``after`` that were there before (same identity)
    but changed since (another ctime): possible only where they could not be bound
    read-only (no mount namespace), or edited on the host meanwhile."""
    return [
        e
        for e in (*after.protected, *after.inside)
        if not stat.S_ISDIR(e.mode)
        and e.identity in before.known
        and e.stamp() not in before.stamps
    ]


def created(before: set[Identity], after: Survey) -> list[Entry]:
    """Protected entries of ``after`` whose identity was not there before; one inside a
    new protected directory goes with it (not listed on its own)."""
    new = [e for e in after.protected if e.identity not in before]
    gone_dirs = [e.path for e in new if stat.S_ISDIR(e.mode)]
    for item in after.inside:
        if item.identity in before or any(masks.within(item.path, d) for d in gone_dirs):
            continue
        new.append(item)
        if stat.S_ISDIR(item.mode):
            gone_dirs.append(item.path)
    return new


@dataclass(frozen=True)
class Snapshot:
    """What a command's clean-up compares with: the identities seen before it ran."""

    roots: tuple[str, ...]
    """The writable roots walked."""
    globs: tuple[str, ...]
    """The protected list."""
    git: bool
    """Whether git directories are protected (and new ones removed)."""
    git_known: frozenset[Identity]
    """Identities of the git control entries before the command."""
    known: frozenset[Identity]
    """Identities of the protected entries (and all beneath them) before the command."""
    stamps: frozenset[Stamp] = frozenset()
    """Stamps of the protected files and symlinks before the command (see Entry.ctime)."""

    @classmethod
    def of(
        cls, found: Survey, roots: Sequence[str], globs: Sequence[str], *, git: bool
    ) -> Snapshot:
        """The snapshot of a survey made before the command."""
        return cls(
            tuple(roots),
            tuple(globs),
            git,
            frozenset(g.identity for g in found.git),
            frozenset(found.known()),
            frozenset(found.stamps()),
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (the launcher keeps it in case the worker is killed)."""
        return {
            "roots": list(self.roots),
            "globs": list(self.globs),
            "git": self.git,
            "git_known": [list(i) for i in self.git_known],
            "known": [list(i) for i in self.known],
            "stamps": [list(i) for i in self.stamps],
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Snapshot:
        """Inverse of :meth:`to_dict`; ValueError / TypeError / KeyError on a bad one."""

        def ids(value: object) -> frozenset[Identity]:
            if not isinstance(value, list):
                raise ValueError("identities are a list")
            out: set[Identity] = set()
            for item in value:
                if not isinstance(item, list) or len(item) != 2:
                    raise ValueError("an identity is [dev, ino]")
                out.add((int(item[0]), int(item[1])))
            return frozenset(out)

        stamps = data.get("stamps", [])
        if not isinstance(stamps, list) or not all(
            isinstance(x, list) and len(x) == 3 for x in stamps
        ):
            raise ValueError("a stamp is [dev, ino, ctime]")
        roots, globs = data["roots"], data["globs"]
        if not isinstance(roots, list) or not isinstance(globs, list):
            raise ValueError("roots and globs are lists")
        return cls(
            tuple(str(r) for r in roots),
            tuple(str(g) for g in globs),
            bool(data["git"]),
            ids(data["git_known"]),
            ids(data["known"]),
            frozenset((int(x[0]), int(x[1]), int(x[2])) for x in stamps),
        )


@dataclass(frozen=True)
class Removed:
    """What a clean-up removed."""

    git: list[str]
    """Git control paths (a whole ``.git``, or a layout's HEAD / commondir)."""
    protected: list[str]
    """Other protected paths (files, symlinks, whole directories)."""
    failed: list[str] = field(default_factory=list)
    """What could not be removed (with the error): reported, never silent."""
    quarantined: list[str] = field(default_factory=list)
    """Existing protected files the command changed (where they could not be kept
    read-only): renamed to ``QUARANTINE_PREFIX…-<name>`` beside themselves, so nothing
    reads them and their owner can look at them."""


def clean_up(
    before: Snapshot,
    *,
    skip: frozenset[Identity] = frozenset(),
) -> Removed:
    """Remove what the command created that a person's programs would run (call after
    it ended): new git control entries (a ``.git`` whole; a layout loses HEAD and
    commondir, what makes git take it for a repository) and new protected entries.
    ``skip``: identities of our own mounts (masks), seen in place of what they cover.
    Raises OSError when the walk passes :data:`MAX_ENTRIES_AFTER`."""
    modes = _Modes()
    try:
        return _clean_up(before, skip, modes)
    finally:
        modes.restore()


def _clean_up(before: Snapshot, skip: frozenset[Identity], modes: _Modes) -> Removed:
    names = Names.compile(before.globs) if before.globs else None
    after = survey(
        before.roots, names, git=before.git, limit=MAX_ENTRIES_AFTER, skip=skip, modes=modes
    )
    real_roots = sorted({os.path.realpath(r) for r in before.roots}, key=len, reverse=True)

    def root_of(path: str) -> str | None:
        return next((r for r in real_roots if masks.within(path, r) and path != r), None)

    git_removed: list[str] = []
    failed: list[str] = []

    def remove(root: str, rel: str, identity: Identity | None, keep: frozenset[Identity]) -> bool:
        try:
            return remove_beneath(root, rel, identity, keep, modes)
        except OSError as exc:
            failed.append(f"{os.path.join(root, rel)} ({exc.strerror or exc})")
            return False

    for item in after.git:
        if item.identity in before.git_known or item.identity in skip:
            continue
        root = root_of(item.path)
        if root is None:
            continue
        rel = os.path.relpath(item.path, root)
        if item.named:
            if remove(root, rel, item.identity, before.git_known):
                git_removed.append(item.path)
            continue
        for name in ("HEAD", "commondir"):
            if remove(root, os.path.join(rel, name), None, before.git_known):
                git_removed.append(os.path.join(item.path, name))
    quarantined: list[str] = []
    for entry in changed(before, after):
        root = root_of(entry.path)
        if root is None:
            continue
        try:
            moved = quarantine_beneath(
                root, os.path.relpath(entry.path, root), entry.stamp(), modes
            )
        except OSError as exc:
            failed.append(f"{entry.path} ({exc.strerror or exc})")
            continue
        if moved:
            quarantined.append(f"{entry.path} -> {moved}")
    removed: list[str] = []
    for entry in created(set(before.known), after):
        root = root_of(entry.path)
        if root is None:
            continue
        if remove(root, os.path.relpath(entry.path, root), entry.identity, before.known):
            removed.append(entry.path)
    return Removed(git_removed, removed, failed, quarantined)


def git_bind_targets(found: Sequence[GitControl], writable: Sequence[str]) -> list[str]:
    """What to bind read-only: each git entry, a symlink's target when it lies in a
    writable root (a bind mount cannot sit on a symlink; the target is what git reads)."""
    roots = [os.path.realpath(w) for w in writable]
    targets: list[str] = []
    for item in found:
        path = item.path
        if os.path.islink(path):
            path = os.path.realpath(path)
            if not any(masks.within(path, r) for r in roots) or not os.path.exists(path):
                continue  # outside the writable roots Landlock already refuses writes
        targets.append(path)
    return list(dict.fromkeys(targets))


# A new protected directory is first renamed to a name nothing reads, then removed: if
# the removal fails part-way (a tree too deep), what is left is harmless and reported.
QUARANTINE_PREFIX = ".stockade-removed-"
# Deeper trees than this are not removed (left renamed, reported): fds stay bounded.
MAX_REMOVE_DEPTH = 256


def _proc_fd(fd: int) -> str:
    # chmod through the fd's magic link: it acts on that very inode (an O_PATH fd, opened
    # without following symlinks, cannot be fchmod-ed directly).
    return f"/proc/self/fd/{fd}"


class _Modes:
    """Directories the clean-up opened up (u+rwx) to remove what a command hid in them
    (a command may `chmod 000` a directory it made, and the clean-up runs without
    capabilities); each gets its mode back at the end."""

    def __init__(self) -> None:
        self.changed: list[tuple[int, int]] = []

    def open_up(self, fd: int) -> bool:
        """Make the directory behind ``fd`` (kept open until :meth:`restore`) rwx for its
        owner; False when it already was, is not a directory, or cannot be changed."""
        if len(self.changed) >= MAX_BINDS:
            return False
        try:
            st = os.fstat(fd)
            mode = stat.S_IMODE(st.st_mode)
            if not stat.S_ISDIR(st.st_mode) or mode & 0o700 == 0o700:
                return False
            os.chmod(_proc_fd(fd), mode | 0o700)
        except OSError:
            return False
        self.changed.append((os.dup(fd), mode))
        return True

    def restore(self) -> None:
        """Give every opened-up directory its mode back."""
        for fd, mode in reversed(self.changed):
            try:
                os.chmod(_proc_fd(fd), mode)
            except OSError:
                pass
            finally:
                os.close(fd)
        self.changed.clear()


def remove_beneath(
    root: str,
    rel: str,
    identity: Identity | None,
    keep: frozenset[Identity],
    modes: _Modes | None = None,
) -> bool:
    """Remove ``root``/``rel`` without following any symlink on the way: each directory
    is opened from its parent's fd with O_NOFOLLOW (O_PATH), the entry is checked to
    still be the one the walk found (``identity``, when given; never one of ``keep``),
    then unlinked, or (a directory) renamed out of the way and removed whole by the same
    fd-relative steps. A directory on the way or the parent that the command made
    unsearchable or read-only is opened up for the removal (and its mode given back by
    ``modes.restore()``). Returns whether it was removed (False: gone, or replaced
    since); raises OSError when it could not be (a symlink or a non-directory on the way,
    a permission, a tree deeper than MAX_REMOVE_DEPTH: then it is left renamed)."""
    parts = [p for p in rel.split("/") if p]
    if not parts or ".." in parts:
        return False
    own = modes is None
    modes = modes or _Modes()
    fd = open_dir_nofollow(root)
    try:
        for part in parts[:-1]:
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except PermissionError:
                if not modes.open_up(fd):
                    raise
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return False  # gone already
        except PermissionError:
            if not modes.open_up(fd):
                raise
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        found = (st.st_dev, st.st_ino)
        if (identity is not None and found != identity) or found in keep:
            return False  # not what the walk found: replaced since (never follow it)
        if not stat.S_ISDIR(st.st_mode):
            _retry(modes, fd, lambda: os.unlink(name, dir_fd=fd))
            return True
        hidden = QUARANTINE_PREFIX + os.urandom(6).hex()
        _retry(modes, fd, lambda: os.rename(name, hidden, src_dir_fd=fd, dst_dir_fd=fd))
        _remove_tree(fd, hidden, modes, 0)
        return True
    finally:
        os.close(fd)
        if own:
            modes.restore()


def quarantine_beneath(root: str, rel: str, stamp: Stamp, modes: _Modes) -> str:
    """Rename the file ``root``/``rel`` (if it still has ``stamp``) to a name nothing
    reads, beside itself; the same fd-relative, symlink-refusing steps as
    :func:`remove_beneath`. Returns the new name ("" when it changed again or went)."""
    parts = [p for p in rel.split("/") if p]
    if not parts or ".." in parts:
        return ""
    fd = open_dir_nofollow(root)
    try:
        for part in parts[:-1]:
            nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return ""
        if (st.st_dev, st.st_ino, st.st_ctime_ns) != stamp:
            return ""
        moved = f"{QUARANTINE_PREFIX}{os.urandom(6).hex()}-{name}"
        _retry(modes, fd, lambda: os.rename(name, moved, src_dir_fd=fd, dst_dir_fd=fd))
        return os.path.join(os.path.dirname(os.path.join(root, rel)), moved)
    finally:
        os.close(fd)


def _retry(modes: _Modes, parent: int, step: Callable[[], None]) -> None:
    """``step`` (a change in the directory ``parent``); after opening the directory up
    once if the command made it read-only."""
    try:
        step()
    except PermissionError:
        if not modes.open_up(parent):
            raise
        step()


def _remove_tree(parent: int, name: str, modes: _Modes, depth: int) -> None:
    """Remove the directory ``name`` of ``parent`` and all below it, every step relative
    to a directory fd opened without following symlinks (a symlink inside is unlinked,
    never entered)."""
    if depth > MAX_REMOVE_DEPTH:
        raise OSError(0, f"more than {MAX_REMOVE_DEPTH} levels of directories")
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        modes.open_up(fd)
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        try:
            children = os.listdir(listing)
        finally:
            os.close(listing)
        for child in children:
            st = os.stat(child, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                _remove_tree(fd, child, modes, depth + 1)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def open_dir_nofollow(path: str) -> int:
    """An fd of the absolute directory ``path``, opened component by component from ``/``
    without following any symlink (ELOOP / ENOTDIR if one is on the way)."""
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in (p for p in path.split("/") if p):
            nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd
