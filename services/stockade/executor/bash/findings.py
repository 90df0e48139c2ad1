"""The interface the program judges report through (the walker implements it).

The walker (walker.py) goes over every simple command of a parsed script, looks through
wrappers and hands each command to the judge of its program family (judges/git.py,
judges/sed.py, judges/awk.py, judges/find.py, judges/archives.py ...). A judge reads the
command's words and reports what it finds through :class:`Judge`: a refusal
(:meth:`Judge.deny`), a question (:meth:`Judge.ask`), a side effect
(:meth:`Judge.effect`), network use, and the paths it reads or writes, which the walker
judges with the path sandbox, the credential patterns and the policy's denied reads. A
judge never decides the verdict itself: the walker folds all findings into one.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from typing import Final, Literal

from stockade.executor.bash.explain import Finding
from stockade.executor.bash.parser import ParsedScript, RawCommand, Word
from stockade.executor.paths import PathSandbox

__all__ = ["Finding", "Judge", "Risk", "ShellState", "expanded", "short", "word_text"]

Risk = Literal["low", "medium", "high"]


class ShellState:
    """What the script does to the shell itself, gathered while walking: the variables
    judge (judges/variables.py) reads and extends it."""

    # A plain class, not a dataclass: compiled with mypyc, a dataclass's generated
    # __init__ is an interpreted function, and one is made for every analysis.
    def __init__(self, parsed: ParsedScript) -> None:
        self.parsed = parsed
        """The whole script (assignments, arithmetic names, functions)."""
        self.export_all = False
        """``set -a`` / ``set -o allexport`` seen: every later assignment is exported."""
        self.judged_names: set[tuple[str, str | None, bool]] = set()
        """Assignments already judged (``export X=1`` is seen as an argument and as an
        assignment)."""
        self.integer_names: set[str] = set()
        """Variables bash evaluates as arithmetic (``declare -i``, ``let``)."""
        self.runtime_values: list[str] = []
        """Variables given a value only known at run time (``read x``, ``wait -p x``)."""
        self.static_values: dict[str, list[str] | None] | None = None
        """Every value each variable is given in the script (computed on first use)."""
        self.wide_globs = False
        """``shopt -s dotglob`` / ``nocaseglob`` / ``globstar`` / ``extglob`` or a
        ``GLOBIGNORE`` in the line: globs may match hidden names, any case, subdirectories."""


class Judge:
    """What a program judge may read and call. The walker is the one implementation: a
    subclass, so that compiled (mypyc) a judge's calls and reads are direct C calls and
    loads through the class's vtable, not Python method calls with keyword parsing (a
    Protocol is only known to mypyc as an object)."""

    sandbox: PathSandbox
    """The roots: where reads and writes may go."""
    home: str
    """The home directory ``~`` stands for."""
    bases: list[str]
    """The working directories in effect (the first one, then every ``cd`` target)."""
    denied_read_globs: tuple[str, ...]
    """Paths the policy denies reading (DEC-16)."""
    reads: dict[str, None]
    """Canonical paths read so far (ordered set)."""
    writes: dict[str, None]
    """Canonical paths written so far (ordered set)."""
    needs_network: bool
    """Whether anything judged so far uses the network."""
    creates_links: bool
    """Whether the line makes a symbolic or hard link (``ln``, ``cp -s``)."""
    findings: list[Finding]
    """Everything reported so far."""
    shell: ShellState
    """What the script does to the shell's own state."""
    repository_tops: dict[str, str]
    """The git repository top found for each working directory, by this analysis only
    (judges/git.py: the file system may change before the next one)."""

    # A property, not an attribute: the walker makes the label only when a finding needs
    # it, and a judge's `j.current = ...` must reach the walker's setter (compiled, an
    # attribute here would be a field of its own that the walker never reads).
    @property
    def current(self) -> str:
        """The (shortened) command being judged; findings are labelled with it."""
        raise NotImplementedError

    @current.setter
    def current(self, label: str) -> None:
        raise NotImplementedError

    def deny(self, reason: str) -> None:
        """Refuse the command line."""
        raise NotImplementedError

    def ask(self, reason: str, risk: Risk = "medium", *, immune: bool = False) -> None:
        """Ask a person; ``immune``: no allow rule or bypass mode may settle it."""
        raise NotImplementedError

    def effect(self, reason: str, risk: Risk = "medium", *, immune: bool = False) -> None:
        """An ASK because the command changes something (it is not read-only)."""
        raise NotImplementedError

    def network(self, reason: str) -> None:
        """The command uses the network (refused unless the network is enabled)."""
        raise NotImplementedError

    def path(self, word: Word, *, write: bool, what: str = "reads") -> str | None:
        """Judge one path operand; its canonical path when allowed, else None."""
        raise NotImplementedError

    def change_dir(self, target: Word) -> None:
        """The command changes the working directory for what follows."""
        raise NotImplementedError

    def scan_credentials(self, args: Sequence[Word]) -> None:
        """Refuse credential paths among arguments that are not otherwise understood."""
        raise NotImplementedError

    def absolute(self, value: str, base: str | None = None) -> str:
        """``value`` made absolute against ``base`` (the first working directory)."""
        raise NotImplementedError

    def expand(self, value: str) -> str:
        """Tilde expansion as bash does it."""
        raise NotImplementedError

    def denied(self, resolved: str, absolute: str) -> bool:
        """Whether the policy denies reading the path."""
        raise NotImplementedError

    def tracks_denied(self, git_dir: str, prefixes: Sequence[str] = ("",)) -> bool:
        """Whether that git directory's index tracks a path the policy denies reading, at
        or under one of ``prefixes`` (True when it cannot be read with certainty)."""
        raise NotImplementedError

    def history_denied(
        self, git_dir: str, top: str, prefixes: Sequence[str], ids: Sequence[str]
    ) -> bool | None:
        """Whether a commit git can reach (refs, reflogs, the object ids ``ids``) holds a
        path the policy denies reading at or under one of ``prefixes``; None: unknown."""
        raise NotImplementedError

    def credential(self, absolute: str) -> bool:
        """Whether the absolute path is a credential file (``~/.ssh/id_*`` ...)."""
        raise NotImplementedError

    def resolve_name(self, word: Word) -> tuple[str, bool] | None:
        """A command-name word normalised: (name, run by path); None after a DENY."""
        raise NotImplementedError

    def record(self, name: str, args: Sequence[Word]) -> None:
        """Record a simple command for rule matching (DEC-2)."""
        raise NotImplementedError

    def words(
        self, name: str, by_path: bool, args: list[Word], raw: RawCommand, *, stdin_args: bool
    ) -> None:
        """Judge a command given as words (``find -exec``'s inner command)."""
        raise NotImplementedError


def short(text: str, limit: int = 60) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def word_text(word: Word) -> str:
    """The word's value when static, its source text otherwise."""
    return word.value if word.value is not None else word.text


def normal_path(path: str) -> str:
    """``os.path.normpath(path)``; an absolute path that is already normal (no empty,
    ``.`` or ``..`` component, most paths) is returned as it is, without normpath's call
    layers (this runs for several words of every command)."""
    if path == "/" or (
        path.startswith("/")
        and "//" not in path
        and "/./" not in path
        and "/../" not in path
        and not path.endswith(("/", "/.", "/.."))
    ):
        return path
    return os.path.normpath(path)


def expanded(words: Sequence[Word]) -> list[Word]:
    """``words`` after brace expansion: each braced word replaced by its items (EXE-8c)."""
    out: list[Word] = []
    for word in words:
        if word.braces:
            out.extend(word.braces)
        else:
            out.append(word)
    return out


def matches_basename(path: str, patterns: Sequence[str]) -> bool:
    """Whether the last component of ``path`` matches one of ``patterns``."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    key = tuple(patterns)
    pattern = _BASENAME_PATTERNS.get(key)
    if pattern is None:
        pattern = _basename_pattern(key)
        if len(_BASENAME_PATTERNS) >= 64:
            _BASENAME_PATTERNS.clear()
        _BASENAME_PATTERNS[key] = pattern
    return pattern.match(base) is not None


# The compiled regex of each list of patterns (a dict, not functools.lru_cache: this runs
# for the words of most commands, and the cache's call layers cost more than the match).
# The callers pass a few fixed lists; only the patterns' text is kept.
_BASENAME_PATTERNS: Final[dict[tuple[str, ...], re.Pattern[str]]] = {}


def _basename_pattern(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """``patterns`` as one regex (what fnmatchcase of each does, in one match)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)")
