"""Paths that a repository's git configuration makes code (EXE-3 rev 2, hooks outside ``.git``).

Git runs programs that its configuration names, and some of them live in the work tree,
outside the protected git directory: ``core.hooksPath = .githooks`` (or husky's
``.husky/_``) moves the hooks there; ``include.path = ../shared.gitconfig`` makes a work-tree
file part of the configuration; ``diff.x.textconv = python3 tools/conv.py``,
``alias.lint = !./scripts/lint.sh``, ``gpg.program = ./tools/gpg`` run a file of the work
tree on ``git diff``, ``git lint``, ``git log --show-signature``. An agent that rewrites one
of them runs code as the person on that person's next git command on the host, outside any
sandbox. :func:`named_paths` returns them, so that the path sandbox refuses writes to them
and the confinement keeps them read-only, like ``.git/**``.

The configuration read is the one git would read for that repository (system, global, the
repository's ``config``, its ``commondir``'s and ``config.worktree``) and the files they
include. It is read as a superset, never by running git (whose configuration can run
commands): every ``includeIf`` is taken whatever its condition, a relative command word is
taken from the top of the work tree (where git runs hooks, aliases, filters and diff
drivers), a value that cannot be read as a path names nothing. Reading is bounded (file
size, include depth, number of files and of names) and cached by the files' stat
signatures, so the cost on a write check is a few ``stat`` calls once the repository has
been seen.

The agent cannot write any of these configuration files (``.git/**``, ``~/.gitconfig`` and
every included file are protected or outside the roots), so the parser reads trusted text:
it is lenient (a malformed line is skipped, as the rest of the file still counts) rather
than exact.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import stat
import threading
import time
from collections.abc import Iterable

__all__ = [
    "walk_problem",
    "config_files",
    "named_for",
    "named_paths",
    "parse_config",
    "repositories_in",
    "repository_of",
]

_MAX_CONFIG_BYTES = 1 << 20  # a config this large is not a person's
_MAX_INCLUDE_DEPTH = 10  # git's own limit (MAX_INCLUDE_DEPTH)
_MAX_FILES = 32
_MAX_NAMES = 256
_MAX_REPOSITORY_DEPTH = 128
_CACHE_ENTRIES = 64
_MAX_HOOK_FILES = 64
_MAX_HOOK_BYTES = 64 << 10

# Last components of keys whose value is a command (run by the shell, usually from the top
# of the work tree) or a program's path: core.fsmonitor, core.pager, core.editor,
# core.sshCommand, core.askPass, core.gitProxy, sequence.editor, gpg.program,
# gpg.<fmt>.program, gpg.ssh.defaultKeyCommand, diff.<d>.command / textconv, diff.external,
# filter.<f>.clean / smudge / process, merge.<m>.driver, mergetool / difftool.<t>.cmd / path,
# credential.helper, interactive.diffFilter, sendemail.sendmailCmd / toCmd / ccCmd,
# web.browser, browser.<b>.cmd / path, man.<m>.cmd / path, remote.<r>.uploadpack /
# receivepack, uploadpack.packObjectsHook, trailer.<t>.command / cmd, submodule.<s>.update
# (`!cmd`) ...
_COMMAND_NAMES = frozenset(
    {
        "askpass",
        "browser",
        "cccmd",
        "clean",
        "cmd",
        "command",
        "defaultkeycommand",
        "difffilter",
        "driver",
        "editor",
        "external",
        "fsmonitor",
        "gitproxy",
        "helper",
        "packobjectshook",
        "pager",
        "process",
        "program",
        "receivepack",
        "sendmailcmd",
        "smtpserver",
        "smudge",
        "sshcommand",
        "textconv",
        "tocmd",
        "update",
        "uploadpack",
    }
)
# Sections whose every value is a command (`alias.x = !sh ...`, `pager.log = ./p`).
_COMMAND_SECTIONS = frozenset({"alias", "pager"})
# `<section>.<name>.path` is a program's path only in these (submodule.<s>.path is a
# directory of the work tree, include.path a configuration file: handled apart).
_PROGRAM_PATH_SECTIONS = frozenset({"mergetool", "difftool", "man", "browser"})
# gpg.ssh.allowedSignersFile / revocationFile: the keys whose signatures verify as good.
_VERIFICATION_FILES = frozenset({"allowedsignersfile", "revocationfile"})
# Hook managers' configuration files at the top of the work tree, and the key whose values
# are the commands their hooks run.
_MANAGER_COMMANDS: tuple[tuple[str, str], ...] = (
    (".pre-commit-config.yaml", "entry"),
    (".pre-commit-config.yml", "entry"),
    *(
        (f"{where}{dot}{stem}.{ext}", "run")
        for where in ("", ".config/")
        for dot in ("", ".")
        for stem in ("lefthook", "lefthook-local")
        for ext in ("yml", "yaml")
        if not (where and dot)
    ),
)
# Words of a command: what lies between shell metacharacters and quotes.
_COMMAND_WORD = re.compile(r"[^\s'\"`;&|()<>=$\\]+")
_KEY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_BOOLEAN = frozenset({"", "true", "false", "yes", "no", "on", "off", "0", "1"})


def parse_config(text: str) -> list[tuple[str, str | None]]:
    """``(key, value)`` pairs of a git configuration file, in order.

    ``key`` is ``section.name`` or ``section.subsection.name`` with the section and the
    name lower-cased (git compares them so) and the subsection as written; ``value`` is
    None for a bare ``name`` (boolean true). Quotes, escapes and ``\\`` line continuations
    are read as git reads them; a malformed line is skipped.
    """
    out: list[tuple[str, str | None]] = []
    section = ""
    text = text.removeprefix("\ufeff")  # git skips a UTF-8 byte order mark
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if ch in "#;":
            i = _line_end(text, i)
            continue
        if ch == "[":
            end = text.find("]", i)
            if end < 0 or "\n" in text[i:end]:
                section = ""
                i = _line_end(text, i)
                continue
            section = _section(text[i + 1 : end])
            i = end + 1
            continue
        match = _KEY_NAME.match(text, i)
        if match is None or not section:
            i = _line_end(text, i)
            continue
        name = match.group().lower()
        i = match.end()
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] in "\r\n#;":
            out.append((f"{section}.{name}", None))
            i = _line_end(text, i)
            continue
        if text[i] != "=":
            i = _line_end(text, i)
            continue
        value, i = _value(text, i + 1)
        out.append((f"{section}.{name}", value))
    return out


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end + 1


def _section(header: str) -> str:
    """``core`` / ``branch "main"`` / ``branch.main`` (deprecated form) as a key prefix."""
    header = header.strip()
    if '"' in header:
        name, _, rest = header.partition('"')
        sub = rest.rsplit('"', 1)[0].replace('\\"', '"').replace("\\\\", "\\")
        return f"{name.strip().lower()}.{sub}"
    if "." in header:
        name, _, sub = header.partition(".")
        return f"{name.lower()}.{sub.lower()}"
    return header.lower()


def _value(text: str, i: int) -> tuple[str, int]:
    """A value from ``i`` (after ``=``) to its end of line; returns it and the next index."""
    out: list[str] = []
    quoted = False
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            i += 1
            break
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "\n":
                i += 2
                continue
            if nxt == "\r" and text[i + 2 : i + 3] == "\n":
                i += 3
                continue
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(nxt, nxt))
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch in "#;" and not quoted:
            i = _line_end(text, i)
            break
        else:
            out.append(ch)
        i += 1
    return "".join(out).strip(" \t\r"), i


def repository_of(path: str) -> tuple[str, str] | None:
    """(top of the work tree, git directory) of the repository git would find from the
    directory ``path`` (walking up to ``/``, as git's discovery does), or None. A ``.git``
    file's ``gitdir:`` is followed; a ``.git`` symlink is followed as git follows it."""
    here = path
    for _ in range(_MAX_REPOSITORY_DEPTH):
        dot_git = os.path.join(here, ".git")
        try:
            os.lstat(dot_git)
        except OSError:
            parent = os.path.dirname(here)
            if parent == here:
                return None
            here = parent
            continue
        if os.path.isfile(dot_git):
            return here, _gitdir_of_file(dot_git) or dot_git
        return here, os.path.realpath(dot_git)
    return None


def _read_regular(path: str, limit: int) -> str | None:
    """The first ``limit`` bytes of a regular file (symlinks followed, as git does), as
    text; None for anything else. Opened non-blocking and checked with fstat: a FIFO or a
    device under a name git reads (a program the checker cannot see into may make one)
    must not hang the analysis."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _gitdir_of_file(dot_git: str) -> str | None:
    """The directory a ``gitdir: X`` file names (relative to the file's directory)."""
    head = _read_regular(dot_git, 4096)
    if head is None or not head.startswith("gitdir:"):
        return None
    target = head[len("gitdir:") :].strip()
    if not target:
        return None
    return os.path.realpath(os.path.join(os.path.dirname(dot_git), target))


def common_dir(git_dir: str) -> str:
    """Where a (linked worktree's) git directory keeps config, hooks and objects."""
    pointer = (_read_regular(os.path.join(git_dir, "commondir"), 4096) or "").strip()
    return os.path.realpath(os.path.join(git_dir, pointer)) if pointer else git_dir


def _global_files(home: str) -> list[str]:
    """A person's global configuration files (git's defaults, for another home than the
    executor's, whose environment is not known)."""
    return [os.path.join(home, ".config", "git", "config"), os.path.join(home, ".gitconfig")]


def config_files(git_dir: str | None, home: str) -> list[str]:
    """The configuration files git reads for a repository, lowest precedence first (each
    may be missing): system, global, the common dir's ``config``, ``config.worktree``.
    Without ``git_dir``, the system and global ones only (they apply to every repository
    of the person)."""
    files: list[str] = []
    if not os.environ.get("GIT_CONFIG_NOSYSTEM"):
        files.append(os.environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    explicit = os.environ.get("GIT_CONFIG_GLOBAL")
    if explicit is not None:
        files.append(explicit)
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        files += [os.path.join(xdg, "git", "config"), os.path.join(home, ".gitconfig")]
    if git_dir is None:
        return [f for f in dict.fromkeys(files) if f and f != "/dev/null"]
    common = common_dir(git_dir)
    files.append(os.path.join(common, "config"))
    files.append(os.path.join(git_dir, "config.worktree"))
    if common != git_dir:
        files.append(os.path.join(git_dir, "config"))  # older layouts kept one here too
    return [f for f in dict.fromkeys(files) if f and f != "/dev/null"]


Signature = tuple[tuple[str, int, int, int, int], ...]


def _stat_key(path: str) -> tuple[str, int, int, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (path, -1, -1, -1, -1)
    return (path, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class _Reading:
    """One reading of a repository's configuration: what it names, and which files (and
    absent files) it depended on."""

    def __init__(self, top: str, home: str) -> None:
        self.top = top
        self.home = home
        self.consulted: list[str] = []
        self.named: list[str] = []
        self.hooks_dir: str | None = None

    def manager_commands(self, path: str, key: str) -> None:
        """A hook manager's configuration (itself protected by name) runs the commands of
        its ``key:`` entries on the person's commits (pre-commit's ``entry:``, lefthook's
        ``run:``): the work-tree files they name are what those hooks run. YAML is read
        line by line (a block scalar ``|`` / ``>`` takes the lines indented below it)."""
        self.consulted.append(path)
        text = _read_regular(path, _MAX_CONFIG_BYTES)
        if text is None:
            return
        lines = text.splitlines()
        pattern = re.compile(rf"^(\s*)-?\s*{key}\s*:\s*(.*)$")
        for i, line in enumerate(lines):
            match = pattern.match(line)
            if match is None:
                continue
            value = match.group(2).split(" #", 1)[0].strip()
            if value[:1] in ("|", ">"):
                indent = len(match.group(1))
                block: list[str] = []
                for nxt in lines[i + 1 :]:
                    if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                        break
                    block.append(nxt)
                value = "\n".join(block)
            self.named.extend(self._command_paths(value))
            if len(self.named) >= _MAX_NAMES:
                return

    def installed_hooks(self, hooks_dir: str) -> None:
        """The hooks git runs (the hooks directory's files, ``*.sample`` aside) are
        trusted programs; the work-tree files they name are what they run: a hook
        manager's config (pre-commit's ``--config=…``), ``node_modules/husky/run.js``,
        ``./scripts/pre-commit.sh``. Words with a ``/`` and bare words naming a file at
        the top of the work tree count."""
        self.consulted.append(hooks_dir)
        try:
            with os.scandir(hooks_dir) as scan:
                entries = sorted((e.path for e in scan if not e.name.endswith(".sample")), key=str)
        except OSError:
            return
        for path in entries[:_MAX_HOOK_FILES]:
            if len(self.named) >= _MAX_NAMES:
                return
            text = _read_regular(path, _MAX_HOOK_BYTES)
            if text is None:
                continue
            self.consulted.append(path)
            for word in _COMMAND_WORD.findall(text):
                if "$" in word or word.startswith("-") or not word.strip("./"):
                    continue
                if "/" not in word and not os.path.isfile(os.path.join(self.top, word)):
                    continue
                place = self._place(word, self.top)
                if place is not None and not place.startswith(("/dev/", "/proc/")):
                    self.named.append(place)

    def load(self, path: str, depth: int) -> None:
        if depth > _MAX_INCLUDE_DEPTH or len(self.consulted) >= _MAX_FILES:
            return
        self.consulted.append(path)
        text = _read_regular(path, _MAX_CONFIG_BYTES)
        if text is None:
            return
        base = os.path.dirname(path)
        for key, value in parse_config(text):
            if value is None or len(self.named) >= _MAX_NAMES:
                continue
            section, _, rest = key.partition(".")
            name = rest.rsplit(".", 1)[-1] if rest else ""
            if name == "path" and (section == "include" or section == "includeif"):
                included = self._place(value, base)
                if included is not None:
                    # A file of the configuration: writing it is writing the config.
                    self.named.append(included)
                    self.load(included, depth + 1)
            elif key in ("core.hookspath", "init.templatedir"):
                # init.templateDir: a person's next `git init` / `git clone` copies the
                # hooks found there into the new repository.
                hooks = self._place(value, self.top)
                if hooks is not None:
                    if key == "core.hookspath":
                        self.hooks_dir = hooks  # the last one wins, as in git
                    self.named.append(hooks)
                    if os.path.basename(hooks) == "_":
                        # husky (v9): `.husky/_/<hook>` runs `.husky/<hook>`.
                        self.named.append(os.path.dirname(hooks))
            elif name in _VERIFICATION_FILES:
                # Who a signature check reports as a good signer: not code, but the
                # person's trust in what the agent could sign.
                place = self._place(value, self.top)
                if place is not None:
                    self.named.append(place)
            elif (
                section in _COMMAND_SECTIONS
                or name in _COMMAND_NAMES
                or (name == "path" and section in _PROGRAM_PATH_SECTIONS)
            ):
                if key == "core.fsmonitor" and value.strip().lower() in _BOOLEAN:
                    continue
                if section == "credential" and name == "helper":
                    # A bare helper name is the program git-credential-<name> on PATH.
                    value = value if value.lstrip().startswith(("!", "/", "~", ".")) else ""
                self.named.extend(self._command_paths(value))

    def _place(self, value: str, base: str) -> str | None:
        """A path value as git reads it (``~/`` from the home, relative from ``base``)."""
        value = value.strip()
        if not value:
            return None
        if value.startswith("~/") or value == "~":
            value = os.path.join(self.home, value[2:])
        elif value.startswith("%(prefix)/"):
            return None  # relative to git's own install prefix: not in a root
        return os.path.normpath(os.path.join(base, value))

    def _command_paths(self, value: str) -> Iterable[str]:
        """The files a command value may run or load: each word with a ``/`` (``./x``,
        ``tools/conv.py``, ``~/bin/x``, ``/abs/x``), and each bare word naming a file at the
        top of the work tree or looking like a file name (``conv.py``): git runs these
        commands from the top. A bare word like ``less`` is a program from PATH."""
        value = value[:4096]
        try:
            words = shlex.split(value.lstrip("!"))  # a quoted word with blanks is one path
        except ValueError:
            words = []
        for word in dict.fromkeys((*words, *_COMMAND_WORD.findall(value))):
            word = word.lstrip("!")
            if not word or word.startswith("-") or word.startswith("%"):
                continue
            if "/" not in word and not word.startswith("~"):
                candidate = os.path.join(self.top, word)
                if "." not in word.strip(".") and not os.path.lexists(candidate):
                    continue
            place = self._place(word, self.top)
            if place is not None:
                yield place


_cache: dict[tuple[str, str | None, str, tuple[str, ...]], tuple[Signature, tuple[str, ...]]] = {}
_cache_lock = threading.Lock()


def named_paths(
    top: str, git_dir: str | None, home: str, other_homes: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Absolute paths (files or directories, each with everything under it) that the
    configuration of the repository at ``top`` (git directory ``git_dir``) makes code or
    configuration: the hooks directory, included configuration files, and the files its
    commands name. Both each path as named and its canonical form (symlinks followed, as
    git follows them) are returned. Cached by the stat signatures of every file read.

    ``git_dir`` None: the system and global configuration alone (``top`` is then "", and
    what a relative value names, relative to a repository not known, is dropped).
    ``other_homes``: homes of other people whose git may work in the roots (the owners of
    the writable roots): their global configuration is read too, ``~`` as their home."""
    key = (top, git_dir, home, other_homes)
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        signature, named = cached
        if all(_stat_key(entry[0]) == entry for entry in signature):
            return named
    reading = _Reading(top, home)
    for other in other_homes:
        reading.home = other
        for path in _global_files(other):
            reading.load(path, 0)
    reading.home = home
    for path in config_files(git_dir, home):
        reading.load(path, 0)
    if git_dir is not None:
        reading.installed_hooks(reading.hooks_dir or os.path.join(common_dir(git_dir), "hooks"))
        for manager_file, command_key in _MANAGER_COMMANDS:
            reading.manager_commands(os.path.join(top, manager_file), command_key)
    out: list[str] = []
    for path in reading.named:
        if not path.startswith("/"):
            continue  # relative to a repository not known (global configuration alone)
        out.append(path)
        real = os.path.realpath(path)
        if real != path:
            out.append(real)
    named = tuple(dict.fromkeys(out))
    signature = tuple(_stat_key(path) for path in reading.consulted)
    with _cache_lock:
        if len(_cache) >= _CACHE_ENTRIES:
            _cache.clear()
        _cache[key] = (signature, named)
    return named


# What the repositories around a few places name, kept for a moment: every write check
# asks (PERF-4a), and finding the repositories walks to `/`. Only the person changes what
# is found (the agent can neither create a `.git` nor write a configuration file), and a
# person's `git init` or `git config` is seen within this time.
_PLACES_TTL_S = 1.0
_places: dict[tuple[tuple[str, ...], str, tuple[str, ...]], tuple[float, tuple[str, ...]]] = {}


def named_for(places: tuple[str, ...], home: str, roots: tuple[str, ...] = ()) -> tuple[str, ...]:
    """:func:`named_paths` of every repository git finds from one of ``places`` (each a
    directory) and of every repository inside ``roots`` (the writable roots: a
    ``core.hooksPath`` of one may name a directory anywhere in them), merged, with the
    system and global configuration read even where no repository is found, and the
    global configuration of the roots' owners (a person's git reads their home's, which
    need not be the executor's); remembered for a second."""
    key = (places, home, roots)
    now = time.monotonic()
    hit = _places.get(key)
    if hit is not None and now - hit[0] < _PLACES_TTL_S:
        return hit[1]
    others = _owner_homes(roots, home)
    named: list[str] = list(named_paths("", None, home, others))
    found = [repo for repo in (repository_of(p) for p in places) if repo is not None]
    found += repositories_in(roots)[0]
    for top, git_dir in dict.fromkeys(found):
        named.extend(named_paths(top, git_dir, home, others))
    result = tuple(dict.fromkeys(named))
    with _cache_lock:
        if len(_places) >= _CACHE_ENTRIES * 4:
            _places.clear()
        _places[key] = (now, result)
    return result


def _owner_homes(roots: tuple[str, ...], home: str) -> tuple[str, ...]:
    """The home directories of the owners of ``roots`` other than ``home`` (from the
    password database): the person whose git works there reads their own global
    configuration."""
    homes: list[str] = []
    for root in roots:
        try:
            owner = pwd.getpwuid(os.stat(root).st_uid).pw_dir
        except (OSError, KeyError):
            continue
        if owner and owner not in (home, "/") and os.path.isdir(owner):
            homes.append(owner.rstrip("/"))
    return tuple(dict.fromkeys(homes))


_MAX_WALK_ENTRIES = 200_000  # as the run-time walk of the writable roots (confine/masks.py)
_LAYOUT_MARKERS = frozenset({"objects", "refs", "commondir"})
_walks: dict[tuple[str, ...], tuple[float, tuple[tuple[str, str], ...], str]] = {}


def walk_problem(roots: tuple[str, ...]) -> str:
    """Why the last :func:`repositories_in` of ``roots`` may be incomplete ("" when it is
    whole): a dictionary look-up, for every write check (the walk when none is kept)."""
    hit = _walks.get(roots)
    return hit[2] if hit is not None else repositories_in(roots)[1]


def repositories_in(roots: tuple[str, ...]) -> tuple[list[tuple[str, str]], str]:
    """(top, git directory) of every repository inside ``roots``: each ``.git`` directory,
    file (``gitdir:``) or symlink, and each directory laid out as a bare repository (a
    ``HEAD`` beside ``objects``, ``refs`` or ``commondir``); git directories are not
    descended into. Symlinks are not followed. The second item says why the list may be
    incomplete (more than ``_MAX_WALK_ENTRIES`` entries), "" when it is whole. One walk,
    remembered for a second like :func:`named_for` (only a person adds repositories: the
    agent cannot write a git directory or layout)."""
    if not roots:
        return [], ""
    now = time.monotonic()
    hit = _walks.get(roots)
    if hit is not None and now - hit[0] < _PLACES_TTL_S:
        return list(hit[1]), hit[2]
    repos: list[tuple[str, str]] = []
    problem = ""
    seen = 0
    pending = sorted({os.path.realpath(r) for r in roots})
    visited: set[str] = set()
    while pending and not problem:
        top = pending.pop()
        if top in visited:
            continue
        visited.add(top)
        try:
            scan = os.scandir(top)
        except OSError:
            continue
        subdirs: list[str] = []
        names: set[str] = set()
        with scan:
            for entry in scan:
                seen += 1
                if seen > _MAX_WALK_ENTRIES:
                    problem = (
                        f"more than {_MAX_WALK_ENTRIES} entries in the writable roots: the "
                        "repositories whose configuration names code cannot all be found"
                    )
                    break
                names.add(entry.name)
                try:
                    if entry.name == ".git":
                        if entry.is_file(follow_symlinks=False):
                            repos.append((top, _gitdir_of_file(entry.path) or entry.path))
                        else:
                            repos.append((top, os.path.realpath(entry.path)))
                    elif entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.path)
                except OSError:
                    continue
        if "HEAD" in names and names & _LAYOUT_MARKERS:
            repos.append((top, top))  # a bare repository: its config and hooks
            continue
        pending.extend(subdirs)
    result = tuple(dict.fromkeys(repos))
    if len(_walks) >= _CACHE_ENTRIES:
        _walks.clear()
    _walks[roots] = (now, result, problem)
    return list(result), problem
