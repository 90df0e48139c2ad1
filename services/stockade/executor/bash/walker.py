"""The walk over a parsed script (SPEC EXE-8): every simple command, redirection and
assignment, wrappers looked through, each command handed to the judge of its program
family (judges/), paths judged with the path sandbox; the findings are kept here and
folded into one verdict by the analyzer.

The walker is the one implementation of :class:`~stockade.executor.bash.findings.Judge`.
What does not change from one command line to the next (the credential patterns of a
home directory, the policy's denied reads compiled) comes in a :class:`WalkContext` the
analyzer keeps, so a walk only allocates what the command needs.
"""

from __future__ import annotations

import fnmatch
import glob as globmod
import itertools
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from stockade.executor.bash import lists
from stockade.executor.bash.braces import MAX_BRACE_GROUPS, MAX_BRACE_WORDS
from stockade.executor.bash.explain import Finding
from stockade.executor.bash.findings import (
    Judge,
    Risk,
    ShellState,
    expanded,
    matches_basename,
    normal_path,
    short,
    word_text,
)
from stockade.executor.bash.githistory import HistoryCache, history_holds_denied
from stockade.executor.bash.gitindex import tracked_paths
from stockade.executor.bash.globsyntax import python_glob
from stockade.executor.bash.judges import git, interpreters, readers, variables, writes
from stockade.executor.bash.options import canonical, literal, may_split, split_option
from stockade.executor.bash.parser import ParsedScript, RawCommand, Word
from stockade.executor.bash.patterns import (
    SECRET_BASENAMES,
    brace_expand,
    compile_globs,
    credential_patterns,
)
from stockade.executor.confine.env import SAFE_PATH
from stockade.executor.paths import PathDecision, PathSandbox

__all__ = ["SimpleCommand", "WalkContext", "Walker"]

# The tables of lists.py read while judging every command, bound once as Finals: mypyc reads
# a Final of this module as a C static, where ``lists.NAME`` looks the name up on the module
# object each time (PERF-4a).
_CREDENTIAL_BASENAMES: Final = lists.CREDENTIAL_BASENAMES
_DENY_COMMANDS: Final = lists.DENY_COMMANDS
_EVAL_COMMANDS: Final = lists.EVAL_COMMANDS
_INTERPRETERS: Final = lists.INTERPRETERS
_NETWORK_COMMANDS: Final = lists.NETWORK_COMMANDS
_PACKAGE_MANAGERS: Final = lists.PACKAGE_MANAGERS
_SAFE_COMMANDS: Final = lists.SAFE_COMMANDS
_SAFE_DEVICES: Final = lists.SAFE_DEVICES
_SHELLS: Final = lists.SHELLS
_SYSTEM_BIN_DIRS: Final = lists.SYSTEM_BIN_DIRS
_VARIABLE_BUILTINS: Final = lists.VARIABLE_BUILTINS
_WRAPPERS: Final = lists.WRAPPERS
_WRITE_COMMANDS: Final = lists.WRITE_COMMANDS

# A glob inside the roots is expanded to check what it really names (a symlink planted in
# the workspace); past this many matches the command is asked about instead.
_MAX_GLOB_MATCHES: Final = 256
# ... and at most this many globs are expanded per command line (bounds the time taken).
_MAX_GLOBS: Final = 32
# Working directories a line may change into (`cd`, `pushd`, `git -C` ...) and still have
# every later relative path judged from each of them. Every path is judged once per
# directory, so without a bound `cd d; cat f; cd d; cat f; ...` costs the square of the
# line's length (cubed: each directory is deeper), minutes within MAX_COMMAND_CHARS; past
# the bound the line is asked about (bypass-immune), never allowed unchecked.
_MAX_BASES: Final = 8
# Passes over the commands before a line's last change of directory (Walker.revisit).
_MAX_REVISITS: Final = 3
# (glob, written path) pairs compared by created_then_globbed: each glob against each
# write is the square of the line's length (`touch n1 ... n3000; ls x*1 ... x*3000` took
# minutes); past the bound the line is asked about, bypass-immune.
_MAX_GLOB_WRITE_PAIRS: Final = 4096


def _jobs_command(args: list[Word]) -> list[Word]:
    """The command ``jobs -x CMD ARGS`` runs (bash's jobs builtin: options ``-lpnxrs``
    bundled or not, up to ``--`` or the first operand); [] without ``-x`` (the operands
    are then jobspecs)."""
    runs = False
    for k, word in enumerate(args):
        value = word.value
        if value == "--":
            return args[k + 1 :] if runs else []
        if value is None or not value.startswith("-") or value == "-":
            return args[k:] if runs else []
        runs = runs or "x" in value[1:]
    return []


_VAR_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SIMPLE_REFERENCE: Final = re.compile(
    r'"?\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})"?'
)
_MAX_VARIANTS: Final = 16
_NO_WILDCARD: Final = frozenset("*?[")
_WILDCARD: Final = re.compile(r"[*?\[]")
# Reserved words that end or continue a compound command: never a simple command's name
# to bash when unquoted in command position (`{`, `if`, `while` … start compound
# commands the grammar parses as such; these it reads as names only when it misparses).
_RESERVED_WORDS: Final = frozenset({"}", "do", "done", "then", "fi", "elif", "else", "esac", "in"})


# bash's builtins (`compgen -b`, bash 5.2): a function may shadow one, and bash still runs
# the builtin where the function is not defined or is bypassed (`builtin cd`, `command`).
_BASH_BUILTINS: Final = frozenset(
    ". : [ alias bg bind break builtin caller cd command compgen complete compopt continue "
    "declare dirs disown echo enable eval exec exit export false fc fg getopts hash help "
    "history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly "
    "return set shift shopt source suspend test times trap true type typeset ulimit umask "
    "unalias unset wait".split()
)


def _program_or_builtin(name: str) -> bool:
    """Whether ``name`` also names a program or builtin bash would run when no function of
    that name is defined at that moment: a function defined later, in a subshell, on a
    branch not taken or inside another function, one unset again (`unset -f`), or bypassed
    (`command X`, `env X`, `exec X`, `/usr/bin/X`) runs the real thing. Such a call is
    judged as the program; only a name nothing else answers to is the function's alone."""
    return (
        name in _BASH_BUILTINS
        or name in _SAFE_COMMANDS
        or name in _WRITE_COMMANDS
        or name in _PACKAGE_MANAGERS
        or shutil.which(name, path=SAFE_PATH) is not None
    )


def _may_match(written: str, pattern: str, directory: str) -> bool:
    """Whether the written path ``written`` (a file, or a directory whose contents are
    unknown) can be, or contain, a match of the absolute glob ``pattern`` whose fixed
    part ends in ``directory``."""
    if fnmatch.fnmatchcase(written, pattern):
        return True
    if written == directory or directory.startswith(written.rstrip("/") + "/"):
        return True  # a directory the line writes into (tar x, cp -r) holds the matches
    if written.startswith(directory.rstrip("/") + "/"):
        # Written below the glob's fixed part: a match if some prefix of it matches.
        parts = written[len(directory.rstrip("/")) + 1 :].split("/")
        probe = directory.rstrip("/")
        for part in parts:
            probe = f"{probe}/{part}"
            if fnmatch.fnmatchcase(probe, pattern):
                return True
    return False


def _glob_matches(pattern: str, limit: int) -> list[str]:
    """The first ``limit`` paths ``glob.iglob(pattern)`` yields, in its order.

    The common shape (``src/*.py``: wildcards in the last component only) is listed here
    as glob lists it: one directory read, hidden names only for a hidden pattern, names
    kept by fnmatch; any other shape goes to glob itself."""
    directory, name = os.path.split(pattern)
    if not directory or not globmod.has_magic(name) or globmod.has_magic(directory):
        return list(itertools.islice(globmod.iglob(pattern), limit))
    names: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                names.append(entry.name)
    except OSError:
        pass  # as glob: what was read before the error counts, nothing when none was
    if name[0] != ".":
        names = [n for n in names if n[0] != "."]
    return [os.path.join(directory, n) for n in fnmatch.filter(names, name)[:limit]]


def _wide_glob_matches(pattern: str, limit: int) -> list[str]:
    """What the glob may match after ``shopt -s dotglob nocaseglob globstar`` or a
    ``GLOBIGNORE`` (which turns dotglob on): hidden names too, any letter case (a bracket
    expression stands for any one character), ``**`` through directories. A superset of
    bash's matches."""
    out: list[str] = []
    k = 0
    while k < len(pattern):
        char = pattern[k]
        close = pattern.find("]", k + 2) if char == "[" else -1
        if close != -1 and "/" not in pattern[k:close]:
            out.append("?")
            k = close + 1
            continue
        out.append(f"[{char.lower()}{char.upper()}]" if char.isalpha() else char)
        k += 1
    folded = "".join(out)
    return list(itertools.islice(globmod.iglob(folded, recursive=True, include_hidden=True), limit))


@dataclass(frozen=True)
class SimpleCommand:
    """One simple command after normalisation (DEC-1, DEC-2)."""

    name: str
    """Normalised command name: wrappers and ``VAR=x`` looked through, path reduced to its
    basename (``/tmp/git`` → ``git``, ``env X=1 nice git`` → ``git``)."""
    argv: tuple[str, ...]
    """The words after the name (quote-removed where static, source text otherwise)."""
    text: str
    """``name`` and ``argv`` joined by spaces: what rules like ``run_bash(git status*)``
    match per sub-command."""

    # Written out (dataclass keeps an __init__ the class defines): compiled with mypyc, the
    # generated one is an interpreted function (about 15x slower), and one is made for
    # every simple command.
    def __init__(self, name: str, argv: tuple[str, ...], text: str) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "text", text)


def _too_many_brace_words(args: Sequence[Word]) -> bool:
    """Whether a word's brace expansion was refused for its size (``braces == ()``)."""
    for word in args:
        braces = word.braces
        if braces is not None and not braces:
            return True
    return False


def _under_any(path: str, prefixes: Sequence[str]) -> bool:
    """Whether ``path`` is one of ``prefixes`` or lies under one (``""``: everything)."""
    return any(not p or path == p or path.startswith(p + "/") for p in prefixes)


def _union_of_fnmatch(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """One regex that matches what ``fnmatch.fnmatchcase`` of any of ``patterns`` matches
    (each alternative is fnmatch's own translation, anchored at both ends); None when the
    translations cannot be joined (the caller then compares pattern by pattern)."""
    if not patterns:
        return None
    try:
        return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))
    except re.error:  # pragma: no cover - fnmatch's translations carry no group names
        return None


class WalkContext:
    """What every walk with the same home directory and denied reads shares (compiled
    once by the analyzer, not per command line)."""

    __slots__ = (
        "credential_globs",
        "credential_re",
        "denied_re",
        "denied_read_globs",
        "glob_flats",
        "glob_flats_re",
        "history",
        "home",
        "index_verdicts",
    )

    def __init__(self, home: str, denied_read_globs: Sequence[str]) -> None:
        self.home = home
        self.denied_read_globs = tuple(denied_read_globs)
        self.credential_globs = tuple(credential_patterns(home))
        self.credential_re = compile_globs(self.credential_globs)
        self.denied_re = compile_globs(self.denied_read_globs) if self.denied_read_globs else None
        # Walker.glob_credentials compares a glob with each of these, both ways; the
        # patterns as one regex tell in one call that no pattern matches the glob's text.
        self.glob_flats = tuple(
            (p, p.replace("**", "*")) for p in (*self.credential_globs, *self.denied_read_globs)
        )
        self.glob_flats_re = _union_of_fnmatch([flat for _, flat in self.glob_flats])
        # git index file identity (path, inode, size, mtime) -> it tracks a denied path.
        self.index_verdicts: dict[tuple[str, int, int, int, tuple[str, ...]], bool] = {}
        # What was learned from git objects (immutable): commits, trees holding denied paths.
        self.history = HistoryCache()


class Walker(Judge):
    """Judges one parsed script; holds the findings while it goes."""

    def __init__(
        self,
        sandbox: PathSandbox,
        network_enabled: bool,
        context: WalkContext,
        parsed: ParsedScript,
    ) -> None:
        self.sandbox = sandbox
        self.network_enabled = network_enabled
        self.context = context
        self.denied_read_globs = context.denied_read_globs
        self.parsed = parsed
        self.shell = ShellState(parsed)
        self.functions = frozenset(parsed.functions)
        self.home = context.home
        self.findings: list[Finding] = []
        self.commands: list[SimpleCommand] = []
        self.reads: dict[str, None] = {}
        self.writes: dict[str, None] = {}
        self.needs_network = False
        self.side_effects = False
        self.bases: list[str] = [sandbox.cwd]
        self.too_many_bases = False
        self.revisiting = False
        """Walker.revisit is judging commands again (a cd then only follows directories
        that exist)."""
        self.bases_version = 0
        """Counts the changes of ``bases``: a path judged before a change is judged again."""
        self.checked: dict[tuple[str, bool], PathDecision] = {}
        """The sandbox's decisions by (path, write): this walk only (see :meth:`check`)."""
        self.known_dirs: set[str] = set()
        """Directories found to exist without symlinks by this walk's path checks (see
        PathSandbox.check): one analysis only, a new walk starts empty."""
        self.repository_tops: dict[str, str] = {}
        """git repository tops by working directory (judges/git.py): this walk only."""
        self.globs_expanded = 0
        self.judged_paths: dict[tuple[str, str | None, bool, int], str | None] = {}
        self.creates_links = False
        self.env_cleared = False
        """The command being judged runs with the environment cleared (``env -i``)."""
        self.globs: list[tuple[str, str]] = []
        """Every unquoted glob of the line: (absolute pattern, as written)."""
        self._current: str | None = ""
        self._current_raw: RawCommand | None = None
        self._credential_re = context.credential_re
        self._denied_re = context.denied_re

    @property
    def current(self) -> str:
        """The command being judged, as findings name it (``""``: the line as a whole)."""
        label = self._current
        if label is None:
            # Made when a finding first asks for it (most commands make none).
            # List comprehensions rather than generators: a generator resumes once per word.
            raw = self._current_raw
            label = (
                "" if raw is None else short(" ".join([raw.name.text, *[a.text for a in raw.args]]))
            )
            self._current = label
        return label

    @current.setter
    def current(self, label: str) -> None:
        self._current = label
        self._current_raw = None

    def deny(self, reason: str) -> None:
        """Refuse the command line (reason labelled with the current command)."""
        self.findings.append(Finding("deny", reason, "high", False, self.current))

    def ask(self, reason: str, risk: Risk = "medium", *, immune: bool = False) -> None:
        """Ask a person; ``immune``: no allow rule or bypass mode may settle it."""
        self.findings.append(Finding("ask", reason, risk, immune, self.current))

    def effect(self, reason: str, risk: Risk = "medium", *, immune: bool = False) -> None:
        """An ASK because the command changes something (it is not read-only)."""
        self.side_effects = True
        self.ask(reason, risk, immune=immune)

    def run(self) -> None:
        """Judge the whole script: every command, redirection and assignment, then the
        checks that need the whole line."""
        variables.shell_options(self)
        commands = self.parsed.commands
        last_move = -1
        for k, raw in enumerate(commands):
            version = self.bases_version
            self.command(raw)
            if self.bases_version != version:
                last_move = k
        if last_move > 0:
            self.revisit(commands[:last_move])
        self.current = ""
        for redirect in self.parsed.redirects:
            self.redirect(redirect.op, redirect.target)
        for assignment in self.parsed.assignments:
            value = assignment.value.value if assignment.value is not None else None
            exported = assignment.kind in ("prefix", "export")
            variables.assignment(self, assignment.name, value, exported=exported)
            if assignment.name in variables.ARITHMETIC_SPECIALS and (
                value is not None or "=" in assignment.raw or assignment.kind == "statement"
            ):
                # (a declaration without a value, `local OPTIND`, assigns nothing)
                self.shell.integer_names.add(assignment.name)
        # The whole-line checks, each called only when the line has what it looks at
        # (each returns at once otherwise; most lines have none of these).
        parsed = self.parsed
        if parsed.evaluated_texts:
            for text in dict.fromkeys(parsed.evaluated_texts):
                self.deny(f"the text {short(text, 40)!r} is evaluated by bash as code later")
        if parsed.recursive_functions:
            for name in dict.fromkeys(parsed.recursive_functions):
                self.deny(f"function {name!r} calls itself (fork-bomb shape)")
        if parsed.arithmetic_names or self.shell.integer_names:
            variables.arithmetic(self)
        if parsed.assignments:
            variables.file_variables(self)
        if len(self.writes) >= 2:
            git.layouts(self)
        if self.globs or self.creates_links:
            self.created_then_globbed()

    def revisit(self, commands: Sequence[RawCommand]) -> None:
        """Judge again, from every directory the line can be in, the commands that come
        before its last change of directory. A function body runs where the function is
        called and a loop body runs again after the directory changes (`f() { cat key; };
        cd secret; f`, `for d in a secret; do cat key; cd $d; done` read secret/key),
        while the first pass judged them from the directories known when they were
        reached. Repeated while the directories grow (a `cd` in a loop goes deeper on
        every turn); past that the line is asked about, bypass-immune."""
        recorded = len(self.commands)
        before = len(self.findings)
        self.revisiting = True
        try:
            for _ in range(_MAX_REVISITS):
                version = self.bases_version
                for raw in commands:
                    self.command(raw)
                if self.bases_version == version:
                    break
            else:
                self.ask(
                    "changes directory again and again (a loop or a function): the "
                    "directories later commands run in are not all known",
                    "high",
                    immune=True,
                )
        finally:
            self.revisiting = False
        del self.commands[recorded:]  # recorded in the first pass
        if len(self.findings) > before:
            seen = set(self.findings[:before])
            fresh = [f for f in dict.fromkeys(self.findings[before:]) if f not in seen]
            self.findings[before:] = fresh

    def created_then_globbed(self) -> None:
        """A glob is checked against the files present when the line is judged; a file,
        link or directory the same line writes can become one of its matches at run time
        (`touch -- -delete; find *`, `tar x ...; cat *`). When a written path could match
        a glob of the line, or lies where the glob looks, the ASK is bypass-immune; so is
        a line that makes a link and reads files in another command (a link resolves
        from its own directory at run time, through whatever is there then)."""
        if self.creates_links and len(self.commands) > 1 and self.reads:
            self.ask(
                "makes a link and reads files in the same line: where the link leads is "
                "only known at run time",
                "high",
                immune=True,
            )
            return
        if (
            self.globs
            and self.writes
            and len(self.globs) * len(self.writes) > _MAX_GLOB_WRITE_PAIRS
        ):
            self.ask(
                f"writes {len(self.writes)} paths and expands {len(self.globs)} globs in the "
                "same line: too many to check which the line itself creates",
                "high",
                immune=True,
            )
            return
        for pattern, value in self.globs:
            head = pattern
            for k, char in enumerate(pattern):
                if char in "*?[":
                    head = pattern[:k]
                    break
            directory = head.rsplit("/", 1)[0] or "/"
            for written in self.writes:
                if _may_match(written, pattern, directory):
                    self.ask(
                        f"writes {written} and expands the glob {value} in the same line: "
                        "what the glob matches (and what that points to) is only known at "
                        "run time",
                        "high",
                        immune=True,
                    )
                    return

    def redirect(self, op: str, target: Word | None) -> None:
        """A redirection: a read of its source or a write of its target (fd duplication is
        neither)."""
        if target is None or op in ("<<", "<<<"):
            return
        value = target.value
        if op in (">&", "<&") and value is not None and (value.isdigit() or value == "-"):
            return  # fd duplication or closing (2>&1, >&-)
        if op in ("<", "<&"):
            self.path(target, write=False)
            return
        if self.path(target, write=True, what="redirects output to") is not None:
            self.effect(f"redirects output to {word_text(target)}", "low")

    def command(self, raw: RawCommand) -> None:
        """Judge one simple command of the script."""
        # The command's label (``current``) is made from ``raw`` when a finding needs it.
        self._current = None
        self._current_raw = raw
        # Prefix assignments (`X=1 cmd`) are judged with all the others in run().
        if raw.name.braces:
            # `{rm,-rf,x}` is `rm -rf x` to bash: obfuscation, refused; recorded as bash
            # will run it.
            words = expanded([raw.name, *raw.args])
            self.deny(f"brace expansion in command position {raw.name.text!r}")
            self.record(word_text(words[0]), words[1:])
            return
        if raw.name.value in _RESERVED_WORDS and not raw.name.quoted:
            # bash reads this word as a reserved word where the grammar saw a command
            # name: the two disagree on the script's shape (`coproc x { rm -rf /; }` is a
            # coprocess running rm to bash, a command `x` with arguments and a command `}`
            # to the grammar), so what bash runs is not what was judged (EXE-8a).
            self.deny(
                f"{raw.name.value!r} is a bash reserved word here, parsed as a command name: "
                "the parser and bash disagree on what this line runs"
            )
        resolved = self.resolve_name(raw.name)
        args = expanded(raw.args)
        if _too_many_brace_words(raw.args):
            self.deny(
                f"a brace expansion makes more than {MAX_BRACE_WORDS} words or has more than "
                f"{MAX_BRACE_GROUPS} braces (refused, not judged word by word)"
            )
        if resolved is None:
            self.record(word_text(raw.name), args)
            return
        name, by_path = resolved
        for word in args:
            value = word.value
            if word.glob and value and not _NO_WILDCARD.isdisjoint(value):
                pattern = python_glob(self.expand(value), mixed_quoting=word.quoted)
                self.globs.append((normal_path(self.absolute(pattern, self.bases[-1])), value))
        for variant in self.variants(args):
            self.glob_options(variant)
            self.words(name, by_path, variant, raw, stdin_args=False)

    def variants(self, args: list[Word]) -> list[list[Word]]:
        """``args`` with each ``$f``/``"$f"`` whose every value is known here (a loop over
        static words: ``for f in a.txt b.txt; do wc -l "$f"; done``) replaced by each value
        in turn; ``[args]`` when there is none or too many combinations."""
        for word in args:
            if word.value is None:
                break
        else:
            return [args]  # (a loop: no list made for the common case, every word static)
        choices: list[tuple[int, list[Word]]] = []
        combinations = 1
        for k, word in enumerate(args):
            if word.value is not None:
                continue
            match = _SIMPLE_REFERENCE.fullmatch(word.text)
            if match is None:
                continue
            quoted = word.text.startswith('"')
            values = self.known_values(match.group(1) or match.group(2), quoted)
            if values is None:
                continue
            choices.append((k, values))
            combinations *= len(values)
        if not choices or combinations > _MAX_VARIANTS:
            return [args]
        out: list[list[Word]] = []
        for picked in itertools.product(*(values for _, values in choices)):
            variant = list(args)
            for (k, _), word in zip(choices, picked, strict=True):
                variant[k] = word
            out.append(variant)
        return out

    def known_values(self, name: str, quoted: bool) -> list[Word] | None:
        """The words ``$name`` can become, when the script gives every value it can hold."""
        if self.shell.static_values is None:
            self.shell.static_values = variables.static_values(self.parsed)
        values = self.shell.static_values.get(name)
        if not values or name in self.shell.runtime_values:
            return None
        if not quoted and "IFS" in self.shell.static_values:
            return None  # the script changes how unquoted values split
        words: list[Word] = []
        for value in values:
            if not quoted and (not value or any(c in value for c in " \t\n")):
                return None  # word splitting: one value, several words (or none)
            glob = not quoted and any(c in value for c in "*?[")
            words.append(Word(value, value, quoted, False, glob))
        return words

    def glob_options(self, args: list[Word]) -> None:
        """An unquoted glob that starts with a wildcard (``*``, ``?x``, ``[-]*``) can expand
        to a word starting with ``-``, which the command reads as an option (a file named
        ``-delete`` turns ``find *`` into a deletion): look at what it expands to now, and
        ask when any match starts with ``-`` (EXE-8c)."""
        for word in args:
            if word.value == "--":
                return
            value = word.value
            if not word.glob or value is None or not value or value[0] not in "*?[":
                continue
            if "/" in value.rstrip("/"):
                head = value.split("/", 1)[0]
                if not any(c in head for c in "*?["):
                    continue
            self.globs_expanded += 1
            if self.globs_expanded > _MAX_GLOBS:
                self.ask("too many globs to check each of them", immune=True)
                return
            for base in dict.fromkeys(self.bases):
                pattern = os.path.join(
                    globmod.escape(base), python_glob(value, mixed_quoting=word.quoted)
                )
                found = (
                    _wide_glob_matches(pattern, _MAX_GLOB_MATCHES)
                    if self.shell.wide_globs
                    else itertools.islice(globmod.iglob(pattern), _MAX_GLOB_MATCHES)
                )
                for match in found:
                    relative = os.path.relpath(match, base)
                    if relative.startswith("-"):
                        self.ask(
                            f"the glob {value} expands to {relative!r}, which the command "
                            "reads as an option",
                            "high",
                            immune=True,
                        )
                        return

    def resolve_name(self, word: Word) -> tuple[str, bool] | None:
        """Normalise a command-name word; None (after a DENY) when it is obfuscated."""
        value = word.value
        if value is None:
            self.deny("a variable or substitution in command position hides the command")
            return None
        if word.quoted:
            self.deny(f"quoted or escaped command name {word.text!r} (obfuscation)")
            return None
        if word.glob:
            self.deny(f"glob or brace expansion in command position {word.text!r}")
            return None
        if not value:
            self.deny("empty command name")
            return None
        if "/" in value:
            base = value.rstrip("/").rsplit("/", 1)[-1]
            directory = os.path.dirname(value) or "/"
            return base, os.path.normpath(directory) not in _SYSTEM_BIN_DIRS
        return value, False

    def record(self, name: str, args: Sequence[Word]) -> None:
        """Record a simple command for rule matching (DEC-2)."""
        argv = tuple([a.value if a.value is not None else a.text for a in args])
        self.commands.append(SimpleCommand(name, argv, " ".join((name, *argv))))

    def words(
        self, name: str, by_path: bool, args: list[Word], raw: RawCommand, *, stdin_args: bool
    ) -> None:
        """Judge ``name args``: look through wrappers, then dispatch on the command."""
        cleared = self.env_cleared
        try:
            self._words(name, by_path, args, raw, stdin_args=stdin_args)
        finally:
            self.env_cleared = cleared  # `env -i` reaches the command it wraps only

    def _words(
        self, name: str, by_path: bool, args: list[Word], raw: RawCommand, *, stdin_args: bool
    ) -> None:
        if name == "jobs" and not by_path:
            inner = _jobs_command(args)
            if inner:
                # `jobs -x CMD ARGS` runs CMD (its jobspecs replaced by process group ids).
                self.record(name, args)
                resolved = self.resolve_name(inner[0])
                if resolved is None:
                    self.record(word_text(inner[0]), inner[1:])
                    return
                (name, by_path), args = resolved, inner[1:]
        while name in _WRAPPERS and not by_path:
            spec = _WRAPPERS[name]
            if spec.assignments:
                # `env -i GIT_TRACE=/path git status`: the file the variable names (EXE-8e).
                skip = False
                for word in args:
                    text = word.value
                    if skip or (text is not None and text.startswith("-") and text != "-"):
                        skip = not skip and text in spec.value_options
                        continue
                    if text is None or "=" not in text:
                        break
                    var, _, assigned = text.partition("=")
                    if not _VAR_NAME.match(var):
                        break
                    variables.file_variable(self, var, literal(assigned))
            unwrapped = self.unwrap(name, args)
            if unwrapped is None:
                self.record(name, args)
                return
            inner, stdin = unwrapped
            if not inner:
                break  # the wrapper alone (`env`, `command -v x`, `exec >log`)
            resolved = self.resolve_name(inner[0])
            if resolved is None:
                self.record(word_text(inner[0]), inner[1:])
                return
            name, by_path = resolved
            args = inner[1:]
            stdin_args = stdin_args or stdin
        self.record(name, args)
        self.dispatch(name, by_path, args, raw, stdin_args)

    def unwrap(self, name: str, args: list[Word]) -> tuple[list[Word], bool] | None:
        """The wrapped command's words ([] for the wrapper alone); None after a DENY."""
        spec = _WRAPPERS[name]
        if name == "setsid":
            # A new session leaves the call's process group: the executor's group kill on
            # timeout or cancel no longer reaches it.
            self.ask("setsid detaches the command from the call's process group", "medium")
        takes_value = spec.value_options | spec.chdir_options | spec.read_options
        positionals = spec.positionals
        i = 0
        while i < len(args):
            word = args[i]
            value = word.value
            if value is None:
                break
            if value == "--":
                i += 1
                break
            if name == "env" and value == "-":
                i += 1  # `env -` is `env -i` (an empty environment), not a command
                self.env_cleared = True
                continue
            if spec.assignments and "=" in value and not value.startswith("-"):
                # env takes any word with `=` as an assignment, valid shell name or not
                # (`BASH_FUNC_ls%%=() { ...; }` defines a function for a bash child).
                var, _, assigned = value.partition("=")
                variables.assignment(self, var, assigned)
                i += 1
                continue
            if value.startswith("-") and value != "-":
                option, attached = split_option(value, takes_value)
                unknown: str | None = None
                flags = ""  # the short flags of a bundle, before a letter taking a value
                if spec.numeric_options and value[1:].isdigit():
                    pass  # `nice -5 CMD`
                elif not value.startswith("--") and attached is None:
                    # A bundle of short flags (`time -ao FILE`): the first letter that
                    # takes a value takes the rest of the bundle, or the next word.
                    flags = value[1:]
                    for at in range(1, len(value)):
                        letter = "-" + value[at]
                        if letter in takes_value or letter in spec.deny_options:
                            option = letter
                            attached = value[at + 1 :] or None
                            flags = value[1:at]
                            break
                        if unknown is None and not spec.knows(letter):
                            unknown = letter
                option = canonical(
                    option,
                    (spec.deny_options, spec.no_command_options, takes_value, spec.flag_options),
                )
                if unknown is None and not spec.knows(option):
                    unknown = option
                if unknown is not None:
                    # It may take the next word as its value (`env -a NAME CMD`, newer
                    # coreutils): then the word judged as the program is not the one run.
                    self.ask(
                        f"{name} {unknown} is an option the checker does not know: the "
                        "command it runs cannot be told for sure",
                        "high",
                        immune=True,
                    )
                if option in spec.deny_options:
                    self.deny(f"{name} {option} runs a string as a command")
                    return None
                if name == "env" and (option == "--ignore-environment" or "i" in flags):
                    self.env_cleared = True
                if name == "exec" and ("c" in flags or option == "-c"):
                    self.env_cleared = True  # `exec -c CMD` runs CMD with an empty environment
                if option in spec.no_command_options:
                    return [], False
                operand: Word | None = None
                step = 1
                if option in takes_value:
                    if attached is not None:
                        operand = literal(attached)
                    elif i + 1 < len(args):
                        operand = args[i + 1]
                        step = 2
                        if may_split(operand):
                            # `xargs -n $n echo` with n='1 sh -c id': the value splits
                            # into the command the wrapper runs (EXE-8c).
                            self.deny(
                                f"{name} {option} gets a value only known at run time, "
                                "which may split into the command it runs"
                            )
                            return None
                if operand is not None and option in spec.chdir_options:
                    self.change_dir(operand)
                if operand is not None and option in spec.read_options:
                    self.path(operand, write=False)
                if operand is not None and option in spec.write_options:
                    self.path(operand, write=True, what=f"{name} {option} writes")
                    self.effect(f"{name} {option} writes a file", "low")
                if name == "env" and option in ("-u", "--unset") and operand is not None:
                    if operand.value is None:
                        self.ask("env -u removes a variable named only at run time", immune=True)
                    elif not variables.unset_variable(self, operand.value):
                        return None
                if operand is not None and option in spec.env_options:
                    if operand.value is None:
                        self.deny(f"{name} {option} sets a variable named only at run time")
                        return None
                    variables.assignment(self, operand.value, "0")  # the slot number
                i += step
                continue
            if positionals > 0:
                if spec.positionals - positionals < spec.write_positionals and not value.isdigit():
                    # `flock FILE CMD` creates FILE (a number is a file descriptor).
                    if self.path(word, write=True, what=f"{name} opens for writing") is not None:
                        self.effect(f"{name} creates or opens {word_text(word)}", "low")
                positionals -= 1
                i += 1
                continue
            break
        return args[i:], spec.stdin_args

    def dispatch(
        self, name: str, by_path: bool, args: list[Word], raw: RawCommand, stdin_args: bool
    ) -> None:
        """Hand ``name args`` to the judge of its program family."""
        if name in _VARIABLE_BUILTINS and not by_path:
            if not variables.builtin(self, name, args):
                return
        if name in _SHELLS:
            self.deny(f"{name} spawns a shell, whose commands cannot be checked (EXE-6)")
        elif name in _EVAL_COMMANDS:
            interpreters.eval_command(self, name, args)
        elif name in _DENY_COMMANDS:
            self.deny(_DENY_COMMANDS[name])
        elif name in _NETWORK_COMMANDS:
            self.scan_credentials(args)
            writes.output_options(self, name, args)  # `curl -o ~/.bashrc URL` (EXE-8e)
            if name in ("rsync", "scp", "sftp") and args:
                # A local destination (no `host:`) is written like `cp`'s.
                operands = [w for w in args if w.value is None or not w.value.startswith("-")]
                last = operands[-1] if len(operands) >= 2 else None
                if last is not None and last.value is not None and ":" not in last.value:
                    self.path(last, write=True, what=f"{name} copies to")
            self.network(f"{name} {_NETWORK_COMMANDS[name]}")
        elif by_path:
            self.scan_credentials(args)
            self.effect(f"runs the program {name!r} from a path, which can do anything")
        elif name == "git":
            if self.env_cleared:
                # Without the executor's GIT_CONFIG_* overrides, the repository's
                # configuration runs programs (core.fsmonitor on `git status` ...).
                self.ask(
                    "git runs with the environment cleared (env -i): without the executor's "
                    "neutralisation, the repository's configuration may run programs",
                    "high",
                )
            git.judge(self, args)
        elif name in _INTERPRETERS:
            interpreters.interpreter(self, name, args, raw)
        elif name in self.functions and not _program_or_builtin(name):
            pass  # the function's body is judged where it is defined
        elif name in _SAFE_COMMANDS:
            readers.judge(self, name, _SAFE_COMMANDS[name], args, stdin_args)
        elif name in _WRITE_COMMANDS:
            if stdin_args:
                self.effect(f"{name} gets its targets from stdin (xargs)", "high", immune=True)
            writes.judge(self, name, _WRITE_COMMANDS[name], args)
        elif name in _PACKAGE_MANAGERS:
            self.scan_credentials(args)
            writes.output_options(self, name, args)  # `gcc -o /usr/local/bin/x`, `pip -t DIR`
            interpreters.package_manager(self, name, args)
        else:
            self.scan_credentials(args)
            writes.output_options(self, name, args)
            if name == "history":
                readers.history(self, args)
            self.effect(f"{name!r} is not on the read-only list; it may change things")

    def network(self, reason: str) -> None:
        """The command uses the network: refused unless the network is enabled."""
        self.needs_network = True
        if self.network_enabled:
            self.effect(f"{reason} (uses the network)", "high")
        else:
            self.deny(f"{reason}; network access is disabled")

    def change_dir(self, target: Word) -> None:
        """The command changes directory: later relative paths start there."""
        value = target.path_value
        if value is None:
            self.ask("changes to a directory only known at run time", immune=True)
            return
        if value == "-":
            return
        if target.glob and not _NO_WILDCARD.isdisjoint(value):
            # `cd se*t` goes where the glob matches, not to a directory named `se*t`.
            self.ask(f"changes to a directory named by the glob {value}", immune=True)
            return
        decision = self.path(target, write=False)
        if decision is None and not any(f.verdict == "deny" for f in self.findings):
            # Refused as a read (outside the roots: asked), but bash goes there all the
            # same: what follows is judged from there (`cd /etc && cat shadow` reads
            # /etc/shadow, a credential), not from where the line started.
            decision = normal_path(self.absolute(self.expand(value), self.bases[-1]))
        expanded = self.expand(value)
        if not expanded.startswith("/"):
            # A relative directory is entered from whichever directory the line is in:
            # `cd sub || cd secret` and `cd missing; cd secret` go to ./secret, not to
            # ./sub/secret (bash stays where it was when a cd fails). Every such
            # directory that exists is followed too.
            for base in list(self.bases[:-1] if not self.revisiting else self.bases):
                other = normal_path(self.absolute(expanded, base))
                if other not in self.bases and other != decision and os.path.isdir(other):
                    self.add_base(other)
            if self.revisiting and (decision is None or not os.path.isdir(decision)):
                return
        if decision is not None and (not self.revisiting or decision not in self.bases):
            self.add_base(decision)

    def add_base(self, decision: str) -> None:
        """Follow a directory the line changes to (bounded by _MAX_BASES)."""
        if len(self.bases) >= _MAX_BASES:
            if not self.too_many_bases:
                self.too_many_bases = True
                self.ask(
                    f"changes directory more than {_MAX_BASES - 1} times: the relative "
                    "paths after that are not checked from every directory",
                    "high",
                    immune=True,
                )
            # The directory bash goes to is still followed (`cd /etc && cat shadow`
            # stays a DENY past the bound); the oldest one after the starting
            # directory is no longer judged from (that is what the ASK says).
            del self.bases[1]
        self.bases.append(decision)
        self.bases_version += 1

    def expand(self, value: str) -> str:
        """Tilde expansion as bash does it (``~``, ``~/x``, ``~user``)."""
        if value == "~" or value.startswith("~/"):
            return self.home + value[1:]
        if value.startswith("~"):
            user, _, rest = value[1:].partition("/")
            expanded = os.path.expanduser("~" + user)
            if expanded.startswith("~"):
                expanded = "/home/" + user  # unknown user: still a home directory
            return expanded + ("/" + rest if rest else "")
        return value

    def absolute(self, value: str, base: str | None = None) -> str:
        """``value`` made absolute against ``base`` (the first working directory)."""
        if value.startswith("/"):
            return value
        # os.path.join's result (base is never empty), without its call layers: this runs
        # for every path of every command.
        base = base or self.bases[0]
        return base + value if base.endswith("/") else base + "/" + value

    def path(self, word: Word, *, write: bool, what: str = "reads") -> str | None:
        """Judge one path operand; the canonical path when it is allowed, else None."""
        key = (word.text, word.path_value, write, self.bases_version)
        if key in self.judged_paths:
            return self.judged_paths[key]  # its findings were recorded the first time
        result = self.judge_path(word, write=write, what=what)
        self.judged_paths[key] = result
        return result

    def judge_path(self, word: Word, *, write: bool, what: str) -> str | None:
        """Judge one path operand (brace items, devices, credentials, the sandbox, denied
        reads, globs)."""
        value = word.path_value
        if word.glob and value is not None and "{" in value:
            expanded_words = brace_expand(value)
            if expanded_words is None:
                self.ask(f"brace expansion {short(value, 30)} is too large to check", immune=True)
                return None
            if len(expanded_words) > 1 or expanded_words[0] != value:
                result: str | None = None
                for item in expanded_words:
                    result = self.path(literal(item), write=write, what=what) or result
                return result
        if value is None and word.text.startswith(("<(", ">(")):
            return None  # a process substitution: a pipe, its command is judged on its own
        if value is None:
            if write:
                self.effect(f"{what} a path only known at run time", "high", immune=True)
            else:
                self.ask(f"reads a path only known at run time ({word.text})", immune=True)
            return None
        if value in ("-", "") or value in _SAFE_DEVICES:
            return None
        if value.startswith(("/dev/tcp/", "/dev/udp/")):
            # bash itself opens a socket for these names: a redirection is a connection.
            self.network(f"{value} is a network connection opened by bash")
            return None
        expanded = self.expand(value)
        # bash's pattern as a Python glob that matches at least what bash matches.
        pattern = python_glob(expanded, mixed_quoting=word.quoted) if word.glob else expanded
        if word.glob and not write:
            self.glob_credentials(pattern)
        bases = self.bases if not expanded.startswith("/") else self.bases[:1]
        if word.glob and write and not _NO_WILDCARD.isdisjoint(expanded):
            # bash expands a glob in a write target too (a redirection's word when it
            # matches one file, a `cp`/`tee` operand): `echo x > .bas?rc` writes .bashrc.
            # Every current match is judged as the write it is (a file the line itself
            # creates first is Walker.created_then_globbed's question).
            for base in bases:
                absolute = self.absolute(pattern, base)
                if self.shell.wide_globs:
                    matches = _wide_glob_matches(absolute, _MAX_GLOB_MATCHES + 1)
                else:
                    matches = _glob_matches(absolute, _MAX_GLOB_MATCHES + 1)
                if len(matches) > _MAX_GLOB_MATCHES:
                    self.deny(f"{what} the glob {value}, which matches too many files to check")
                    return None
                for match in matches:
                    self.path(literal(match), write=True, what=what)
        result = None
        for base in bases:
            absolute = self.absolute(expanded, base)
            if not self.credential_check(absolute, write):
                return None
            decision = self.check(absolute, write)
            resolved = decision.resolved or absolute
            if resolved != absolute and not self.credential_check(resolved, write):
                return None
            if not decision.allowed:
                if write:
                    self.deny(f"{what} {value}: {decision.reason}")
                elif decision.root is not None:
                    self.deny(f"reads {value}: {decision.reason}")
                else:
                    self.ask(f"reads {value}: {decision.reason}", "high", immune=True)
                    self.reads[resolved] = None
                return None
            if not write and self.denied(resolved, absolute):
                self.deny(f"reads {value}, which policy denies reading")
                return None
            if decision.root is not None and not self.sandbox.inside_cwd(resolved):
                if matches_basename(resolved, _CREDENTIAL_BASENAMES):
                    self.deny(f"touches {value}, a secrets file outside the workspace")
                    return None
            if write:
                self.writes[resolved] = None
            else:
                self.reads[resolved] = None
            if word.glob and not write:
                self.expand_glob(self.absolute(pattern, base), value)
            result = resolved
        return result

    def check(self, absolute: str, write: bool) -> PathDecision:
        """The sandbox's decision on the absolute path, asked once per analysis: a line
        names the same path in several places (``mkdir -p d && cp f d/``). Kept for this
        walk only (a symlink planted before the next analysis must be seen)."""
        # `d/` and `d` are one path to the sandbox (it normalises both to `d`).
        key = absolute[:-1] if len(absolute) > 1 and absolute[-1] == "/" else absolute
        decision = self.checked.get((key, write))
        if decision is None:
            decision = self.sandbox.check(absolute, write=write, known_dirs=self.known_dirs)
            self.checked[(key, write)] = decision
        return decision

    def credential(self, absolute: str) -> bool:
        """Whether ``absolute`` is a credential file (``~/.ssh/id_*``, cloud tokens ...)."""
        return self._credential_re.match(absolute) is not None

    def tracks_denied(self, git_dir: str, prefixes: Sequence[str] = ("",)) -> bool:
        """Whether the index of ``git_dir`` tracks a path the policy denies reading at or
        under one of ``prefixes`` (relative to the work tree's top, ``""``: anywhere), or
        cannot be read with certainty. Remembered per index file version."""
        if self._denied_re is None:
            return False
        index = os.path.join(git_dir, "index")
        try:
            st = os.stat(index)
        except FileNotFoundError:
            return False  # nothing tracked yet
        except OSError:
            return True
        key = (index, st.st_ino, st.st_size, st.st_mtime_ns, tuple(prefixes))
        cached = self.context.index_verdicts.get(key)
        if cached is not None:
            return cached
        names = tracked_paths(git_dir)
        top = os.path.dirname(git_dir.rstrip("/"))
        lowered = [p.lower() for p in prefixes]
        verdict = names is None or any(
            _under_any(name.lower(), lowered)
            and self._denied_re.match(os.path.join(top, name)) is not None
            for name in names
        )
        if len(self.context.index_verdicts) >= 64:
            self.context.index_verdicts.clear()
        self.context.index_verdicts[key] = verdict
        return verdict

    def history_denied(
        self, git_dir: str, top: str, prefixes: Sequence[str], ids: Sequence[str]
    ) -> bool | None:
        """Whether a commit git can reach holds a denied (or credential) path at or under
        one of ``prefixes``; None when that cannot be told (githistory.py)."""
        if self._denied_re is None:
            return False
        return history_holds_denied(
            git_dir,
            top,
            prefixes,
            ids,
            lambda path: self.denied(path, path) or self.credential(path),
            self.context.history,
        )

    def credential_check(self, absolute: str, write: bool) -> bool:
        """False (after a DENY) when the path is a credential file, or a secrets file
        outside the roots."""
        if self.credential(absolute):
            self.deny(f"{'writes' if write else 'reads'} credentials ({absolute})")
            return False
        if not self.sandbox.roots or self.sandbox.root_for(absolute) is None:
            if SECRET_BASENAMES.match(absolute.rstrip("/").rsplit("/", 1)[-1]):
                self.deny(f"reads a secrets file outside the workspace ({absolute})")
                return False
        return True

    def denied(self, resolved: str, absolute: str) -> bool:
        """Whether the policy denies reading the path (as resolved or as given)."""
        if self._denied_re is None:
            return False
        return (
            self._denied_re.match(resolved) is not None
            or self._denied_re.match(absolute) is not None
        )

    def glob_credentials(self, expanded: str) -> None:
        """A glob that could name a credential file (``~/.ssh/*``, ``/etc/sh*``) is DENY."""
        absolute = self.absolute(expanded)
        flats = self.context.glob_flats
        union = self.context.glob_flats_re
        if union is not None and union.match(absolute) is None:
            # No pattern matches the glob's text. The other way round, a pattern's text
            # can only match the glob when it starts with the glob's literal head (what
            # precedes its first wildcard: fnmatch matches those characters as they are).
            wildcard = _WILDCARD.search(absolute)
            head = absolute if wildcard is None else absolute[: wildcard.start()]
            if not [flat for _, flat in flats if flat.startswith(head)]:
                return
        for pattern, flat in flats:
            if fnmatch.fnmatchcase(absolute, flat) or fnmatch.fnmatchcase(flat, absolute):
                self.deny(f"the glob {expanded} can match credentials ({pattern})")
                return

    def expand_glob(self, absolute: str, value: str) -> None:
        """Check what a glob inside the roots really names (a planted symlink, a secret)."""
        self.globs_expanded += 1
        if self.globs_expanded > _MAX_GLOBS:
            if self.globs_expanded == _MAX_GLOBS + 1:
                self.ask("too many globs to check each of them", immune=True)
            return
        if self.shell.wide_globs:
            matches = _wide_glob_matches(absolute, _MAX_GLOB_MATCHES + 1)
        else:
            matches = _glob_matches(absolute, _MAX_GLOB_MATCHES + 1)
        if len(matches) > _MAX_GLOB_MATCHES:
            self.ask(f"the glob {value} matches too many files to check", immune=True)
            return
        for match in matches:
            decision = self.check(match, False)
            if not self.credential_check(decision.resolved or match, False):
                return
            if not decision.allowed:
                self.ask(
                    f"the glob {value} reaches {match}: {decision.reason}", "high", immune=True
                )
                return
            if self.denied(decision.resolved, match):
                self.deny(f"the glob {value} matches {match}, which policy denies reading")
                return

    def scan_credentials(self, args: Sequence[Word]) -> None:
        """For commands whose arguments are not understood: refuse credential paths."""
        for word in args:
            value = word.path_value
            if value is None:
                continue
            for candidate in (value, value.partition("=")[2]):
                if candidate and ("/" in candidate or candidate.startswith("~")):
                    absolute = self.absolute(self.expand(candidate))
                    if not self.credential_check(absolute, False):
                        return
                    if self.denied(absolute, absolute):
                        self.deny(f"passes {candidate}, which policy denies reading")
                        return
                elif candidate and matches_basename(candidate, (".env", ".env.*")):
                    absolute = self.absolute(candidate)
                    if self.denied(absolute, absolute):
                        self.deny(f"passes {candidate}, which policy denies reading")
                        return
