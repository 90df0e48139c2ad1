"""Permission rules: the pattern syntax, its compilation, and an index by tool name (DEC-1/2).

A pattern is ``*``, ``tool``, ``tool(content)`` or ``*(content)``. Content is matched
against the call's content fields: a DENY or ASK rule matches if any of ``command``,
``file_path``, ``path``, ``pattern``, ``url`` matches; an ALLOW rule matches only on the
tool's primary content field, and a bare (wildcard-free) ALLOW content must equal the
whole content. ``*`` in content is a wildcard (``prefix*``, ``*suffix``, ``*mid*``);
``\\*`` is a literal star. For path fields, both the call's path and the pattern are
normalised, ``*`` stays within one directory, ``**`` crosses directories and a pattern
without a slash matches the file's base name at any depth.

Patterns are compiled once; ``RuleIndex`` keeps them by tool name so a decision only
looks at rules that can apply to its tool, and each tool's rules of one effect form a
``RuleTier`` that says which of them match a call with one pattern-set look-up per content
string (``stockade.decision.patternset``): the cost does not grow with the number of rules
and is linear in the input whatever the patterns (#18; docs/decisions/0002-rule-matcher.md).
``CompiledRule.matches``/``allows``/``allows_command`` test one rule at a time with Python's
``re``: the plain reference the tiers are tested against, and for tools such as lint that
ask about one rule; never run on a call's content in ``decide``.
"""

from __future__ import annotations

import posixpath
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from stockade.contract.shell import (
    MAX_COMMAND_CHARS,
    PRIVILEGE_WRAPPERS,
    SYSTEM_BIN_DIRS,
    WRAPPERS,
    WrapperSpec,
    canonical_option,
    split_option,
)
from stockade.contract.tools import PRIMARY_FIELDS
from stockade.decision.patternset import ANY, DIRS, SEGMENT, PatternSet, Piece, Spec
from stockade.errors import InvalidArgument, InvalidPattern


class Effect(Enum):
    """What a rule does when it matches."""

    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"


class Source(Enum):
    """Where a rule or signal came from (feeds precedence and the audit trail)."""

    MANAGED = "managed"
    ENV = "env"
    PROJECT = "project"
    SESSION = "session"
    TOOL = "tool"
    HOOK = "hook"
    DEFAULT = "default"
    MODE = "mode"


POLICY_SOURCES = frozenset({Source.MANAGED, Source.ENV, Source.PROJECT})
"""Sources whose rules make up the loaded policy (as opposed to session or call rules)."""

CONTENT_FIELDS: tuple[str, ...] = ("command", "file_path", "path", "pattern", "url")
"""Argument names a call's content is taken from, in this order."""

PATH_FIELDS = frozenset({"file_path", "path"})
"""Content fields that hold filesystem paths and are normalised before matching."""
_PATH_FIELD_ORDER = tuple(k for k in CONTENT_FIELDS if k in PATH_FIELDS)


BASH_TOOL = "run_bash"

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:\-]+$")

# The wrapper table is shared with the executor's bash analysis (stockade.contract.shell), so
# the two sides read `time -f %e rm x` alike. DENY/ASK look through every wrapper, privilege
# changers included (a DENY on `rm` catches `sudo rm`); ALLOW looks only through wrappers that
# pass the command its arguments unchanged (`transparent`: time, nice, timeout, nohup ...),
# never xargs, env or sudo, which change what the command gets (DEC-1 rev 2).
_DENY_WRAPPERS: Mapping[str, WrapperSpec] = {**WRAPPERS, **PRIVILEGE_WRAPPERS}
_ALLOW_WRAPPERS: Mapping[str, WrapperSpec] = {n: w for n, w in WRAPPERS.items() if w.transparent}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


_QUOTING = re.compile(r"[\\'\"]")
"""Characters the shell removes from words (searched with one C call, not a Python loop)."""


def _plain_tokens(text: str) -> list[str] | None:
    """The words of ``text`` when its name needs no looking through, else None.

    A plain name (no path, no assignment, no wrapper) is the common case; both forms of
    ``normalize_command`` then give the same words, so the caller may compute them once.
    """
    quoted = _QUOTING.search(text) is not None
    tokens = _split_words(text) if quoted else text.split()
    if tokens and quoted and _QUOTING.search(tokens[0]) is not None:
        # The shell removes quotes and backslashes from a command name: 'r'm and \rm are rm.
        tokens[0] = _unquote(tokens[0])
    if tokens:
        first = tokens[0]
        if "/" in first or "=" in first or first in _DENY_WRAPPERS:
            return None
    return tokens


def normalize_command(text: str, *, look_through_privilege: bool = True) -> str:
    """Return ``text`` with its command name normalised, for matching (DEC-1).

    The DENY/ASK form (the default) removes leading ``VAR=value`` assignments and every
    wrapper with its options (``env``, ``nice -n 5``, ``sudo -u root``, ``xargs`` ...) and
    cuts the name's path: ``/tmp/git status``, ``env git status`` and ``GIT_DIR=x git
    status`` all become ``git status``. The ALLOW form (``look_through_privilege=False``)
    removes only wrappers that pass the command its arguments unchanged (``time -f %e``,
    ``nice``, ``timeout 5``, ``nohup``) and cuts only a system directory (``/usr/bin/git``);
    assignments, ``env``, ``xargs``, ``sudo`` and programs run from other paths stay, so an
    ALLOW rule never matches more than it names. Whitespace runs collapse to one space.
    """
    plain = _plain_tokens(text)
    if plain is not None:
        return " ".join(plain)  # a plain name: nothing to look through (the common case)
    return _look_through(text, look_through_privilege)


def _normalize_both(text: str) -> tuple[str, str]:
    """``normalize_command`` in its DENY/ASK form and its ALLOW form, sharing the split."""
    plain = _plain_tokens(text)
    if plain is not None:
        joined = " ".join(plain)
        return joined, joined
    return _look_through(text, True), _look_through(text, False)


def _look_through(text: str, deny_form: bool) -> str:
    """The slow path of ``normalize_command``: strip assignments and wrappers, cut the path."""
    tokens = _split_words(text) if _QUOTING.search(text) is not None else text.split()
    wrappers = _DENY_WRAPPERS if deny_form else _ALLOW_WRAPPERS
    # Each round removes at least one word, so this ends; the bound is for clarity.
    for _ in range(len(tokens) + 1):
        if deny_form:
            while tokens and _ASSIGNMENT.match(tokens[0]):
                tokens.pop(0)
        if not tokens:
            break
        tokens[0] = _unquote(tokens[0])
        name = _command_name(tokens[0], deny_form)
        spec = wrappers.get(name)
        if spec is None or len(tokens) == 1:
            break
        inner = _wrapped(spec, tokens[1:], deny_form)
        if inner is None:
            break  # ALLOW form: the wrapper changes what the command gets; keep it
        tokens = inner
    if tokens:
        tokens[0] = _command_name(tokens[0], deny_form)
    return " ".join(tokens)


def _command_name(word: str, deny_form: bool) -> str:
    """The name a command word runs: its base name (DENY/ASK: any path, since a DENY on
    ``rm`` must catch ``/tmp/rm``; ALLOW: only a system directory, since ``/tmp/git`` is not
    the ``git`` an ALLOW rule names)."""
    if "/" not in word:
        return word
    directory, _, base = word.rstrip("/").rpartition("/")
    if not base:
        return word
    if deny_form or posixpath.normpath(directory or "/") in SYSTEM_BIN_DIRS:
        return base
    return word


def _wrapped(spec: WrapperSpec, words: list[str], deny_form: bool) -> list[str] | None:
    """The wrapped command's words after a wrapper's options and positionals (GNU getopt
    conventions, like the executor's analysis), or None when the ALLOW form must not look
    through: the wrapper sets variables, runs a string (``env -S``) or runs no command.

    The DENY/ASK form looks through everything it can: a string-running option's value is
    split into the command (``env -S 'rm -rf x'``, ``su -c 'rm x'``).
    """
    takes_value = spec.value_options | spec.chdir_options | spec.read_options
    known = (spec.deny_options, spec.no_command_options, takes_value)
    positionals = spec.positionals
    i = 0
    while i < len(words):
        word = _unquote(words[i])
        if word == "--":
            i += 1
            break
        if spec.assignments and _ASSIGNMENT.match(word):
            if not deny_form:
                return None
            i += 1
            continue
        if word.startswith("-") and word != "-":
            step, command = _wrapper_option(spec, word, words, i, takes_value, known)
            if command is not None:
                return command if deny_form else None
            if step == 0:  # an option after which the words are not a command
                if not deny_form:
                    return None
                step = 1  # DENY/ASK over-match: still judge the words as a command
            i += step
            continue
        if positionals > 0:
            positionals -= 1
            i += 1
            continue
        break
    return words[i:]


def _wrapper_option(
    spec: WrapperSpec,
    word: str,
    words: list[str],
    i: int,
    takes_value: frozenset[str],
    known: tuple[frozenset[str], ...],
) -> tuple[int, list[str] | None]:
    """Read the option ``word`` at ``words[i]``: (words it takes, the command it runs as a
    string or None). A step of 0 means an option after which no command follows. Short
    options may be bundled (``-Eu root``): the first that takes a value ends the bundle."""
    if word.startswith("--"):
        option, attached = split_option(word, takes_value | spec.deny_options)
        options = [canonical_option(option, known)]
    else:
        options, attached = [], None
        for k, ch in enumerate(word[1:], start=1):
            options.append("-" + ch)
            if options[-1] in takes_value or options[-1] in spec.deny_options:
                attached = word[k + 1 :] or None
                break
    last = options[-1]
    if any(o in spec.no_command_options for o in options):
        return 0, None
    if last in spec.deny_options:
        value = attached if attached is not None else (words[i + 1] if i + 1 < len(words) else "")
        rest = words[i + (1 if attached is not None else 2) :]
        return 0, _split_words(_unquote(value)) + rest
    if last in takes_value and attached is None:
        return 2, None
    return 1, None


def _split_words(text: str) -> list[str]:
    """Split on whitespace outside quotes, keeping each word's quotes (``X='a b'`` is one)."""
    words: list[str] = []
    buf: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'" and i + 1 < len(text):
            buf.append(text[i : i + 2])
            i += 2
            continue
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch.isspace():
            if buf:
                words.append("".join(buf))
                buf = []
            i += 1
            continue
        buf.append(ch)
        i += 1
    if buf:
        words.append("".join(buf))
    return words


def _unquote(word: str) -> str:
    """Shell quote removal for one word (quotes and backslashes, no expansion)."""
    if not any(q in word for q in "\\'\""):
        return word
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(word):
        ch = word[i]
        if ch == "\\" and quote != "'" and i + 1 < len(word):
            out.append(word[i + 1])
            i += 2
            continue
        if ch in "'\"" and (not quote or quote == ch):
            quote = "" if quote else ch
        else:
            out.append(ch)
        i += 1
    return "".join(out)


_NEEDS_FOLDING = re.compile(r"//|/\.\.?(?:/|$)|/$")


def normalize_path(path: str, cwd: str) -> str:
    """Make ``path`` absolute against ``cwd`` and fold ``.``, ``..`` and duplicate slashes."""
    if path.startswith("/") and len(path) > 1 and _NEEDS_FOLDING.search(path) is None:
        return path  # already absolute and folded: the common case, kept cheap
    joined = posixpath.join(cwd or "/", path)
    folded = posixpath.normpath(joined)
    # normpath folds every run of slashes except a leading "//" (exactly two: POSIX allows
    # it to mean something else); we do not keep it.
    return folded[1:] if folded.startswith("//") else folded


@dataclass(frozen=True)
class Rule:
    """One permission rule as configured (DEC-1)."""

    effect: Effect
    """What the rule does on a match."""
    pattern: str
    """The pattern text, e.g. ``run_bash(git *)``."""
    source: Source
    """Where the rule came from."""
    reason: str = ""
    """Optional human reason shown when the rule decides."""
    rule_id: str = ""
    """Server-assigned id for session rules and grants."""
    bypass_immune: bool = False
    """For tool-level ASKs: neither ALLOW rules nor bypass mode may settle it."""

    def describe(self) -> str:
        """A short label, e.g. ``deny run_bash(rm *) [managed]``."""
        return f"{self.effect.value} {self.pattern} [{self.source.value}]"


@dataclass(frozen=True)
class ParsedPattern:
    """A pattern split into its tool part and content part."""

    tool: str | None
    """The tool name, or None for ``*``."""
    content: str | None
    """The content between the parentheses, or None when absent."""


def parse_pattern(pattern: str) -> ParsedPattern:
    """Split and validate a pattern; raise ``InvalidPattern`` naming it and the problem."""
    text = pattern.strip()
    if not text:
        raise InvalidPattern("empty rule pattern", pattern=pattern, problem="empty")
    if "(" in text:
        name, _, rest = text.partition("(")
        if not rest.endswith(")"):
            raise InvalidPattern(
                f"rule pattern {pattern!r}: missing closing ')'",
                pattern=pattern,
                problem="unbalanced parenthesis",
            )
        content = rest[:-1]
        if not content.strip():
            raise InvalidPattern(
                f"rule pattern {pattern!r}: empty content between parentheses",
                pattern=pattern,
                problem="empty content",
            )
    else:
        if ")" in text:
            raise InvalidPattern(
                f"rule pattern {pattern!r}: ')' without '('",
                pattern=pattern,
                problem="unbalanced parenthesis",
            )
        name, content = text, None
    name = name.strip()
    if name != "*" and not _TOOL_NAME.match(name):
        raise InvalidPattern(
            f"rule pattern {pattern!r}: tool name {name!r} must be '*' or letters, digits, _ . : -",
            pattern=pattern,
            problem="bad tool name",
        )
    if content is not None and content.strip() == "*" and name != "*":
        # `tool(*)` means the same as `tool`; accept it but store the simpler form.
        content = None
    return ParsedPattern(tool=None if name == "*" else name, content=content)


def escape_content(text: str) -> str:
    """Escape a literal content so it matches only itself (used for ALWAYS_ALLOW grants)."""
    return text.replace("\\", "\\\\").replace("*", "\\*")


def _split_glob(content: str) -> list[str | None]:
    """Split content into literal chunks and ``None`` for each unescaped ``*``."""
    parts: list[str | None] = []
    buf: list[str] = []
    i = 0
    while i < len(content):
        ch = content[i]
        if ch == "\\" and i + 1 < len(content) and content[i + 1] in "*\\":
            buf.append(content[i + 1])
            i += 2
            continue
        if ch == "*":
            if buf:
                parts.append("".join(buf))
                buf = []
            parts.append(None)
        else:
            buf.append(ch)
        i += 1
    if buf:
        parts.append("".join(buf))
    return parts


def _fast(literal: str | None, regex: re.Pattern[str] | None, exact: bool) -> Callable[[str], Any]:
    """One bound C function that tests a string: equality, substring search or full match."""
    if literal is not None:
        return literal.__eq__ if exact else re.compile(re.escape(literal)).search
    assert regex is not None
    return regex.fullmatch


def _regex_of(pieces: Sequence[Piece]) -> str:
    """Python's regex for pieces (the per-rule reference matcher; see ``RuleTier``)."""
    return "".join(re.escape(p) if isinstance(p, str) else p.regex for p in pieces)


class _TextMatcher:
    """Matches free text (commands, globs, URLs): wildcards anchor, bare text is substring/equal."""

    __slots__ = ("literal", "regex", "exact", "fn", "spec")

    def __init__(self, content: str, *, exact: bool) -> None:
        pieces = tuple(ANY if p is None else p for p in _split_glob(content))
        self.exact = exact
        self.literal: str | None = None
        self.regex: re.Pattern[str] | None = None
        if all(isinstance(p, str) for p in pieces):
            self.literal = "".join(p for p in pieces if isinstance(p, str))
            self.spec = Spec((self.literal,), whole=exact)
        else:
            self.regex = re.compile(_regex_of(pieces), re.DOTALL)
            self.spec = Spec(pieces, whole=True)
        """The pattern for a ``PatternSet`` (the decision path's matcher)."""
        self.fn = _fast(self.literal, self.regex, exact)
        """The same test as one C-level call (truthy on a match), for one-by-one matching."""

    def __call__(self, text: str) -> bool:
        if self.literal is not None:
            return text == self.literal if self.exact else self.literal in text
        assert self.regex is not None
        return self.regex.fullmatch(text) is not None


class _PathMatcher:
    """Matches normalised absolute paths with ``*`` (one segment) and ``**`` (any depth)."""

    __slots__ = ("literal", "regex", "exact", "fn", "spec")

    def __init__(self, content: str, *, exact: bool, cwd: str) -> None:
        self.exact = exact
        raw, anchored = rule_path(content, cwd, exact=exact)
        parts = _split_glob(raw)
        self.literal: str | None = None
        self.regex: re.Pattern[str] | None = None
        if all(p is not None for p in parts):
            # A bare DENY/ASK content is a substring of the path; a bare ALLOW equals it.
            self.literal = "".join(p for p in parts if p is not None)
            self.spec = Spec((self.literal,), whole=exact)
            self.fn = _fast(self.literal, None, exact)
            return
        pieces = _path_glob_pieces(raw)
        if not anchored and (not pieces or pieces[0] is not DIRS):
            pieces.insert(0, DIRS)  # matches those trailing components at any depth
        self.spec = Spec(tuple(pieces), whole=True)
        self.regex = re.compile(_regex_of(pieces), re.DOTALL)
        self.fn = _fast(None, self.regex, exact)

    def __call__(self, path: str) -> bool:
        if self.literal is not None:
            return path == self.literal if self.exact else self.literal in path
        assert self.regex is not None
        return self.regex.fullmatch(path) is not None


def rule_path(content: str, cwd: str, *, exact: bool) -> tuple[str, bool]:
    """A rule's path content normalised like call paths (DEC-1 rev 2), and whether it is
    anchored at the root.

    - ``/abs/...``: folded (``.``, ``..``, repeated and trailing slashes), anchored;
    - ``./x``, ``../x``, ``.``, ``..``: relative to ``cwd``, folded, anchored, so
      ``read_file(./.env)`` names the same file as ``read_file(/w/.env)`` for every effect;
    - ALLOW (``exact``): a bare content or one with a ``/`` is relative to ``cwd`` too (an
      ALLOW never matches more than written: ``read_file(README.md)`` is the one in the
      working directory); only ``**/x`` and slash-free globs (``*.py``) match at any depth;
    - DENY/ASK: ``x/y`` matches those trailing components at any depth and a pattern without
      ``/`` matches the base name at any depth (a bare one is a substring), so a protective
      rule written relative catches the file wherever it is.

    Folding never removes a wildcard component (``**/..`` stays), which only makes such a
    pattern match less, never more. Escaped stars (``\\*``) are kept as written.
    """
    dotted = content in (".", "..") or content.startswith(("./", "../"))
    if content.startswith("/"):
        return _fold(content), True
    if dotted or (exact and ("/" in content.rstrip("/") or "*" not in content)):
        if exact and content.startswith("**"):
            return _fold(content), False
        return _fold(posixpath.join(cwd or "/", content)), True
    return _fold(content), False


def _fold(path: str) -> str:
    """Fold ``.``, ``..`` (after a wildcard-free component) and repeated or trailing slashes."""
    absolute = path.startswith("/")
    out: list[str] = []
    for comp in path.split("/"):
        if comp in ("", "."):
            continue
        if comp == ".." and out and out[-1] != ".." and "*" not in out[-1]:
            out.pop()
        elif comp == ".." and absolute and not out:
            continue  # /.. is /
        else:
            out.append(comp)
    folded = "/".join(out)
    return "/" + folded if absolute else folded or "."


def _path_glob_pieces(glob: str) -> list[Piece]:
    """Split a path glob: ``**/`` → any directories, ``**`` → anything, ``*`` → one segment."""
    glob = re.sub(r"/+", "/", glob)
    out: list[Piece] = []
    buf: list[str] = []

    def wild(w: Piece) -> None:
        if buf:
            out.append("".join(buf))
            buf.clear()
        out.append(w)

    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            wild(DIRS)
            i += 3
        elif glob.startswith("**", i):
            wild(ANY)
            i += 2
        elif glob[i] == "*":
            wild(SEGMENT)
            i += 1
        elif glob[i] == "\\" and i + 1 < len(glob) and glob[i + 1] in "*\\":
            buf.append(glob[i + 1])
            i += 2
        else:
            buf.append(glob[i])
            i += 1
    if buf:
        out.append("".join(buf))
    return out


class CallContent:
    """The matchable content of one call, computed once per decision (not shared).

    A plain slotted class rather than a dataclass: one is built per decision, and an
    explicit ``__init__`` that finds the primary field inline costs about half as much.
    """

    __slots__ = (
        "tool_name", "fields", "paths", "sub_commands", "allow_sub_commands", "whole_command",
        "primary_field",
    )  # fmt: skip

    def __init__(
        self,
        tool_name: str,
        fields: Mapping[str, str],
        paths: Mapping[str, str],
        sub_commands: tuple[str, ...] = (),
        allow_sub_commands: tuple[str, ...] = (),
        whole_command: str = "",
    ) -> None:
        self.tool_name = tool_name
        self.fields = fields
        """Raw content fields present in the arguments (command, file_path, path, pattern, url)."""
        self.paths = paths
        """Normalised absolute paths for the path fields present."""
        self.sub_commands = sub_commands
        """For run_bash: each simple command's text, names normalised (DENY/ASK form)."""
        self.allow_sub_commands = allow_sub_commands
        """For run_bash: the same with privilege wrappers kept (ALLOW form)."""
        self.whole_command = whole_command
        """For run_bash: the whole command with whitespace collapsed."""
        declared = PRIMARY_FIELDS.get(tool_name)
        if declared is None and fields:
            for name in CONTENT_FIELDS:
                if name in fields:
                    declared = name
                    break
        self.primary_field: str | None = declared
        """The field an ALLOW rule matches: the tool's declared one, else the first present."""

    def __repr__(self) -> str:
        return (
            f"CallContent(tool_name={self.tool_name!r}, fields={self.fields!r}, "
            f"paths={self.paths!r}, sub_commands={self.sub_commands!r})"
        )

    @property
    def primary_content(self) -> str | None:
        """The primary field's raw value, if present."""
        name = self.primary_field
        return None if name is None else self.fields.get(name)


_CRUDE_SPLIT = re.compile(r"\|\||&&|[;&|\n`()]|\$\(")


def crude_split(command: str) -> tuple[str, ...]:
    """Split a command on every operator character, without a parser.

    Used only when no executor analysis is available. It over-splits (inside quotes too),
    which is the safe direction: DENY/ASK see more pieces, ALLOW must cover every piece.
    """
    pieces = [p.strip() for p in _CRUDE_SPLIT.split(command)]
    return tuple(p for p in pieces if p)


MAX_CONTENT_CHARS = MAX_COMMAND_CHARS
"""The longest content field (command, path, pattern, url) a call may bring to matching."""
MAX_SUB_COMMAND_CHARS = 4 * MAX_COMMAND_CHARS
"""The most text the executor's sub-commands of one command may hold in total (they repeat
nested parts of the command, so a little more than the command itself)."""


def _refuse_long(fields: Mapping[str, str]) -> None:
    name, value = max(fields.items(), key=lambda kv: len(kv[1]))
    raise InvalidArgument(
        f"arguments.{name} is {len(value)} characters, over the limit of "
        f"{MAX_CONTENT_CHARS} (MAX_COMMAND_CHARS, the executor's command cap)",
        field=f"arguments.{name}",
        limit=str(MAX_CONTENT_CHARS),
    )


def _content_fields(tool_name: str) -> tuple[str, ...]:
    """CONTENT_FIELDS plus the tool's declared primary field (``query`` for search_papers)."""
    extra = PRIMARY_FIELDS.get(tool_name)
    return CONTENT_FIELDS if extra is None or extra in CONTENT_FIELDS else (*CONTENT_FIELDS, extra)


def call_content(
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    cwd: str,
    sub_commands: Sequence[str] | None = None,
) -> CallContent:
    """Extract and normalise the content of a call.

    ``sub_commands`` are the executor's simple-command texts for run_bash; when None the
    command is split crudely (see ``crude_split``).

    Raises ``InvalidArgument`` naming the limit for a content field longer than
    ``MAX_CONTENT_CHARS`` (the executor's command cap) or sub-commands over
    ``MAX_SUB_COMMAND_CHARS`` in total: matching is linear in the input, and the input is
    bounded.
    """
    get = arguments.get
    fields = {k: v for k in _content_fields(tool_name) if isinstance(v := get(k), str)}
    if fields and max(map(len, fields.values())) > MAX_CONTENT_CHARS:
        _refuse_long(fields)
    if sub_commands and sum(map(len, sub_commands)) > MAX_SUB_COMMAND_CHARS:
        raise InvalidArgument(
            f"the inspection's sub-commands hold over {MAX_SUB_COMMAND_CHARS} characters "
            "(MAX_SUB_COMMAND_CHARS)",
            field="inspection.sub_commands",
            limit=str(MAX_SUB_COMMAND_CHARS),
        )
    paths: dict[str, str] = {}
    if fields:
        for k in _PATH_FIELD_ORDER:
            v = fields.get(k)
            if v:
                paths[k] = normalize_path(v, cwd)
    if tool_name != BASH_TOOL or "command" not in fields:
        return CallContent(tool_name, fields, paths)
    command = fields["command"]
    raw_subs = tuple(sub_commands) if sub_commands is not None else crude_split(command)
    # Both normalised forms from one split per sub-command (they differ only for wrappers).
    subs: list[str] = []
    allow_subs: list[str] = []
    for raw in raw_subs:
        deny_form, allow_form = _normalize_both(raw)
        if deny_form:
            subs.append(deny_form)
        if allow_form:
            allow_subs.append(allow_form)
    return CallContent(
        tool_name,
        fields,
        paths,
        tuple(subs),
        tuple(allow_subs),
        " ".join(command.split()),
    )


def content_matches(
    call: CallContent,
    text: Callable[[str], bool],
    path: Callable[[str], bool],
    command: Callable[[str], bool],
) -> bool:
    """DENY/ASK content semantics (DEC-1/2), shared by one rule and a tier's screen: any
    content field matches as text; path fields also in their normalised form; for
    run_bash's command, also any single sub-command."""
    for name, value in call.fields.items():
        if name in PATH_FIELDS:
            norm = call.paths.get(name)
            if (norm is not None and path(norm)) or text(value):
                return True
        elif name == "command" and call.tool_name == BASH_TOOL:
            if text(value):
                return True
            for sub in call.sub_commands:
                if command(sub):
                    return True
        elif text(value):
            return True
    return False


@dataclass(frozen=True, eq=False)
class CompiledRule:
    """A rule with its pattern parsed and its matchers built, ready to test calls."""

    rule: Rule
    tool: str | None
    content: str | None
    order: int
    """Position in evaluation order (lower is earlier)."""
    _text: _TextMatcher | None = field(default=None, repr=False)
    _path: _PathMatcher | None = field(default=None, repr=False)
    _command: _TextMatcher | None = field(default=None, repr=False)

    @property
    def effect(self) -> Effect:
        """The rule's effect."""
        return self.rule.effect

    @property
    def text_matcher(self) -> _TextMatcher:
        """The free-text matcher (only for rules with content)."""
        assert self._text is not None
        return self._text

    @property
    def path_matcher(self) -> _PathMatcher:
        """The path matcher (only for rules with content)."""
        assert self._path is not None
        return self._path

    @property
    def command_matcher(self) -> _TextMatcher:
        """The bash command matcher (only for rules with content)."""
        assert self._command is not None
        return self._command

    @property
    def is_literal(self) -> bool:
        """True when the rule has no content, or content without wildcards."""
        return self._command is None or self._command.literal is not None

    def matches(self, call: CallContent) -> bool:
        """DENY/ASK semantics: the tool matches and any content field matches (DEC-1/2)."""
        if self.tool is not None and self.tool != call.tool_name:
            return False
        if self.content is None:
            return True
        assert self._text is not None and self._path is not None and self._command is not None
        return content_matches(call, self._text.fn, self._path.fn, self._command.fn)

    def allows(self, call: CallContent) -> bool:
        """ALLOW semantics for non-bash content: the primary field matches exactly as written."""
        if self.tool is not None and self.tool != call.tool_name:
            return False
        if self.content is None:
            return True
        field_name = call.primary_field
        if field_name is None or field_name not in call.fields:
            return False
        assert self._text is not None and self._path is not None
        if field_name in PATH_FIELDS:
            return bool(self._path.fn(call.paths.get(field_name, "")))
        return bool(self._text.fn(call.fields[field_name]))

    def allows_command(self, text: str) -> bool:
        """ALLOW semantics for one bash sub-command (or the whole command)."""
        if self.content is None:
            return True
        assert self._command is not None
        return bool(self._command.fn(text))


def compile_rule(rule: Rule, order: int, *, cwd: str = "/") -> CompiledRule:
    """Parse and compile one rule; raise ``InvalidPattern`` if its pattern is bad."""
    parsed = parse_pattern(rule.pattern)
    if parsed.content is None:
        return CompiledRule(rule=rule, tool=parsed.tool, content=None, order=order)
    exact = rule.effect is Effect.ALLOW
    content = parsed.content
    command_content = content
    if parsed.tool in (None, BASH_TOOL):
        command_content = _normalize_pattern_command(content, exact=exact)
    return CompiledRule(
        rule=rule,
        tool=parsed.tool,
        content=content,
        order=order,
        _text=_TextMatcher(content, exact=exact),
        _path=_PathMatcher(content, exact=exact, cwd=cwd),
        _command=_TextMatcher(command_content, exact=exact),
    )


def _normalize_pattern_command(content: str, *, exact: bool) -> str:
    """Normalise a command pattern's name like calls are, so `/usr/bin/rm *` means `rm *`."""
    first, _, rest = content.strip().partition(" ")
    if "*" in first or "\\" in first:
        return content
    name = normalize_command(first, look_through_privilege=not exact) or first
    return " ".join(f"{name} {rest}".split()) if rest else name


class RuleTier:
    """A tool's rules of one effect, in order, and which of them match a call (#18).

    ``matching`` (DENY/ASK), ``allowing`` (non-bash ALLOW) and ``allowing_command`` (bash
    ALLOW, one sub-command) give exactly the rules whose ``CompiledRule.matches``,
    ``allows`` or ``allows_command`` is true, in order, with the same field-by-field logic
    (``content_matches``). But instead of trying each rule, each kind of content (free text,
    normalised path, bash sub-command) is looked up once in a ``PatternSet`` of all the
    tier's patterns: the cost does not grow with the number of rules and is linear in the
    call's content, whatever the patterns (PERF-1c). The sets are built on first use (a
    tier for a tool no call names costs nothing). All rules given must apply to the call's
    tool (``RuleIndex.tiers`` guarantees it).
    """

    __slots__ = ("rules", "_plain", "_bare", "_content", "_sets", "_lock")

    def __init__(self, rules: Sequence[CompiledRule]) -> None:
        self.rules = tuple(rules)
        self._plain = tuple(c.rule for c in self.rules)
        self._bare = tuple(i for i, c in enumerate(self.rules) if c.content is None)
        """Rules without content match every call of their tool."""
        self._content = [i for i, c in enumerate(self.rules) if c.content is not None]
        self._sets: list[PatternSet | None] = [None, None, None]
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def _set(self, kind: int) -> Callable[[str], Sequence[int]]:
        """``search`` of the pattern set of kind 0 (text), 1 (path) or 2 (command), built
        once; it answers positions in ``rules``."""
        hit = self._sets[kind]
        if hit is not None:
            return hit.search
        with self._lock:
            hit = self._sets[kind]
            if hit is None:
                rules = self.rules
                if kind == 0:
                    specs = [rules[i].text_matcher.spec for i in self._content]
                elif kind == 1:
                    specs = [rules[i].path_matcher.spec for i in self._content]
                else:
                    specs = [rules[i].command_matcher.spec for i in self._content]
                hit = self._sets[kind] = PatternSet(specs, self._content)
        return hit.search

    def build(self) -> None:
        """Build every pattern set now (so a bad pattern set fails at load, not mid-call)."""
        for kind in range(3):
            self._set(kind)

    def _ordered(self, hits: Iterable[int]) -> list[CompiledRule]:
        rules = self.rules
        return [rules[i] for i in sorted(set(hits))]

    def matching(self, call: CallContent) -> list[CompiledRule]:
        """The rules whose DENY/ASK ``matches`` holds for ``call``, in order."""
        rules = self.rules
        return [rules[i] for i in self._matching(call)]

    def matching_rules(self, call: CallContent) -> list[Rule]:
        """``matching`` as the rules themselves (what ``decide`` records)."""
        plain = self._plain
        return [plain[i] for i in self._matching(call)] if plain else []

    def _matching(self, call: CallContent) -> Sequence[int]:
        if not self._content:
            return range(len(self.rules))  # every rule is bare (or there are none)
        hits: list[int] = list(self._bare)
        text = self._set(0)
        for name, value in call.fields.items():
            hits += text(value)
            if name in PATH_FIELDS:
                norm = call.paths.get(name)
                if norm is not None:
                    hits += self._set(1)(norm)
            elif name == "command" and call.tool_name == BASH_TOOL:
                command = self._set(2)
                for sub in call.sub_commands:
                    hits += command(sub)
        if not hits:
            return hits
        return sorted(set(hits)) if len(hits) > 1 else hits

    def allowing(self, call: CallContent) -> list[CompiledRule]:
        """The rules whose non-bash ALLOW ``allows`` holds for ``call``, in order."""
        if not self._content:
            return list(self.rules)
        field_name = call.primary_field
        if field_name is None or field_name not in call.fields:
            return [self.rules[i] for i in self._bare]
        if field_name in PATH_FIELDS:
            hits = self._set(1)(call.paths.get(field_name, ""))
        else:
            hits = self._set(0)(call.fields[field_name])
        if self._bare:
            return self._ordered([*self._bare, *hits])
        return self._ordered(hits) if hits else []

    def allowing_command(self, text: str) -> list[CompiledRule]:
        """The rules whose ``allows_command`` holds for ``text``, in order."""
        if not self._content:
            return list(self.rules)
        hits = self._set(2)(text)
        if self._bare:
            return self._ordered([*self._bare, *hits])
        return self._ordered(hits) if hits else []


class RuleIndex:
    """Compiled rules kept by tool name, in evaluation order, split by effect."""

    def __init__(self, rules: Iterable[Rule], *, cwd: str = "/", start: int = 0) -> None:
        self.cwd = cwd
        self.compiled: tuple[CompiledRule, ...] = tuple(
            compile_rule(r, start + i, cwd=cwd) for i, r in enumerate(rules)
        )
        self._by_tool: dict[str, list[CompiledRule]] = {}
        self._any_tool: list[CompiledRule] = []
        for c in self.compiled:
            if c.tool is None:
                self._any_tool.append(c)
            else:
                self._by_tool.setdefault(c.tool, []).append(c)
        self._cache: dict[str, tuple[tuple[CompiledRule, ...], ...]] = {}
        self._tiers: dict[str, tuple[RuleTier, RuleTier, RuleTier]] = {}
        self._shared: dict[tuple[CompiledRule, ...], RuleTier] = {}

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The rules in evaluation order."""
        return tuple(c.rule for c in self.compiled)

    def for_tool(self, tool_name: str) -> tuple[tuple[CompiledRule, ...], ...]:
        """Rules that may apply to ``tool_name``, as (deny, ask, allow) tuples in order."""
        hit = self._cache.get(tool_name)
        if hit is not None:
            return hit
        merged = sorted(self._by_tool.get(tool_name, []) + self._any_tool, key=lambda c: c.order)
        result = tuple(tuple(c for c in merged if c.effect is e) for e in Effect)
        if len(self._cache) < 4096:  # tool names come from callers; bound the memo
            self._cache[tool_name] = result
        return result

    def tiers(self, tool_name: str) -> tuple[RuleTier, RuleTier, RuleTier]:
        """``for_tool`` as matchers per effect: (deny, ask, allow)."""
        hit = self._tiers.get(tool_name)
        if hit is not None:
            return hit
        deny, ask, allow = self.for_tool(tool_name)
        result = (self._tier(deny), self._tier(ask), self._tier(allow))
        if len(self._tiers) < 4096:  # tool names come from callers; bound the memo
            self._tiers[tool_name] = result
        return result

    def _tier(self, rules: tuple[CompiledRule, ...]) -> RuleTier:
        """The tier of ``rules``, shared by every tool with the same rules: all tools
        without rules of their own get the wildcard rules, so a stream of unknown tool
        names reuses one tier instead of building pattern sets per name."""
        hit = self._shared.get(rules)
        if hit is None:
            hit = RuleTier(rules)
            if len(self._shared) < 4096:
                self._shared[rules] = hit
        return hit

    def build(self) -> None:
        """Build every tier's pattern sets now: for each tool the rules name and for the
        tools they do not (the wildcard rules alone), so the first call of a tool after a
        policy load does not pay for compiling them and a pattern the matcher cannot take
        fails at load."""
        for tool in [*self._by_tool, "*"]:
            for tier in self.tiers(tool):
                tier.build()

    def __len__(self) -> int:
        return len(self.compiled)
