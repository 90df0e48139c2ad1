"""Which protected paths can a call read (DEC-16)?

The bash analysis already refuses a command that *names* a denied path (``cat .env``,
``< .env``, a glob that reaches it). This module adds what naming misses:

* paths the policy **asks** about (``ask = ["read_file(**/.env)"]``): a command, a
  ``read_file`` or a ``grep_files`` that reads one is a bypass-immune ASK (a person
  decides, never an allow rule or a mode — a policy ASK outranks allow rules, DEC-3);
* **recursive** reads that can reach a protected path without naming it
  (``grep -r SECRET .``, ``rg SECRET``, ``find . -exec cat {} +``, ``tar c .``, ``cp -r``,
  ``zip -r``, ``rsync``): an ASK. For a denied path the ASK is not immune, because the
  run-time masks hide denied files from the command anyway (the second wall); for an
  asked-about path it is immune.

"Can reach" is decided without touching the disk beyond ``isdir``: a glob that is not
anchored (``**/.env``, ``*.pem``) can match below any directory; an anchored one only below
or above its literal prefix. Kept apart from the bash analysis so the analysis stays one
piece and this question has one answer.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from stockade.executor.bash import BashAnalysis
from stockade.executor.paths import is_protected_write

__all__ = ["bash_reach_rules", "can_reach", "recursive_reader"]

_GREP_RECURSIVE = frozenset({"-r", "-R", "--recursive", "--dereference-recursive"})
_ALWAYS_RECURSIVE = frozenset({"rg", "ripgrep", "ag", "ack", "ack-grep", "rsync", "tree"})
_FIND_RUNS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprintf", "-fls"})


def _short_flags(argv: Sequence[str]) -> str:
    """The letters of every short-option bundle (``-rn`` → ``rn``)."""
    return "".join(a[1:] for a in argv if a.startswith("-") and not a.startswith("--"))


def recursive_reader(name: str, argv: Sequence[str]) -> bool:
    """Whether the simple command reads whole directory trees (file contents)."""
    if name in _ALWAYS_RECURSIVE:
        return name != "tree"  # tree lists names only
    if name in ("grep", "egrep", "fgrep", "zgrep"):
        return (
            any(a in _GREP_RECURSIVE or a.startswith("--directories=recurse") for a in argv)
            or bool(set(_short_flags(argv)) & {"r", "R"})
            or ("-d" in argv and "recurse" in argv)
            or _grep_recurses(argv)
        )
    if name == "find":
        return any(a in _FIND_RUNS for a in argv)
    if name == "diff":
        # `diff -rN . /empty` prints every file under `.`.
        return "r" in _short_flags(argv) or any(_abbreviates(a, "--recursive") for a in argv)
    if name == "git":
        return _git_reads_work_tree(argv)
    if name in ("tar", "bsdtar"):
        first = argv[0] if argv else ""
        bundle = first.lstrip("-") if first and not first.startswith("--") else ""
        letters = set(bundle) | set(_short_flags(argv))
        return bool(letters & {"c", "r", "u"}) or any(
            a in ("--create", "--append", "--update") for a in argv
        )
    if name in ("cp", "scp"):
        return bool(set(_short_flags(argv)) & {"r", "R", "a"}) or any(
            _abbreviates(a, "--recursive") or _abbreviates(a, "--archive") for a in argv
        )
    if name == "zip":
        return bool(set(_short_flags(argv)) & {"r", "R"}) or "--recurse-paths" in argv
    if name in ("7z", "7za"):
        return bool(argv) and argv[0] in ("a", "u")
    return False


def _abbreviates(written: str, option: str) -> bool:
    """Whether getopt takes ``written`` for the long ``option`` (an unambiguous prefix:
    five characters and more are unique among grep's, diff's and cp's options here)."""
    return len(written) >= 5 and option.startswith(written)


def _grep_recurses(argv: Sequence[str]) -> bool:
    """grep's spellings of recursion getopt and argmatch also take: abbreviations
    (``--recur``, ``--deref``), ``--directories recurse`` as two words, and the action
    abbreviated (``-d rec``, ``--dir=rec``: ``grep --directories recurse SECRET .`` and
    ``grep --recur SECRET .`` read a denied .env and were ALLOWED)."""
    for k, arg in enumerate(argv):
        nxt = argv[k + 1] if k + 1 < len(argv) else ""
        if arg == "--":
            return False
        if arg.startswith("--"):
            written, eq, value = arg.partition("=")
            if _abbreviates(written, "--recursive") or _abbreviates(
                written, "--dereference-recursive"
            ):
                return True
            if _abbreviates(written, "--directories"):
                action = value if eq else nxt
                if len(action) >= 3 and "recurse".startswith(action):
                    return True
        elif arg.startswith("-") and "d" in arg[1:]:
            rest = arg[arg.index("d", 1) + 1 :]
            action = rest or nxt
            if len(action) >= 3 and "recurse".startswith(action):
                return True
    return False


_GIT_WORK_TREE_OPTIONS = ("--no-index", "--untracked", "--no-exclude-standard")
_GIT_GLOBAL_VALUES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})


def _git_reads_work_tree(argv: Sequence[str]) -> bool:
    """``git grep --no-index|--untracked`` and ``git diff --no-index`` read the files of
    the work tree (untracked ones too), not the repository's objects (any unambiguous
    prefix of those options counts, as git's option parser takes it)."""
    sub = ""
    rest: Sequence[str] = ()
    skip = False
    for k, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg in _GIT_GLOBAL_VALUES:
            skip = True
        elif not arg.startswith("-"):
            sub, rest = arg, argv[k + 1 :]
            break
    if sub not in ("grep", "diff"):
        return False
    for arg in rest:
        name = arg.split("=", 1)[0]
        if len(name) > 4 and any(option.startswith(name) for option in _GIT_WORK_TREE_OPTIONS):
            return True
    return False


def _literal_prefix(glob: str) -> str:
    parts = []
    for part in glob.split("/"):
        if any(c in part for c in "*?["):
            break
        parts.append(part)
    return "/".join(parts) or "/"


def can_reach(directory: str, glob: str) -> bool:
    """Whether a file below ``directory`` (absolute, canonical) can match ``glob``."""
    if not glob.startswith("/"):
        return True  # unanchored: matches trailing components at any depth
    prefix = _literal_prefix(glob).rstrip("/") or "/"
    d = directory.rstrip("/") or "/"
    return (
        d == "/"
        or prefix == d
        or prefix.startswith(d + "/")
        or d.startswith(prefix + "/")
        or (prefix == "/")
    )


def _reached(dirs: Iterable[str], globs: Sequence[str]) -> str | None:
    for d in dirs:
        for g in globs:
            if can_reach(d, g):
                return g
    return None


def bash_reach_rules(
    analysis: BashAnalysis, *, cwd: str, deny: Sequence[str], ask: Sequence[str]
) -> list[tuple[str, bool]]:
    """(reason, bypass_immune) ASK findings for a command's protected reads (see module)."""
    out: list[tuple[str, bool]] = []
    if ask:
        for path in analysis.paths_read:
            glob = is_protected_write(path, ask)
            if glob is not None:
                out.append((f"reads {path}, which the policy asks about ({glob!r})", True))
                break
    if not (deny or ask):
        return out
    named_dirs = [p for p in analysis.paths_read if os.path.isdir(p)]
    dirs = named_dirs or [cwd]
    for cmd in analysis.commands:
        if not recursive_reader(cmd.name, cmd.argv):
            continue
        if cmd.name == "git" and not named_dirs:
            continue  # git's work-tree forms name the directories they read (`.` included)
        hit = _reached(dirs, ask)
        if hit is not None:
            out.append((f"`{cmd.text}` reads recursively where {hit!r} (policy: ask) lies", True))
            break
        hit = _reached(dirs, deny)
        if hit is not None:
            out.append(
                (
                    f"`{cmd.text}` reads recursively where {hit!r} (policy: deny) lies; "
                    "the run-time masks hide such files",
                    False,
                )
            )
            break
    return out
