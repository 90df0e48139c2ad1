"""git (EXE-3, EXE-8d): options and subcommands that run commands or write files,
repository changes as writes of the git directory, object access judged against protected
reads."""

from __future__ import annotations

import fnmatch
import os
import re
from typing import Final

from stockade.executor.bash import lists
from stockade.executor.bash.findings import Judge, normal_path, short, word_text
from stockade.executor.bash.options import (
    canonical,
    literal,
)
from stockade.executor.bash.parser import Word
from stockade.executor.paths import GIT_LAYOUT_MARKERS, dirname, fold_for_match, lexists


def judge(j: Judge, args: list[Word]) -> None:
    """git: global options, then the subcommand's options, targets, objects and history."""
    i = 0
    git_dir: Word | None = None
    work_tree: Word | None = None
    while i < len(args):
        value = args[i].value
        if value is None:
            j.effect("git with an argument only known at run time", immune=True)
            return
        nxt = args[i + 1] if i + 1 < len(args) else None
        if value == "-C" and nxt is not None:
            j.change_dir(nxt)
            i += 2
            continue
        if value == "-c" or (value.startswith("-c") and not value.startswith("--")):
            setting = value[2:] if len(value) > 2 else (word_text(nxt) if nxt else "")
            _setting(j, setting.split("=", 1)[0], "git -c")
            i += 1 if len(value) > 2 else 2
            continue
        option = canonical(value.split("=", 1)[0], (_GIT_LONG,))
        if option in ("--git-dir", "--work-tree"):
            word = literal(value.split("=", 1)[1]) if "=" in value else nxt
            if word is not None:
                j.path(word, write=False)
                if option == "--git-dir":
                    git_dir = word
                else:
                    work_tree = word
            i += 1 if "=" in value else 2
            continue
        if option in lists.GIT_DENY_OPTIONS:
            j.deny(lists.GIT_DENY_OPTIONS[option])
            return
        if value.startswith("-"):
            i += 1
            continue
        break
    if i >= len(args):
        return  # `git` alone prints help
    sub = args[i].value or ""
    rest = args[i + 1 :]
    values = [w.value for w in rest]
    if sub.startswith("credential"):
        # `git credential fill` (and the credential-* helpers) print stored secrets.
        j.deny(f"git {sub} reads or stores credentials")
        return
    if sub == "bisect" and _bisect_runs(j, rest):
        return
    for k, value in enumerate(values):
        if value is None:
            # `git show "$x"` may be `HEAD:.env`: which object it names is unknown.
            j.ask(f"git {sub} with an argument only known at run time", immune=True)
            continue
        option = canonical(value.split("=", 1)[0], (_GIT_LONG,))
        short = option if option.startswith("--") else option[:2]
        if (
            sub in _BUNDLED
            and len(value) > 2
            and value[0] == "-"
            and value[1] != "-"
            and _bundle(j, sub, values, k)
        ):
            return
        if option in _GIT_DENY_ANYWHERE:
            j.deny(lists.GIT_DENY_OPTIONS[option])
            return
        if sub == "grep" and short in ("-O", "--open-files-in-pager"):
            j.deny(lists.GIT_DENY_OPTIONS[short])
            return
        if sub in ("rebase", "difftool") and short in ("-x", "--exec"):
            j.deny(f"git {sub} {short} runs a command")
            return
        if sub == "send-email" and (
            value.startswith(_SEND_EMAIL_RUNNERS)
            or (value.startswith("--smtp-server") and "/" in value.partition("=")[2])
            or (
                value == "--smtp-server"
                and "/" in (values[k + 1] or "" if k + 1 < len(values) else "")
            )
        ):
            # `--sendmail-cmd`, `--to-cmd`, `--cc-cmd`, `--header-cmd` run a command (git
            # documentation), and so does `--smtp-server` given a program's path.
            j.deny(f"git send-email {value[:40]} runs a command")
            return
        if sub == "filter-branch" and option in lists.GIT_FILTER_OPTIONS:
            j.deny(f"git filter-branch {option} runs a shell command for every commit")
            return
        if sub in ("clone", "submodule") and short in ("-c", "--config"):
            setting = value[2:] if short == "-c" and len(value) > 2 else ""
            if "=" in value and option == "--config":
                setting = value.split("=", 1)[1]
            elif not setting and k + 1 < len(values):
                setting = values[k + 1] or ""
            _setting(j, setting.split("=", 1)[0], f"git {sub} {short}")
        target = _option_target(j, sub, option, short, value, rest, k)
        if target is not None:
            kind, word = target
            if kind == "write":
                j.path(word, write=True, what=f"git {sub} {option} writes")
                j.effect(f"git {sub} {option} writes files", "low")
            else:
                j.path(word, write=False)
        if option == "--no-index":
            # `git diff --no-index A B` reads any two files, not repository objects.
            for word in rest:
                if word.value is None or not word.value.startswith("-"):
                    j.path(word, write=False)
        if sub == "help" and short in ("-w", "--web", "-i", "--info", "-m", "--man"):
            j.effect("git help opens a browser, info or man viewer")
    _objects(j, sub, rest)
    if sub == "grep":
        _grep_work_tree(j, rest)
    _history(j, sub, rest, elsewhere=git_dir is not None or work_tree is not None)
    first = next((v for v in values if v is not None and not v.startswith("-")), None)
    if sub in ("init", "clone") or (sub == "worktree" and first == "add"):
        _new_repository(j, sub, rest)
    if sub == "apply":
        _patch_targets(j, rest)
    if sub == "bundle" and first == "create":
        operands = [w for w in rest if w.value is None or not w.value.startswith("-")]
        if len(operands) >= 2:
            j.path(operands[1], write=True, what="git bundle create writes")
    if (
        sub in lists.GIT_NETWORK_SUBCOMMANDS
        or (sub == "remote" and first in ("update", "show", "prune", "set-head"))
        or (sub == "submodule" and first in ("update", "add", "sync"))
        or (sub == "archive" and any(v and v.startswith("--rem") for v in values))
    ):
        if sub in ("fetch", "pull") or (sub == "submodule" and first in ("update", "add")):
            repository_write(j, sub, git_dir)
        j.network(f"git {sub} talks to a remote repository (can upload code)")
        return
    if sub == "submodule" and first == "foreach":
        j.deny("git submodule foreach runs shell commands")
        return
    if sub == "bisect" and first == "run":
        j.deny("git bisect run runs commands")
        return
    if sub == "hook":
        j.deny("git hook runs the repository's hook scripts")
        return
    if sub in lists.GIT_READ_SUBCOMMANDS and _read_only(j, sub, values, first):
        j.scan_credentials(rest)  # `git blame --contents=~/.ssh/id_rsa`
        if _prints_config(sub, values, first) and _config_holds_credentials(
            os.path.join(repository_top(j), ".git")
        ):
            j.ask(
                f"git {sub} prints the repository's git configuration, which holds "
                "credentials (an http extraheader token or a password in a remote URL)",
                "high",
                immune=True,
            )
        for word in rest:
            value = word.value
            if value is not None and value.startswith(("/", "~")):
                j.path(word, write=False)
        return
    worktree_only = sub in ("clean", "difftool", "format-patch", "archive") or (
        sub == "apply" and not {"--index", "--cached", "-3", "--3way"} & set(filter(None, values))
    )
    if (
        (sub in lists.GIT_WRITE_SUBCOMMANDS or sub in lists.GIT_READ_SUBCOMMANDS)
        and sub not in ("init", "clone")
        and not worktree_only
    ):
        # Commits, refs, the index, config, stashes and objects live in the git
        # directory: a protected write (EXE-3 rev 2) unless configuration allows it.
        # (`git restore FILE` too: it locks the index.)
        repository_write(j, sub, git_dir)
        if work_tree is not None:
            # `git --work-tree=/elsewhere checkout .` writes the files there.
            j.path(work_tree, write=True, what=f"git {sub} writes the work tree at")
    if sub in lists.GIT_WRITE_SUBCOMMANDS:
        phrase = lists.GIT_WRITE_SUBCOMMANDS[sub]
        risky = (
            (sub == "clean" and not {"-n", "--dry-run"} & set(filter(None, values)))
            or (sub == "reset" and "--hard" in values)
            or sub == "filter-branch"
            or (sub in ("checkout", "restore") and "." in values)
        )
        j.effect(f"git {sub} {phrase}", "high" if risky else "medium")
        return
    if sub == "config":
        return  # judged in git_read_only (writes asked or denied there)
    if sub in lists.GIT_READ_SUBCOMMANDS:
        j.effect(f"git {sub} with these arguments changes the repository")
        return
    # An alias (`git lg` for `log -p`) or a plumbing command (merge-tree, unpack-file)
    # can print committed contents: with protected reads, a person decides.
    j.effect(
        f"git {sub!r} is not a known subcommand (it may be an alias or a git-{sub} program)",
        immune=bool(j.denied_read_globs),
    )


# Short options that run a command (or set configuration), and the short options that
# take a value, per subcommand: git's parse-options bundles short flags and lets the last
# one take the rest of the word as its value, so `git grep -nOcmd` is `-n -Ocmd` (runs
# cmd as a pager) and `git clone -qc core.sshCommand=cmd` is `-q -c …`.
_BUNDLED: Final[dict[str, tuple[str, str]]] = {
    "grep": ("O", "efABCmO"),
    "rebase": ("x", "sXxCS"),
    "difftool": ("x", "txUSGO"),
    "clone": ("uc", "obucj"),
    "submodule": ("c", "bc"),
}


def _bundle(j: Judge, sub: str, values: list[str | None], k: int) -> bool:
    """Judge the short options bundled in ``values[k]`` (``-nO…``); True when denied."""
    value = values[k] or ""
    runners, takers = _BUNDLED[sub]
    for n in range(1, len(value)):
        letter = value[n]
        if letter in runners:
            if n == 1:
                return False  # `-Ocmd`, `-cname=value`: the unbundled form, judged below
            if letter == "c":
                attached = value[n + 1 :]
                if not attached:
                    attached = (values[k + 1] or "") if k + 1 < len(values) else ""
                _setting(j, attached.split("=", 1)[0], f"git {sub} -c")
                return False
            j.deny(f"git {sub} -{letter} (bundled in {short(value, 20)}) runs a command")
            return True
        if letter in takers:
            return False
    return False


def _bisect_runs(j: Judge, rest: list[Word]) -> bool:
    """``git bisect view|visualize ARGS``: with a first argument that is not an option,
    git runs ``git ARGS`` (``git bisect view difftool -x CMD`` runs CMD) or, for ``tig``
    and a name starting with ``git``, that program. The nested command is judged as
    such. True when judged here."""
    words = [w for w in rest if w.value != "--"]
    if len(words) < 2 or words[0].value not in ("view", "visualize"):
        return False
    name = words[1].value
    if name is None:
        j.ask("git bisect view runs a command only known at run time", immune=True)
        return True
    if name.startswith("-"):
        return False  # options of `git log`
    if name == "tig" or name.startswith("git"):
        j.effect(f"git bisect {words[0].value} {short(name, 30)} runs that program")
        return True
    judge(j, words[1:])
    return True


def _option_target(
    j: Judge, sub: str, option: str, short: str, value: str, rest: list[Word], k: int
) -> tuple[str, Word] | None:
    """("write" | "read", the file) an option of a git subcommand names, or None."""
    kind = ""
    if option in ("--output", "--output-directory", "--separate-git-dir") or (
        short == "-o" and sub in ("archive", "format-patch")
    ):
        kind = "write"
    elif option == "--prefix" and sub == "checkout-index":
        kind = "write"  # files are checked out under the prefix (any directory)
    elif (short in ("-F",) or option == "--file") and sub in _GIT_FILE_READERS:
        kind = "read"  # a message or pattern file: its content enters the repository
    elif short == "-f" and sub in ("grep", "config"):
        kind = "read"  # `git config -f FILE -l` prints an INI file (~/.aws/credentials)
    elif option == "--file" and sub == "config":
        kind = "read"
    elif option in ("--contents", "--reference", "--reference-if-able"):
        kind = "read"
    if not kind:
        return None
    if option.startswith("--") and "=" in value:
        return kind, literal(value.split("=", 1)[1])
    if not option.startswith("--") and len(value) > 2:
        return kind, literal(value[2:])
    if k + 1 < len(rest):
        return kind, rest[k + 1]
    return None


_MAX_PATCH_BYTES: Final = 1 << 20
_PATCH_TARGET: Final = re.compile(r"^(?:\+\+\+ |rename to |copy to |diff --git \S+ )(.*)$")


def _patch_targets(j: Judge, rest: list[Word]) -> None:
    """``git apply PATCH…``: the files a patch creates or changes are writes, judged by
    the path sandbox like any other (a patch adding ``.husky/pre-commit`` or the hooks
    directory's script is refused, not asked). The patch is read here, bounded; one that
    cannot be read (stdin, a missing or huge file, a quoted name) keeps the plain ASK."""
    strip, directory = 1, ""
    patches: list[str] = []
    values = [w.value for w in rest]
    if {"--stat", "--numstat", "--summary", "--check"} & set(filter(None, values)) and (
        "--apply" not in values
    ):
        return  # reports on the patch, writes nothing
    skip = False
    for k, value in enumerate(values):
        if value is None:
            return
        if skip:
            skip = False
            continue
        if value.startswith("-p") and value[2:].isdigit():
            strip = int(value[2:])
        elif value.startswith("--directory="):
            directory = value.split("=", 1)[1]
        elif value in ("--directory", "-C", "--exclude", "--include", "--whitespace"):
            if value == "--directory" and k + 1 < len(values):
                directory = values[k + 1] or ""
            skip = True
        elif not value.startswith("-") or value == "-":
            patches.append(value)
    top = repository_top(j)
    for patch in patches:
        if patch == "-":
            return
        try:
            with open(_here(j, patch), "rb") as f:
                data = f.read(_MAX_PATCH_BYTES + 1)
        except OSError:
            return
        if len(data) > _MAX_PATCH_BYTES:
            return
        for line in data.decode("utf-8", "replace").splitlines():
            match = _PATCH_TARGET.match(line)
            if match is None:
                continue
            name = match.group(1).split("\t", 1)[0].strip()
            if name.startswith('"'):
                j.effect("git apply with a quoted file name in the patch")
                return
            if name == "/dev/null" or not name:
                continue
            if not line.startswith(("rename to ", "copy to ")):
                parts = name.split("/")
                if len(parts) <= strip:
                    continue
                name = "/".join(parts[strip:])
            target = os.path.normpath(os.path.join(top, directory, name))
            j.path(literal(target), write=True, what="git apply writes")


def repository_top(j: Judge) -> str:
    """The top of the repository the current directory is in (its own dir if none):
    where a ``REV:path`` starts and where ``.git`` lives. Looked up once per directory
    and analysis (:attr:`Judge.repository_tops`), never kept longer."""
    here = j.bases[-1]
    top = j.repository_tops.get(here)
    if top is None:
        top = _find_top(here)
        j.repository_tops[here] = top
    return top


def _find_top(here: str) -> str:
    probe = here
    for _ in range(64):
        # os.path.join(probe, ".git"), without its call layers.
        if lexists(probe + ".git" if probe.endswith("/") else probe + "/.git"):
            return probe
        parent = dirname(probe)
        if parent == probe:
            break
        probe = parent
    return here


def repository_write(j: Judge, sub: str, git_dir: Word | None) -> None:
    """Judge a git subcommand that changes the repository as a write of its git dir."""
    target = git_dir or literal(os.path.join(repository_top(j), ".git"))
    j.path(target, write=True, what=f"git {sub} writes the repository at")


def _new_repository(j: Judge, sub: str, rest: list[Word]) -> None:
    """``init [DIR]``, ``clone URL [DIR]``, ``worktree add PATH``: the new repository's
    git directory (or ``.git`` file) is a protected write."""
    operands = [w for w in rest if w.value is None or not w.value.startswith("-")]
    skip_values = {"-b", "--branch", "-o", "--origin", "--template", "--separate-git-dir"}
    values = [w.value for w in rest]
    operands = [
        w
        for k, w in enumerate(rest)
        if w in operands and not (k > 0 and values[k - 1] in skip_values)
    ]
    directory: Word | None = None
    if sub == "init":
        directory = operands[0] if operands else literal(".")
    elif sub == "clone":
        if len(operands) >= 2:
            directory = operands[1]
        elif operands and operands[0].value is not None:
            name = operands[0].value.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
            directory = literal(name.removesuffix(".git") or "repo")
    else:  # worktree add PATH
        directory = operands[1] if len(operands) >= 2 else None
        repository_write(j, sub, None)
    if directory is None or directory.value is None:
        j.effect(f"git {sub} creates a repository at a place only known at run time")
        return
    bare = "--bare" in values or "--mirror" in values
    place = directory.value if bare else os.path.join(directory.value, ".git")
    j.path(directory, write=True, what=f"git {sub} creates")
    j.path(literal(place), write=True, what=f"git {sub} creates a git directory at")
    if bare and j.sandbox.protects_git:
        j.deny(f"git {sub} --bare lays out a git directory inside a writable root")


def _objects(j: Judge, sub: str, rest: list[Word]) -> None:
    """Object access (``REV:path``, ``:path``, pathspecs of ``show``, ``log -p``,
    ``grep``, ``archive`` ...) is judged against protected reads: the repository keeps
    a copy of every committed file, which the run-time masks cannot hide (DEC-16)."""
    unbounded = False
    pathspecs = False
    for word in rest:
        value = word.value
        if value is None:
            continue
        if value == "--":
            pathspecs = True
            continue
        if value.startswith("-"):
            if sub == "cat-file" and value.startswith("--batch"):
                unbounded = True
            if sub == "config" and value.startswith("--blob"):
                # `git config --blob=ID -l` prints a committed INI file (an AWS
                # credentials file) named by object id, a ref or a tree path: only a
                # `REV:path` says which file (judged below).
                named = value.partition("=")[2] if "=" in value else _next_value(rest, word)
                split = split_revision(named) if named else None
                if split is None or not split[1]:
                    unbounded = True
            # An object named in an option's value: `config --blob=HEAD:.env`,
            # `log -L1,1:.env`, `blame --contents=...`.
            attached = ""
            if value.startswith("--") and "=" in value:
                attached = value.split("=", 1)[1]
            elif value.startswith("-L") and len(value) > 2:
                attached = value[2:]
            if attached and _names_denied(j, sub, value, attached, repository_top(j)):
                return
            continue
        if _excludes(value):
            # `':!.env'` / `':(exclude).env'` takes a path away from the pathspecs: not a
            # read of it. (As a revision it names the index entry `!.env` literally.)
            if _names_denied(j, sub, value, "./" + value[1:], repository_top(j)):
                return
            continue
        if sub in _GIT_CONTENT_SUBCOMMANDS and (pathspecs or ":" in value):
            # Files whose committed copy is printed are reads of that file (for the
            # policy's read rules downstream, e.g. an ASK on reading it).
            candidates = _git_path_candidates(value)  # none for `.` and `/`
            name = candidates[0] if candidates else ""
            if name and not any(c in name for c in "*?[") and not name.startswith("/"):
                if ":" in value and not name.startswith("./"):
                    base = repository_top(j)
                else:
                    base = j.bases[-1]
                j.reads[normal_path(os.path.join(base, name))] = None
        if _names_denied(j, sub, value, value, repository_top(j)):
            return
        for name in _git_path_candidates(value):
            if (
                sub in _GIT_CONTENT_SUBCOMMANDS
                and any(c in name for c in "*?[")
                and _glob_denied(j, name)
            ):
                j.deny(f"the git pathspec {short(name, 40)} can match a path policy denies reading")
                return
    if not j.denied_read_globs:
        return
    operands = [w.value for w in rest if w.value is not None and not w.value.startswith("-")]
    if sub == "cat-file" and (
        unbounded or any(":" not in v and _HEX_LEAD.match(v) for v in operands)
    ):
        unbounded = True
    if sub == "archive" and not _archive_clear(j, rest, repository_top(j)):
        # The tree named (the whole of it, a subtree `HEAD:sub`, or what lies under its
        # paths in that commit — a path that is a file now may be a directory there) may
        # hold files the policy denies reading.
        unbounded = True
    if sub in ("fast-export", "bundle") or unbounded:
        j.ask(
            f"git {sub} can print any committed file, including ones policy denies "
            "reading (the run-time masks do not cover the object store)",
            "high",
            immune=True,
        )


def _prints_config(sub: str, values: list[str | None], first: str | None) -> bool:
    """Whether this read-only form prints values of the repository's configuration:
    ``git config`` reading keys, ``git remote -v|get-url|show``, ``git var -l``."""
    if sub == "config":
        words = [v for v in values if v is not None]
        if any(v.startswith("--blob") for v in words):
            return False  # a committed file's values (judged as an object read)
        if {"-l", "--list", "--get-regexp", "--get-urlmatch"} & set(words) or first == "list":
            return True
        keys = [v for v in words if not v.startswith("-") and v not in ("get", "list")]
        # One key read: only one that can hold a credential prints one.
        return any(
            k.lower().endswith((".url", ".pushurl", "extraheader", "password", "token"))
            or "credential" in k.lower()
            for k in keys[:1]
        )
    if sub == "remote":
        return first in ("get-url", "show") or bool({"-v", "--verbose"} & set(filter(None, values)))
    return sub == "var"


# A remote URL with credentials: `https://user:password@`, or a token as the user name.
_URL_CREDENTIALS = re.compile(
    r"\bhttps?://(?:[^/@\s:]*:[^/@\s]+|(?:ghp_|gho_|ghs_|github_pat_|glpat-|x-access-token)"
    r"[^/@\s]*|[^/@\s:]{30,})@",
    re.I,
)
_CONFIG_CACHE: dict[tuple[str, int, int, int], bool] = {}


def _config_holds_credentials(git_dir: str) -> bool:
    """Whether the repository's own configuration (``config``, ``config.worktree``) keeps
    credentials: an ``http.*.extraheader`` (actions/checkout keeps its token there), a
    ``*.password``/``*token`` key or a remote URL with a password or token in it. Read by
    the checker (bounded, cached by file version), never by running git."""
    from stockade.executor.gitconfig import parse_config

    for name in ("config", "config.worktree"):
        path = os.path.join(git_dir, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
        cached = _CONFIG_CACHE.get(key)
        if cached is None:
            cached = False
            if st.st_size > 1 << 20:
                cached = True  # too large to read: fail closed
            else:
                try:
                    with open(path, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                except OSError:
                    text = ""
                for item, value in parse_config(text):
                    lowered = item.lower()
                    if lowered.endswith((".extraheader", ".password", "token")) or (
                        value is not None and _URL_CREDENTIALS.search(value)
                    ):
                        cached = True
                        break
            if len(_CONFIG_CACHE) >= 256:
                _CONFIG_CACHE.clear()
            _CONFIG_CACHE[key] = cached
        if cached:
            return True
    return False


def _next_value(rest: list[Word], word: Word) -> str:
    """The value of the word after ``word`` in ``rest`` ("" when none or dynamic)."""
    for k, candidate in enumerate(rest):
        if candidate is word:
            return (rest[k + 1].value or "") if k + 1 < len(rest) else ""
    return ""


_ARCHIVE_FLAGS: Final = frozenset(
    {"-v", "--verbose", "-l", "--list", "--worktree-attributes", "--"}
)


def _archive_clear(j: Judge, rest: list[Word], top: str) -> bool:
    """Whether ``git archive TREE-ISH [PATH...]`` reaches no denied path: no commit git
    can reach (or that the command names) holds one under the paths (all of the tree
    when none is given, or when an option could take the next word as its value)."""
    git_dir = os.path.join(top, ".git")
    if not os.path.isdir(git_dir) or os.path.islink(git_dir):
        return False
    values = [w.value for w in rest]
    if any(v is None for v in values):
        return False
    operands: list[str] = []
    precise = True
    for value in values:
        assert value is not None
        if value.startswith("-"):
            if "=" not in value and value not in _ARCHIVE_FLAGS and not value[1:].isdigit():
                precise = False  # `--format tar`, `-o FILE`: the next word is a value
            continue
        operands.append(value)
    if not operands:
        return False
    prefixes: list[str] = []
    if precise and ":" not in operands[0]:
        for path in operands[1:]:
            relative = os.path.relpath(os.path.normpath(_here(j, path)), top)
            if relative == "." or relative.startswith("..") or any(c in path for c in "*?[\\:"):
                prefixes = []
                break
            prefixes.append(relative)
    return j.history_denied(git_dir, top, prefixes or [""], _object_ids(rest)) is False


def _names_denied(j: Judge, sub: str, word: str, value: str, top: str) -> bool:
    """DENY (and True) when ``value`` names, as a path or as ``REV:path``, a file the
    policy denies reading or a credential file."""
    for name in _git_path_candidates(value):
        first = normal_path(j.absolute(name))
        second = normal_path(j.absolute(name, top))
        # One check when both name the same path (the top is the working directory).
        for absolute in (first,) if second == first else (first, second):
            # Folded too, as the path sandbox matches (`HEAD:.ENV` is the committed `.ENV`
            # that `cat .ENV` may not read either).
            folded = fold_for_match(absolute)
            if (
                j.credential(absolute)
                or j.denied(absolute, absolute)
                or (folded != absolute and j.denied(folded, folded))
            ):
                j.deny(
                    f"git {sub} {short(word, 40)} reads {name} from the repository, "
                    "which policy denies reading"
                )
                return True
    return False


def _history(j: Judge, sub: str, rest: list[Word], *, elsewhere: bool = False) -> None:
    """Forms that print the content of committed or staged files without naming them
    (``git log -p``, ``git show <commit>``, ``git diff <rev>``, ``git diff --cached``,
    ``git grep PATTERN <rev>``, ``git format-patch`` ...): the repository keeps every
    version of a file the policy denies reading, and the run-time masks hide only the
    working copy (DEC-16). With any denied read, such a form is asked about (bypass-immune)
    unless neither the history git can reach nor the index holds a denied path under the
    form's pathspecs: a file pathspec that was a directory in older commits (``x/.env``),
    a directory, an exclusion or no pathspec reach what lies under them, ``--follow``
    crosses renames from any name. The history is read from the object store, never by
    running git (githistory.py)."""
    if not j.denied_read_globs:
        return
    contents = _prints_contents(j, sub, rest)
    if not contents and not _against_the_index(j, sub, rest):
        return
    top = repository_top(j)
    if not elsewhere and not os.path.lexists(os.path.join(top, ".git")):
        return  # not inside a repository (and none named): git prints nothing
    if not elsewhere and _history_clear(j, sub, rest, top, contents=contents):
        return
    if not contents:
        # `git diff`: the index's copy of a tracked file whose work-tree copy differs.
        # A denied file is masked by an empty file at run time, so it always differs.
        j.ask(
            f"git {sub} prints the committed copy of changed tracked files, and the index "
            "tracks a file policy denies reading (masked, so it shows as changed)",
            "high",
            immune=True,
        )
        return
    j.ask(
        f"git {sub} in this form prints the content of committed or staged files, "
        "including ones policy denies reading (name the files with `-- FILE`)",
        "high",
        immune=True,
    )


def _history_clear(j: Judge, sub: str, rest: list[Word], top: str, *, contents: bool) -> bool:
    """Whether neither the index nor (for ``contents`` forms) any commit git can reach
    holds a denied path under this form's pathspecs."""
    git_dir = os.path.join(top, ".git")
    if not os.path.isdir(git_dir) or os.path.islink(git_dir):
        return False  # a `.git` file or link: another git directory (asked)
    names, _ = _option_names(rest)
    if names & _UNREADABLE_REVISIONS:
        return False  # revisions from stdin, or submodules' own history
    prefixes = _reach_prefixes(j, sub, rest, top)
    if j.tracks_denied(git_dir, prefixes):
        return False
    if not contents:
        return True
    return j.history_denied(git_dir, top, prefixes, _object_ids(rest)) is False


# Options after which what git walks or prints is not in this repository's refs: revisions
# read from stdin; submodules' own histories.
_UNREADABLE_REVISIONS: Final = frozenset({"--stdin", "--submodule", "--recurse-submodules"})


def _reach_prefixes(j: Judge, sub: str, rest: list[Word], top: str) -> list[str]:
    """The leading directories (relative to ``top``) under which this form can print
    files: each plain pathspec (git matches a path and everything under it); ``""`` (the
    whole tree) when there is none, or for ``--follow`` (renames from any name), a
    revision with a path (``HEAD:sub``: pathspecs are then relative to that subtree), a
    glob or magic pathspec, or pathspecs that cannot be told. Exclusions only narrow."""
    whole = [""]
    names, _ = _option_names(rest)
    if "--follow" in names or any(":" in v for v in _before_dashes(rest, sub)):
        return whole
    pathspecs = _pathspecs(j, sub, rest)
    if pathspecs is None:
        return whole
    prefixes: list[str] = []
    for spec in pathspecs:
        if _excludes(spec):
            continue
        if spec.startswith(":"):
            return whole  # `:(top)`, `:/`, `:(glob)`, `:(icase)`, `:(attr:…)`: the superset
        if not spec or any(c in spec for c in "*?[\\"):
            return whole
        relative = os.path.relpath(os.path.normpath(_here(j, spec)), top)
        if relative == "." or relative.startswith(".."):
            return whole
        prefixes.append(relative)
    return prefixes or whole


def _excludes(spec: str) -> bool:
    """Whether a pathspec is an exclusion (``:!x``, ``:^x``, ``:(exclude,…)x``)."""
    if spec[:2] in (":!", ":^"):
        return True
    return spec.startswith(":(") and "exclude" in spec[2:].partition(")")[0].split(",")


_HEX_RUN: Final = re.compile(r"[0-9a-fA-F]{4,64}")


def _object_ids(rest: list[Word]) -> list[str]:
    """Every run of 4+ hex digits before ``--`` (``abc123~2``, ``a1b2..c3d4``,
    ``--ancestry-path=abc1``): object ids the command may name beyond the refs."""
    out: list[str] = []
    for word in rest:
        if word.value == "--":
            break
        if word.value is not None:
            out.extend(m.group() for m in _HEX_RUN.finditer(word.value))
    return out


# Options that make log-like commands print patches (file contents).
_PATCH_OPTIONS: Final = frozenset(
    {
        "-p",
        "-u",
        "--patch",
        "--cc",
        "-c",
        "--dd",
        "--patch-with-stat",
        "--patch-with-raw",
        "--binary",
        "--full-diff",
        "-W",
        "--function-context",
        "--textconv",
        # Merge diffs: `--diff-merges=on` prints patches of merges without `-p` (git
        # 2.39), `-m` does in later gits, `--remerge-diff` prints a patch form.
        "-m",
        "--remerge-diff",
        # Prints every added line with a whitespace error, in its commit (`-R` turns
        # the old side into the added one): content, not a summary.
        "--check",
    }
)
_PATCH_PREFIXES: Final = (
    "--diff-merges",
    "-U",
    "--unified",
    "--word-diff",
    "--color-words",
    "-L",
    "--inter-hunk-context",
    # The pickaxe (`log -G 'TOKEN=a'`, `diff-tree -S`) prints which commits' file
    # contents match a pattern: an oracle that spells a denied file out character by
    # character, with or without a patch.
    "-S",
    "-G",
)
# Options that replace a patch by a summary (show/diff print no content with them).
_SUMMARY_OPTIONS: Final = frozenset(
    {
        "-s",
        "--no-patch",
        "--stat",
        "--numstat",
        "--shortstat",
        "--name-only",
        "--name-status",
        "--raw",
        "--summary",
        "--dirstat",
        "--compact-summary",
        "--quiet",
        "--exit-code",
    }
)


_GREP_WORK_TREE: Final = frozenset({"--no-index", "--untracked", "--no-exclude-standard"})


def _grep_work_tree(j: Judge, rest: list[Word]) -> None:
    """``git grep --no-index|--untracked PATTERN [PATH...]`` searches the files of the
    work tree, untracked ones too (``.env`` among them), not the repository's objects:
    judged as the recursive read it is, of its pathspecs or of the directory it runs in
    (as ``grep -r PATTERN .`` is)."""
    names, _ = _option_names(rest)
    if not any(canonical(n, (_GREP_WORK_TREE,)) in _GREP_WORK_TREE for n in names):
        return
    values = [w.value for w in rest]
    paths = _before_dashes(rest, "grep")
    if not names & {"-e", "-f", "--and", "--or", "--not"} and paths:
        paths = paths[1:]  # the first operand is the pattern
    if "--" in values:
        paths += [v for v in values[values.index("--") + 1 :] if v is not None]
    for path in paths or ["."]:
        j.path(literal(path), write=False)


def _option_names(rest: list[Word]) -> tuple[set[str], bool]:
    """The options given before ``--`` (their names, values cut off) and whether any asks
    for a patch."""
    names: set[str] = set()
    patch = False
    for word in rest:
        value = word.value or ""
        if value == "--":
            break
        if not value.startswith("-") or value == "-":
            continue
        name = value.split("=", 1)[0]
        names.add(name)
        if name in _PATCH_OPTIONS or value.startswith(_PATCH_PREFIXES):
            patch = True
    return names, patch


def _prints_contents(j: Judge, sub: str, rest: list[Word]) -> bool:
    """Whether this git form prints file contents from commits, trees or the index."""
    names, patch = _option_names(rest)
    summary = bool(names & _SUMMARY_OPTIONS) or any(n.startswith("--stat") for n in names)
    operands = _operands(rest)
    if sub in ("log", "whatchanged", "reflog", "bisect"):
        return patch
    if sub == "status":
        return bool(names & {"-v", "--verbose", "-vv"})  # the staged diff
    if sub in ("diff-tree", "diff-index", "diff-files"):
        return patch
    if sub == "stash":
        return patch and bool(operands) and operands[0] in ("show", "list")
    if sub in ("format-patch", "range-diff"):
        return True
    if sub == "show":
        # `REV:path` operands name their files (judged one by one in _objects); anything
        # else (a commit, a tag, HEAD when none is given) shows a patch or an object.
        revisions = _before_dashes(rest, sub)
        # As git splits them: `:/init` and `HEAD^{/[:]*}` are commits (a patch), not
        # `REV:path` objects.
        unnamed = [v for v in revisions if split_revision(v) is None]
        if any(_HEX_LEAD.match(v) for v in unnamed):
            return True  # maybe a blob (`abcd1234^{}` too): printed whatever the options
        if revisions and not unnamed:
            return False  # only `REV:path` objects
        return patch or not summary
    if sub == "diff":
        if "--no-index" in names or (summary and not patch):
            return False
        if names & {"--cached", "--staged", "--merge-base"}:
            return True
        return any(not os.path.lexists(_here(j, v)) for v in _before_dashes(rest, sub))
    if sub == "grep":
        if names & {"--cached", "--untracked", "--no-index"}:
            return "--cached" in names
        revs = _before_dashes(rest, sub)
        if not names & {"-e", "-f", "--and", "--or", "--not"} and revs:
            revs = revs[1:]  # the first operand is the pattern
        return any(not os.path.lexists(_here(j, v)) for v in revs)
    return False


def _against_the_index(j: Judge, sub: str, rest: list[Word]) -> bool:
    """Whether this form prints the index's copy of changed tracked files (the work tree
    against the index: ``git diff``, ``git diff-files -p``)."""
    names, patch = _option_names(rest)
    summary = bool(names & _SUMMARY_OPTIONS) or any(n.startswith("--stat") for n in names)
    if sub == "diff":
        return "--no-index" not in names and (patch or not summary)
    return sub == "diff-files" and patch


def _operands(rest: list[Word]) -> list[str]:
    return [w.value for w in rest if w.value is not None and not w.value.startswith("-")]


def _before_dashes(rest: list[Word], sub: str = "") -> list[str]:
    """Operands before ``--`` (skipping the values of the options known to take one; an
    unknown option's value counts as an operand, which reads as a revision: the cautious
    side for the callers)."""
    takes_value = _GREP_VALUE_OPTIONS if sub == "grep" else _LOG_VALUE_OPTIONS
    out: list[str] = []
    skip = False
    for word in rest:
        value = word.value
        if value is None:
            continue
        if value == "--":
            break
        if skip:
            skip = False
            continue
        if value.startswith("-"):
            skip = value in takes_value
            continue
        out.append(value)
    return out


# Options that take the next word as their value.
_GREP_VALUE_OPTIONS: Final = frozenset(
    {"-e", "-f", "-A", "-B", "-C", "-m", "--max-count", "--max-depth", "--threads"}
)
_LOG_VALUE_OPTIONS: Final = frozenset({"-n", "--max-count", "--skip", "-S", "-G", "-O"})
# Options that take no value: with only these (and `--opt=value` forms) before the
# operands, an existing path among them is a pathspec without a `--`.
_FLAG_OPTIONS: Final = frozenset(
    {
        "-p",
        "-u",
        "--patch",
        "--stat",
        "--oneline",
        "--follow",
        "--cached",
        "--staged",
        "--name-only",
        "--name-status",
        "--no-color",
        "--color",
        "-w",
        "-i",
        "-n",
        "-l",
        "-v",
        "--all",
        "--reverse",
        "--graph",
        "--decorate",
        "--no-merges",
        "--first-parent",
    }
)


def _pathspecs(j: Judge, sub: str, rest: list[Word]) -> list[str] | None:
    """The pathspecs of a content-printing form: every word after ``--``; without one,
    the operands that name something that exists (git reads those as paths), but only
    when every option before them is a known flag (an option taking the next word as
    its value would make that word look like a pathspec). None: cannot tell."""
    values = [w.value for w in rest]
    if "--" in values:
        after = values[values.index("--") + 1 :]
        return None if any(v is None for v in after) else [v for v in after if v is not None]
    for value in values:
        if value is None:
            return None
        if value.startswith("-") and "=" not in value and value not in _FLAG_OPTIONS:
            if not (value[1:].isdigit() and sub != "grep"):  # `git log -3`
                return None
    operands = _before_dashes(rest, sub)
    if sub == "grep" and operands:
        operands = operands[1:]
    return [v for v in operands if os.path.lexists(_here(j, v))]


def _here(j: Judge, value: str) -> str:
    """``value`` as git reads an operand: from the directory the command runs in (after
    ``cd`` and ``git -C``), not the call's working directory."""
    return j.absolute(value, j.bases[-1])


def _glob_denied(j: Judge, pattern: str) -> bool:
    """Whether a pathspec glob could match a path the policy denies reading (compared
    by last component, both ways: ``*.env`` against ``.env``, ``.e*`` against ``.env*``)."""
    last = pattern.rstrip("/").rsplit("/", 1)[-1]
    if last.strip("*") == "":
        return False  # `*`, `**`: every file; the masks and the object-store ASK hold
    for glob in j.denied_read_globs:
        parts = [p for p in glob.split("/") if p and p != "**"]
        tail = parts[-1] if parts else ""
        if not tail or tail.strip("*") == "":
            continue
        if fnmatch.fnmatchcase(tail, last) or fnmatch.fnmatchcase(last, tail):
            return True
    return False


def _setting(j: Judge, key: str, how: str) -> None:
    key = key.lower()
    if not key.startswith(lists.BENIGN_GIT_CONFIG_PREFIXES):
        j.deny(f"{how} {key} can make git run commands")


def _read_only(j: Judge, sub: str, values: list[str | None], first: str | None) -> bool:
    """Whether this form of a possibly-read-only git subcommand only reads."""
    flags = {v for v in values if v is not None and v.startswith("-")}
    positionals = [v for v in values if v is None or not v.startswith("-")]
    if sub == "branch":
        listing = {
            "--list",
            "-l",
            "-a",
            "--all",
            "-r",
            "--remotes",
            "--show-current",
            "--contains",
            "--merged",
            "--no-merged",
            "--points-at",
        }
        writing = {
            "-d",
            "-D",
            "-m",
            "-M",
            "-c",
            "-C",
            "--delete",
            "--move",
            "--copy",
            "-u",
            "--set-upstream-to",
            "--unset-upstream",
            "--edit-description",
            "-f",
            "--force",
        }
        return not (flags & writing) and (not positionals or bool(flags & listing))
    if sub == "tag":
        listing = {"-l", "--list", "--contains", "--points-at", "--merged", "--no-merged"}
        writing = {
            "-d",
            "--delete",
            "-a",
            "-s",
            "-u",
            "-m",
            "-F",
            "-f",
            "--force",
            "--annotate",
            "--sign",
        }
        return not (flags & writing) and (not positionals or bool(flags & listing))
    if sub == "stash":
        return first in ("list", "show")  # bare `git stash` pushes
    if sub == "remote":
        return first in (None, "get-url")
    if sub == "worktree":
        return first == "list"
    if sub == "notes":
        return first in (None, "list", "show")
    if sub == "reflog":
        return first in (None, "show")
    if sub == "symbolic-ref":
        return len(positionals) <= 1 and not flags & {"-d", "--delete"}
    if sub == "submodule":
        return first in (None, "status", "summary")
    if sub == "bisect":
        return first in ("log", "view", "visualize")
    if sub == "format-patch":
        return "--stdout" in flags
    if sub == "archive":
        return not any(v and v.startswith(("-o", "--output")) for v in values)
    if sub == "fsck":
        return "--lost-found" not in flags
    if sub == "config":
        reading = {
            "--get",
            "--get-all",
            "--get-regexp",
            "--get-urlmatch",
            "--list",
            "-l",
            "--get-color",
            "--get-colorbool",
        }
        if flags & reading or first in ("get", "list"):
            return True
        names = [p for p in positionals if p is not None]
        if first == "set" and len(names) >= 2:
            names = names[1:]
        elif len(names) <= 1 and not flags & {
            "--unset",
            "--unset-all",
            "--add",
            "--replace-all",
            "--edit",
            "-e",
            "--rename-section",
            "--remove-section",
        }:
            return True  # `git config user.name` reads one key
        key = names[0] if names else ""
        _setting(j, key, "git config")
        j.effect("git config changes the repository configuration")
        return False
    return True


def layouts(j: Judge) -> None:
    """Writes of one command line that together lay out a git directory
    (``mkdir -p r/objects r/refs; touch r/HEAD``): each alone passes the sandbox's
    check, which sees the tree as it is before the command runs."""
    if not j.sandbox.protects_git or len(j.writes) < 2:
        return
    entries: dict[str, set[str]] = {}
    for written in j.writes:
        here = written
        while j.sandbox.root_for(here) is not None:
            parent = os.path.dirname(here)
            if parent == here:
                break
            entries.setdefault(parent, set()).add(os.path.basename(here))
            here = parent
    for parent, names in entries.items():
        markers = names & GIT_LAYOUT_MARKERS
        if not markers:
            continue
        present = {m for m in GIT_LAYOUT_MARKERS if os.path.lexists(os.path.join(parent, m))}
        if len(markers | present) >= 2:
            j.deny(
                f"writes {', '.join(sorted(markers))} in {parent}: together they lay out a "
                "git directory (a bare repository git would read config and hooks from)"
            )
            return


_GIT_DENY_ANYWHERE: Final = frozenset(
    {
        "--upload-pack",
        "--receive-pack",
        "--exec",
        "--exec-path",
        "--ext-diff",
        "--template",
        "--extcmd",
        "--config-env",
    }
)


# send-email options whose value is a command it runs (prefixes: git takes abbreviations).
_SEND_EMAIL_RUNNERS: Final = ("--sendmail", "--to-c", "--cc-c", "--header")


_GIT_FILE_READERS: Final = frozenset({"commit", "tag", "merge", "notes", "grep", "commit-tree"})


_GIT_CONTENT_SUBCOMMANDS: Final = frozenset(
    {
        "show",
        "log",
        "diff",
        "grep",
        "archive",
        "blame",
        "annotate",
        "cat-file",
        "diff-tree",
        "diff-index",
        "diff-files",
        "whatchanged",
        "format-patch",
        "range-diff",
        "stash",
        "checkout",
        "restore",
    }
)


# An object id, alone or with a suffix that keeps naming that object (`abcd1234^{}`,
# `abcd1234^{blob}`, `abcd1234@{0}`): a blob git prints whatever the options.
_HEX_LEAD: Final = re.compile(r"[0-9a-fA-F]{4,64}(?:[\^~@{]|\Z)")


_GIT_STAGE: Final = re.compile(r"[0-3]:")


def split_revision(value: str) -> tuple[str, str] | None:
    """git's own reading of an object name (object-name.c), as ``(rev, path)``: ``:path``
    and ``:N:path`` name the index's copy; ``:/regex`` a commit by its message (no path);
    otherwise ``REV:path`` splits at the first colon *outside braces*, so
    ``HEAD^{/a:b}:.env`` and ``HEAD@{12:00}:.env`` read ``.env``, and ``HEAD^{/[:]*}``
    (a commit found by a regex holding a colon) names no path at all. None: no path."""
    if value.startswith(":"):
        if len(value) > 2 and value[1] == "/":
            return None
        if len(value) >= 3 and value[2] == ":" and value[1] in "0123":
            return "", value[3:]
        return "", value[1:]
    if ":" not in value:
        return None
    depth = 0
    for k, c in enumerate(value):
        if c == "{":
            depth += 1
        elif depth and c == "}":
            depth -= 1
        elif not depth and c == ":":
            return value[:k], value[k + 1 :]
    return None


def _git_path_candidates(value: str) -> list[str]:
    """The paths a git argument may name: the word itself (a pathspec), the path git
    itself splits off a ``REV:path`` (:func:`split_revision`), the part after the first
    ``:`` of ``REV:path`` / ``:N:path``, without pathspec magic (``:(top)``, ``:!``,
    ``:/``)."""
    names: list[str] = []
    if ":" in value and not value.startswith(":"):
        split = split_revision(value)
        if split is not None and split[1]:
            names.append(split[1])
    if ":" in value:
        rev, _, path = value.partition(":")
        if rev.startswith("(") or not rev:
            # `:(top,glob)x`, `:!x`, `:/x`, `:0:x`, `:x`
            path = value[1:]
            if path.startswith("("):
                path = path.partition(")")[2]
            if _GIT_STAGE.match(path):
                path = path[2:]
            path = path.lstrip("!^/")
        names.append(path)
    names.append(value)
    return [n for n in names if n and n not in (".", "/")]


_GIT_LONG: Final = frozenset(
    {o for o in lists.GIT_DENY_OPTIONS if o.startswith("--")}
    | lists.GIT_FILTER_OPTIONS
    | {
        "--output",
        "--output-directory",
        "--separate-git-dir",
        "--prefix",
        "--file",
        "--config",
        "--reference",
        "--git-dir",
        "--work-tree",
        "--no-index",
        "--contents",
        "--remote",
        "--web",
        "--info",
        "--man",
    }
)
