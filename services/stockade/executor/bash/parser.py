"""Bash source → simple commands, on tree-sitter-bash (SPEC EXE-8).

The parser walks the whole syntax tree once and returns every simple command wherever it
sits (pipelines, lists, subshells, groups, functions, loop bodies, command and process
substitutions, here-doc bodies, ``${x:-$(cmd)}`` defaults, arithmetic, array subscripts),
every redirection, every variable assignment, and the facts the judgement needs about the
words: their static value after quote removal, whether quoting or escapes were used,
whether they contain expansions. It judges nothing itself.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from stockade.executor.bash.braces import Atom, TooMany, expand_atoms

if TYPE_CHECKING:
    from stockade.executor.bash.isolated import IsolatedParser

__all__ = [
    "Assignment",
    "ParsedScript",
    "RawCommand",
    "Redirect",
    "Word",
    "parse",
]

# One parser for the process: building one costs far more than a parse, and a parse of a
# typical command is ~10 µs. tree-sitter parsers are not thread-safe; the executor calls
# analyze() from the event loop thread only.
_LANGUAGE: Final = Language(tree_sitter_bash.language())
_PARSER: Final = Parser(_LANGUAGE)

# Node kinds by symbol id: ``_KINDS[node.kind_id]`` is ``node.type`` (both are the grammar's
# name of the node's symbol), read as an int instead of a new str built per call; the names
# are interned, so set lookups and comparisons with literals find them by identity. Ids
# past the table (ERROR is 65535) fall back to ``node.type`` (see _kind).
_KINDS: Final[tuple[str, ...]] = tuple(
    sys.intern(_LANGUAGE.node_kind_for_id(i) or "") for i in range(_LANGUAGE.node_kind_count)
)
_KIND_COUNT: Final = len(_KINDS)

# The results are built through the helpers below (_new_word …), which take every field, so
# none is left to a default by mistake.

# Deeper nesting than this is refused rather than walked: it bounds the recursion, and no
# honest command nests 64 levels of substitutions or groups.
_MAX_DEPTH: Final = 64

_GLOB_CHARS: Final = frozenset("*?[")

# Escapes that keep a backslash meaningful inside double quotes (bash manual, QUOTING).
_DQ_ESCAPABLE: Final = frozenset('$`"\\\n')

# The parse results below are frozen (a kept parse is shared by later analyses of the same
# text, so nothing may change it). Word, Redirect, Assignment, RawCommand and ParsedScript,
# built for every word, command and parse, are dataclasses with an __init__ of their own
# that sets each field with object.__setattr__ (what the generated one does): compiled with
# mypyc they are native
# classes, built by one allocation and direct stores and read by direct loads, where a
# NamedTuple is built through tuple.__new__ (an argument tuple, a tuple and a copy of it:
# about 1,200 instructions a word; SPEC §9 PERF-4a). Equality, hash and repr are the
# dataclass's own (the isolated child's answer is compared field by field).

_ANSI_SIMPLE: Final = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


@dataclass(frozen=True, init=False)
class Word:
    """One shell word as written and, where it is static, as bash will see it."""

    text: str
    """The source text of the word."""
    value: str | None
    """The word after quote removal, or None when it contains an expansion."""
    quoted: bool
    """Quotes, ``$'..'`` or backslash escapes were used somewhere in the word."""
    expanded: bool
    """It contains a parameter, arithmetic, command or process expansion."""
    glob: bool
    """An unquoted glob character (``*``, ``?``, ``[``) or brace expansion is present."""
    home_path: str | None = None
    """For a word whose only expansion is ``$HOME``/``${HOME}``: the value with ``~``."""
    braces: tuple[Word, ...] | None = None
    """The words bash makes of this one by brace expansion (``{-c,x}`` is ``-c`` and ``x``),
    None when it has none; ``()`` when there would be more than MAX_BRACE_WORDS."""

    def __init__(
        self,
        text: str,
        value: str | None,
        quoted: bool,
        expanded: bool,
        glob: bool,
        home_path: str | None = None,
        braces: tuple[Word, ...] | None = None,
    ) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "quoted", quoted)
        object.__setattr__(self, "expanded", expanded)
        object.__setattr__(self, "glob", glob)
        object.__setattr__(self, "home_path", home_path)
        object.__setattr__(self, "braces", braces)

    @property
    def path_value(self) -> str | None:
        """The value to judge as a path: the static value, or the ``$HOME`` form."""
        return self.value if self.value is not None else self.home_path


@dataclass(frozen=True, init=False)
class Redirect:
    """A redirection: ``>``, ``>>``, ``<``, ``&>``, ``2>&1``, here-doc, here-string."""

    op: str
    """The operator (``>``, ``>>``, ``<``, ``<>``, ``&>``, ``>&``, ``<<``, ``<<<`` ...)."""
    fd: str | None
    """The explicit file descriptor (``2`` in ``2>x``), if any."""
    target: Word | None
    """The destination word; None for here-docs and here-strings."""

    def __init__(self, op: str, fd: str | None, target: Word | None) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "fd", fd)
        object.__setattr__(self, "target", target)


@dataclass(frozen=True, init=False)
class Assignment:
    """``NAME=value``: a prefix of a command, a statement of its own, or in ``export``."""

    name: str
    """The variable name (without any subscript)."""
    value: Word | None
    """The assigned word (None for ``NAME=`` or an array)."""
    raw: str
    """The source text of the whole assignment."""
    kind: str = "statement"
    """Where it stands: ``statement`` (``X=1`` alone, ``${X:=1}``, ``for X in``), ``prefix``
    (``X=1 cmd``: the command's environment), ``export`` (``export``/``declare -x``: the
    environment of every later command), ``declare`` (``declare``/``local`` without -x) or
    ``arithmetic`` (``((X=1))``, ``${a[X++]}``: a number only known at run time)."""

    def __init__(self, name: str, value: Word | None, raw: str, kind: str = "statement") -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "raw", raw)
        object.__setattr__(self, "kind", kind)


@dataclass(frozen=True, init=False)
class RawCommand:
    """A simple command as parsed: its name word, arguments, own prefix and redirects."""

    name: Word
    """The command-name word (for ``export`` & co. the keyword itself)."""
    args: tuple[Word, ...]
    """The argument words after the name."""
    assignments: tuple[Assignment, ...]
    """``VAR=x`` prefixes of this command."""
    redirects: tuple[Redirect, ...]
    """Redirections written on this command (also listed in ``ParsedScript.redirects``)."""
    in_function: str | None
    """The innermost enclosing function's name, if the command sits in a function body."""

    def __init__(
        self,
        name: Word,
        args: tuple[Word, ...],
        assignments: tuple[Assignment, ...],
        redirects: tuple[Redirect, ...],
        in_function: str | None,
    ) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "assignments", assignments)
        object.__setattr__(self, "redirects", redirects)
        object.__setattr__(self, "in_function", in_function)


@dataclass(frozen=True, init=False)
class ParsedScript:
    """Everything the judgement needs from one command line."""

    commands: tuple[RawCommand, ...]
    """Every simple command, in source order (an outer command before its substitutions)."""
    redirects: tuple[Redirect, ...]
    """Every redirection anywhere, including those on groups, loops and subshells."""
    assignments: tuple[Assignment, ...]
    """Every assignment anywhere (statements, prefixes, ``export``/``declare`` arguments)."""
    functions: tuple[str, ...]
    """Names of the functions the script defines."""
    recursive_functions: tuple[str, ...]
    """Functions whose body calls the function itself (the fork-bomb shape)."""
    evaluated_texts: tuple[str, ...]
    """Static strings bash will evaluate as code later: ``$(``/backticks inside arithmetic,
    ``[[ ]]`` operands and assignment values (``x='a[$(id)]'; echo $((x))`` runs ``id``)."""
    error: str | None
    """Why the text could not be parsed, or None."""
    empty: bool = False
    """Nothing but comments and blanks."""
    arithmetic_names: tuple[str, ...] = ()
    """Variables whose values bash evaluates as arithmetic or as a variable name
    (``$((x))``, ``((x))``, ``${a[x]}``, ``${s:x}``, ``[[ $x -eq 1 ]]``, ``${!x}``,
    ``[[ -v $x ]]``): a value like ``a[$(cmd)]`` read at run time runs cmd there."""

    def __init__(
        self,
        commands: tuple[RawCommand, ...],
        redirects: tuple[Redirect, ...],
        assignments: tuple[Assignment, ...],
        functions: tuple[str, ...],
        recursive_functions: tuple[str, ...],
        evaluated_texts: tuple[str, ...],
        error: str | None,
        empty: bool = False,
        arithmetic_names: tuple[str, ...] = (),
    ) -> None:
        object.__setattr__(self, "commands", commands)
        object.__setattr__(self, "redirects", redirects)
        object.__setattr__(self, "assignments", assignments)
        object.__setattr__(self, "functions", functions)
        object.__setattr__(self, "recursive_functions", recursive_functions)
        object.__setattr__(self, "evaluated_texts", evaluated_texts)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "empty", empty)
        object.__setattr__(self, "arithmetic_names", arithmetic_names)


def _new_word(
    text: str,
    value: str | None,
    quoted: bool,
    expanded: bool,
    glob: bool,
    home_path: str | None,
    braces: tuple[Word, ...] | None,
) -> Word:
    return Word(text, value, quoted, expanded, glob, home_path, braces)


def _new_redirect(op: str, fd: str | None, target: Word | None) -> Redirect:
    return Redirect(op, fd, target)


def _new_assignment(name: str, value: Word | None, raw: str, kind: str) -> Assignment:
    return Assignment(name, value, raw, kind)


def _new_command(
    name: Word,
    args: tuple[Word, ...],
    assignments: tuple[Assignment, ...],
    redirects: tuple[Redirect, ...],
    in_function: str | None,
) -> RawCommand:
    return RawCommand(name, args, assignments, redirects, in_function)


def _kind(node: Node) -> str:
    """``node.type``, from the table of kinds (see _KINDS)."""
    kind_id = node.kind_id
    return _KINDS[kind_id] if kind_id < _KIND_COUNT else node.type


def _decode_ansi_c(body: str) -> str:
    """Decode the inside of ``$'...'`` as bash does."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch != "\\" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[nxt])
            i += 2
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            j = i + 2
            while j < n and j < i + 2 + width and body[j] in "0123456789abcdefABCDEF":
                j += 1
            digits = body[i + 2 : j]
            if digits:
                code = int(digits, 16)
                out.append(chr(code) if code < 0x110000 else "\ufffd")
            else:
                out.append("\\" + nxt)
            i = j
        elif nxt in "01234567":
            j = i + 1
            while j < n and j < i + 4 and body[j] in "01234567":
                j += 1
            out.append(chr(int(body[i + 1 : j], 8) & 0xFF))
            i = j
        elif nxt == "c" and i + 2 < n:
            out.append(chr(ord(body[i + 2]) & 0x1F))
            i += 3
        else:
            out.append("\\" + nxt)
            i += 2
    # bash cuts the string at a NUL (`$'/etc/shadow\\0x'` is `/etc/shadow`; found by the
    # differential test).
    return "".join(out).split("\0", 1)[0]


def _unescape_bare(text: str) -> tuple[str, bool, bool]:
    """Quote removal for an unquoted word: (value, had a backslash, has an unquoted glob)."""
    if "\\" not in text:
        return text, False, any(c in _GLOB_CHARS for c in text)
    out: list[str] = []
    glob = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 < n:
                if text[i + 1] != "\n":  # backslash-newline is a line continuation
                    out.append(text[i + 1])
                i += 2
            else:
                i += 1
            continue
        if ch in _GLOB_CHARS:
            glob = True
        out.append(ch)
        i += 1
    return "".join(out), True, glob


def _unescape_double(text: str) -> str:
    """Quote removal for the content of a double-quoted string."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in _DQ_ESCAPABLE:
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


_BARE: Final = 0
_QUOTED: Final = 1
_DYNAMIC: Final = 2


class _WordBuilder:
    """Accumulates the parts of one word."""

    __slots__ = (
        "parts",
        "static",
        "quoted",
        "expanded",
        "glob",
        "home_parts",
        "pieces",
        "brace",
        "data",
        "source",
    )

    def __init__(self, data: bytes, source: str | None) -> None:
        # The walk's source (see _Walker: node byte offsets index ``data``; ``source`` is
        # the same text as str when it is ASCII), which each part's text is sliced from.
        self.data = data
        self.source = source
        self.parts: list[str] = []
        self.home_parts: list[str] | None = []
        self.static = True
        self.quoted = False
        self.expanded = False
        self.glob = False
        # (kind, text) in order, for brace expansion: unquoted source, a quoted value, or
        # the source of a dynamic part.
        self.pieces: list[tuple[int, str]] = []
        self.brace = False

    def literal(self, text: str, kind: int = _QUOTED) -> None:
        self.parts.append(text)
        self.pieces.append((kind, text))
        if self.home_parts is not None:
            self.home_parts.append(text)

    def dynamic(self, home: bool = False, source: str = "") -> None:
        self.pieces.append((_DYNAMIC, source))
        self.static = False
        self.expanded = True
        if self.home_parts is not None:
            if home:
                # `$HOME` can only stand at the start to mean the home directory.
                if self.parts or self.home_parts:
                    self.home_parts = None
                else:
                    self.home_parts.append("~")
            else:
                self.home_parts = None

    def add(self, node: Node) -> None:
        kind = _kind(node)
        if kind == "word":
            source = _slice(node, self.data, self.source)
            value, escaped, glob = _unescape_bare(source)
            self.literal(value)
            self.pieces[-1] = (_BARE, source)
            self.brace = self.brace or "{" in source
            self.quoted = self.quoted or escaped
            # An unquoted brace may start brace expansion (`{/etc/shadow,""}`): judged
            # like a glob, by expanding it.
            self.glob = self.glob or glob or "{" in value
        elif kind == "raw_string":
            self.literal(_slice(node, self.data, self.source)[1:-1])
            self.quoted = True
        elif kind in ("string", "translated_string"):
            self.quoted = True
            if kind == "string" and _translated(node):
                # `$"..."`: bash looks the string up in the message catalog TEXTDOMAIN and
                # TEXTDOMAINDIR name (a planted .mo file): its value is only known at run
                # time, whatever it holds.
                self.dynamic(source=_slice(node, self.data, self.source))
                return
            for child in node.children:
                ctype = _kind(child)
                if ctype == "string_content":
                    self.literal(_unescape_double(_slice(child, self.data, self.source)))
                elif ctype == '"':
                    continue
                elif ctype == "$" and not child.is_named:
                    # A lone `$` (e.g. `"cost $"` or the `$` of `$"..."`) is literal.
                    if kind == "string":
                        self.literal("$")
                else:
                    self.dynamic(
                        home=_is_home(child, self.data, self.source),
                        source=_slice(child, self.data, self.source),
                    )
        elif kind == "ansi_c_string":
            self.literal(_decode_ansi_c(_slice(node, self.data, self.source)[2:-1]))
            self.quoted = True
        elif kind == "number":
            self.literal(_slice(node, self.data, self.source), _BARE)
        elif kind == "concatenation":
            for child in node.children:
                self.add(child)
        elif kind == "brace_expression":
            self.literal(_slice(node, self.data, self.source), _BARE)
            self.glob = True
            self.brace = True
        elif kind in ("simple_expansion", "expansion"):
            self.dynamic(
                home=_is_home(node, self.data, self.source),
                source=_slice(node, self.data, self.source),
            )
        elif kind == "$" and not node.is_named:
            following = node.next_sibling
            if following is None or _kind(following) != "string":
                self.literal("$")  # `$"..."` drops it (the string is translated)
        else:
            # Command/process substitution, arithmetic expansion, arrays, anything else:
            # the value is only known when the command runs.
            self.dynamic(source=_slice(node, self.data, self.source))

    def build(self, text: str) -> Word:
        value = "".join(self.parts) if self.static else None
        home = None
        if not self.static and self.home_parts:
            home = "".join(self.home_parts)
        braces = self.expand_braces() if self.brace else None
        return _new_word(text, value, self.quoted, self.expanded, self.glob, home, braces)

    def expand_braces(self) -> tuple[Word, ...] | None:
        """The words of brace expansion (EXE-8c), None when the braces are literal."""
        atoms: list[Atom] = []
        for kind, piece in self.pieces:
            if kind == _BARE:
                _bare_atoms(piece, atoms)
            elif kind == _QUOTED:
                atoms.append(("c", piece, False, True))
            else:
                atoms.append(("d", piece))
        try:
            items = expand_atoms(atoms)
        except TooMany:
            return ()
        if len(items) == 1 and items[0] is atoms:
            return None
        return tuple(self._item_word(item) for item in items)

    def _item_word(self, item: list[Atom]) -> Word:
        texts: list[str] = []
        dynamic = False
        glob = False
        quoted = False
        for atom in item:
            kind = atom[0]
            if kind == "d":
                dynamic = True
                texts.append(str(atom[1]))
            elif kind == "c":
                texts.append(str(atom[1]))
                glob = glob or bool(atom[2])
                quoted = quoted or len(atom) > 3
            else:
                texts.append(kind)  # a brace or comma that stayed literal
                glob = glob or kind == "{"
        joined = "".join(texts)
        return _new_word(joined, None if dynamic else joined, quoted, dynamic, glob, None, None)


def _bare_atoms(source: str, out: list[Atom]) -> None:
    """Atoms of unquoted source text: unescaped braces and commas are syntax."""
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if ch == "\\":
            if i + 1 < n and source[i + 1] != "\n":
                out.append(("c", source[i + 1], False, True))
            i += 2
            continue
        if ch in "{,}":
            out.append((ch,))
        else:
            out.append(("c", ch, ch in _GLOB_CHARS))
        i += 1


def _translated(string: Node) -> bool:
    """Whether the ``string`` node is the ``"..."`` of a ``$"..."`` (locale translation):
    tree-sitter leaves the ``$`` as an unnamed sibling just before it, or before the
    concatenation the string starts."""
    anchor = string
    before = string.prev_sibling
    if before is None:
        parent = string.parent
        if parent is None or _kind(parent) != "concatenation":
            return False
        anchor = parent
        before = parent.prev_sibling
    return (
        before is not None
        and not before.is_named
        and _kind(before) == "$"
        and before.end_byte == anchor.start_byte
    )


def _is_home(node: Node, data: bytes, source: str | None) -> bool:
    """Whether ``node`` is exactly ``$HOME`` or ``${HOME}``."""
    if _kind(node) not in ("simple_expansion", "expansion"):
        return False
    named = node.named_children
    return (
        len(named) == 1
        and _kind(named[0]) == "variable_name"
        and _slice(named[0], data, source) == "HOME"
    )


def _text(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "surrogateescape") if raw is not None else ""


def _slice(node: Node, data: bytes, source: str | None) -> str:
    """``_text(node)`` for a node of the tree of ``data`` (``source``: the same text as str
    when it is ASCII, else None): sliced from them, where Node.text copies the bytes of the
    node through the tree (several times the cost; PERF-4a)."""
    if source is not None:
        return source[node.start_byte : node.end_byte]
    return data[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")


def _is_plain(text: str) -> bool:
    """Whether the text of a ``word`` node is its own value: no escape, no brace."""
    return "\\" not in text and "{" not in text


def _plain_word(text: str) -> Word:
    """The Word of a plain ``word`` node (what _WordBuilder would build, without building
    it; this is most words)."""
    # Three substring tests: cheaper than a set scan of the text (each makes no objects).
    return _new_word(
        text, text, False, False, "*" in text or "?" in text or "[" in text, None, None
    )


_ARITH_VALUE: Final = Word("1", "1", False, False, False)
"""The value an arithmetic assignment is recorded with: some number (never code)."""


def _word(node: Node, data: bytes, source: str | None) -> Word:
    """The Word of ``node``, a node of the tree of ``data`` (``source``: see _slice)."""
    text = _slice(node, data, source)
    if _kind(node) == "word" and _is_plain(text):
        return _plain_word(text)
    builder = _WordBuilder(data, source)
    builder.add(node)
    return builder.build(text)


# Nodes that hold words bash evaluates as arithmetic or test expressions: static strings
# in them that contain command substitution syntax are code waiting to run.
_EVAL_CONTEXTS: Final = frozenset(
    {
        "test_command",
        "arithmetic_expansion",
        "c_style_for_statement",
    }
)


def _unread_expansion(text: str) -> bool:
    """Whether ``text`` (here-document body text outside the expansions the grammar
    found) still holds an unescaped ``$(``, ``${`` or ``$[``: code bash expands."""
    i, n = 0, len(text)
    while i < n - 1:
        char = text[i]
        if char == "\\":
            i += 2  # `\$` and `\\` are escapes in a here-document body
            continue
        if char == "$" and text[i + 1] in "({[":
            if not _PLAIN_BRACED.match(text, i):
                return True  # (`${HOME}` only substitutes a value: no code)
        i += 1
    return False


_PLAIN_BRACED: Final = re.compile(r"\$\{(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+)\}")


_REDIRECT_NODES: Final = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})

_ARITHMETIC_TESTS: Final = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})

_VARIABLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_IDENTIFIERS: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Substitutions whose output can only be a number (or nothing): evaluated as arithmetic,
# they run no code (`$(( $(wc -l < f) + 1 ))`, `$(date +%s)`, `$(git rev-list --count HEAD)`).
_NUMERIC_OUTPUT: Final = re.compile(
    r"\$\(\s*(?:wc\s+-[lcmw]+\s*(?:<\s*[\w./-]+\s*)?"
    r"|date\s+\+%[sNYmdHMSjuw]"
    r"|git\s+rev-list\s+--count(?:\s+[\w./^~@-]+)+"
    r"|nproc)\s*\)\Z"
)

# Assignments inside arithmetic text (`((PATH=1))`, `${a[PATH++]}`, `[[ HOME=1 -eq 1 ]]`):
# bash sets the variable to a number, so `((PATH=1)); ls` runs ./1/ls. The operators:
# = and op= (not == <= >= !=), ++ and -- before or after the name.
_ARITH_OP: Final = re.compile(r"(?<![<>!=])(?:<<=|>>=|[-+*/%&^|]?=)(?!=)|\+\+|--")
_ARITH_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Characters of a name, or of an expansion that builds one (`P${x}ATH`, `$n`).
_NAME_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_${}@#!?*`"
)
# `${s:OFFSET:LENGTH}`: both are arithmetic (`${s:PATH=1}` assigns PATH).
_SUBSTRING: Final = re.compile(
    r"\$\{[!#]?(?:\w+|[@*#?$!-])(?:\[[^\]]*\])?:(?![-=?+])(.*)\}\Z", re.S
)


def _operand_name(text: str, at: int, step: int) -> tuple[str, bool]:
    """The name-like token next to ``text[at]`` (to the left for step -1, skipping a
    subscript; to the right for +1) and whether an expansion builds it."""
    n = len(text)
    i = at
    while 0 <= i < n and text[i] in " \t\n":
        i += step
    if step < 0 and 0 <= i < n and text[i] == "]":
        while i >= 0 and text[i] != "[":
            i -= 1
        i -= 1
        while i >= 0 and text[i] in " \t\n":
            i -= 1
    chars: list[str] = []
    while 0 <= i < n and text[i] in _NAME_CHARS:
        chars.append(text[i])
        i += step
    token = "".join(reversed(chars) if step < 0 else chars)
    built = any(c in token for c in "$`}") or (
        step < 0 and bool(token) and 0 <= i < n and text[i] in ")`"
    )
    return token, built


def arithmetic_assignments(text: str) -> tuple[list[str], bool]:
    """The variables an arithmetic ``text`` assigns, and whether it assigns one whose
    name comes from an expansion (only known at run time). Double quotes are removed
    first, as bash does (`(( "PA""TH"=1 ))` assigns PATH)."""
    if "=" not in text and "++" not in text and "--" not in text:
        return [], False
    text = text.replace('"', "")
    names: list[str] = []
    indirect = False
    for match in _ARITH_OP.finditer(text):
        sides = [(match.start() - 1, -1)]
        if match.group() in ("++", "--"):
            sides.append((match.end(), 1))
        for at, step in sides:
            token, built = _operand_name(text, at, step)
            if built:
                indirect = True
            elif _ARITH_NAME.match(token):
                names.append(token)
    return names, indirect


_DECLARATION_NODES: Final = frozenset({"declaration_command", "unset_command"})

# Leaf nodes whose text tree-sitter-bash leaves unparsed although bash expands it: a
# backtick substitution inside `${x:-`cmd`}`, an `=~` regex or a here-doc body is seen by
# bash, not by the grammar. Their text is searched for substitutions (see _leaf_text).
_TEXT_LEAVES: Final = frozenset({"word", "regex", "string_content", "extglob_pattern"})

# Nodes that only hold statements and operators (the script, `a | b`, `a && b`): the walk
# goes straight to their named children (the checks in _Walker.walk are for other kinds).
_CONTAINERS: Final = frozenset({"program", "pipeline", "list"})

# Statement nodes: wherever one turns up, it is walked as commands.
_STATEMENTS: Final = frozenset(
    {
        "command",
        "pipeline",
        "list",
        "subshell",
        "compound_statement",
        "redirected_statement",
        "if_statement",
        "while_statement",
        "for_statement",
        "c_style_for_statement",
        "case_statement",
        "function_definition",
        "declaration_command",
        "unset_command",
        "negated_command",
        "test_command",
    }
)

# What a here-doc redirect node may hold; anything else (argument words tree-sitter hangs
# on it: `cat <<EOF /etc/shadow`) is refused rather than dropped.
_HEREDOC_PARTS: Final = _STATEMENTS | {
    "heredoc_start",
    "heredoc_body",
    "heredoc_end",
    "file_redirect",
    "herestring_redirect",
    "heredoc_redirect",
    "comment",
}

# Named children of a command that are not its words.
_NOT_WORDS: Final = frozenset(
    {"variable_assignment", "file_redirect", "heredoc_redirect", "herestring_redirect", "comment"}
)

_DELIMITER_BAD: Final = frozenset(";|&<>()` \t$\n")

# `{NAME}` (or `{NAME[SUBSCRIPT]}`) written right before a redirection operator: bash
# opens the file on a new descriptor and assigns its number to NAME (bash's lexer makes
# it a REDIR_WORD), so `ls {PATH}<f` sets PATH=10 and the next `ls` runs ./10/ls, and a
# subscript is evaluated as arithmetic (`{a[y]}<f` with y='a[$(cmd)]' runs cmd). The
# grammar reads the word as an argument. Matched on the source just before the operator.
_FD_VARIABLE: Final = re.compile(rb"(?:\A|[\s;&|()<>`])\{[A-Za-z_][A-Za-z0-9_]*(?:\[[^\n]*\])?\}\Z")

# Nodes the command walker records itself: only their insides need scanning.
_RECORDED: Final = _REDIRECT_NODES | {"command_name", "variable_assignment"}

# Nodes that cannot contain a command.
_LEAVES: Final = frozenset(
    {
        "word",
        "raw_string",
        "string_content",
        "variable_name",
        "number",
        "ansi_c_string",
        "regex",
        "extglob_pattern",
    }
)


class _Walker:
    """One walk over one tree (the per-call mutable state lives here)."""

    __slots__ = (
        "commands",
        "redirects",
        "assignments",
        "functions",
        "recursive",
        "evaluated",
        "arithmetic",
        "heredoc_rows",
        "error",
        "fn_stack",
        "data",
        "text",
    )

    def __init__(self, data: bytes, text: str | None) -> None:
        self.data = data
        """The source of the tree being walked (node byte offsets index it)."""
        self.text = text
        """The same source as str when it is ASCII (byte offsets are then its character
        offsets: a word's text is sliced, not decoded), else None."""
        self.commands: list[RawCommand] = []
        self.redirects: list[Redirect] = []
        self.assignments: list[Assignment] = []
        self.functions: list[str] = []
        self.recursive: list[str] = []
        self.evaluated: list[str] = []
        self.arithmetic: list[str] = []
        self.heredoc_rows: dict[int, int] = {}
        self.error: str | None = None
        self.fn_stack: list[str] = []

    def _src(self, node: Node) -> str:
        """The source text of ``node`` (a node of the tree being walked; see _slice)."""
        return _slice(node, self.data, self.text)

    def walk(self, node: Node, depth: int, in_eval: bool) -> None:
        if depth > _MAX_DEPTH:
            if self.error is None:
                self.error = f"nesting deeper than {_MAX_DEPTH} levels"
            return
        kind = _kind(node)
        if kind in _CONTAINERS:
            # Nothing below applies to these: straight to their statements.
            for child in node.children:
                if child.is_named:
                    self.walk(child, depth + 1, in_eval)
            return
        if kind in _TEXT_LEAVES:
            self._leaf_text(node, depth)
        if kind == "command_substitution" and node.child_count and _kind(node.children[0]) == "`":
            quoted_body = self._src(node)[1:-1]
            if "\\" in quoted_body:
                # Inside backticks bash first removes the backslash of \\ \` \$, so
                # `echo \`id\`` runs id: parse what bash will parse.
                self._sub_parse(_unescape_backticks(quoted_body), depth)
                return
        if kind == "command":
            self._command(node, depth, ())
            return
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            gap = _uncovered(node)
            if gap is not None:
                # tree-sitter-bash silently drops a lone `-` before a here-doc
                # (`python3 - <<EOF`): text that no node covers is refused, never ignored.
                if self.error is None:
                    self.error = f"text the parser did not understand: {gap!r}"
                return
            if body is not None and _kind(body) != "command" and self.error is None:
                late = [w for c in node.children for w in _words_after_redirect(c)]
                if late:
                    # `c1 && c2 >f a`: tree-sitter hangs the redirection, and the word `a`
                    # after it, on the whole list; to bash `a` is an argument of c2.
                    placed = self._src(late[0])
                    self.error = f"words after a redirection the parser did not place: {placed!r}"
                    return
            if body is not None and _kind(body) == "command":
                # The statement's redirects belong to the command (`python - <<EOF`).
                extra = tuple(c for c in node.children if _kind(c) in _REDIRECT_NODES)
                self._command(body, depth + 1, extra)
                for child in node.children:
                    if child.is_named and child != body:
                        self.walk(child, depth + 1, in_eval)
                return
        if (
            kind == "compound_statement"
            and node.named_child_count == 0
            and node.child_count
            and _kind(node.children[0]) == "{"
        ):
            # tree-sitter reads `{}` as an empty group; bash reads the word `{}` as a
            # command name (`c1 & {}` runs a command named `{}`; found by the differential
            # test). An empty group is never an honest command: refused.
            if self.error is None:
                self.error = f"an empty group {self._src(node)!r}: bash runs it as a command name"
            return
        if kind in _DECLARATION_NODES:
            self._declaration(node, depth)
            return
        if kind == "variable_assignment":
            self._assignment(node, depth, in_eval)
            return
        if kind in _REDIRECT_NODES:
            self._redirect(node, depth)
            return
        if kind == "function_definition":
            self._function(node, depth)
            return
        if kind == "comment" or kind == "heredoc_content":
            return
        if kind == "for_statement":
            variable = node.child_by_field_name("variable")
            if variable is not None:
                # `for PATH in /tmp/evil; do ls; done` assigns PATH; the value is known only
                # when every word is static (a glob names files: `a[$(cmd)]` is a file name).
                words = [
                    _word(c, self.data, self.text) for c in node.children_by_field_name("value")
                ]
                static = bool(words) and all(w.value is not None and not w.glob for w in words)
                name = self._src(variable)
                raw = self._src(node)[:40]
                if static:
                    # Every value is judged (`for y in 1 'a[$(cmd)]'` feeds arithmetic).
                    self.assignments.extend(
                        _new_assignment(name, w, raw, "statement") for w in words
                    )
                else:
                    self.assignments.append(_new_assignment(name, None, raw, "statement"))
                if node.children and _kind(node.children[0]) == "select":
                    # select puts the line it reads in REPLY (and maybe nothing in NAME).
                    self.assignments.append(_new_assignment("REPLY", None, raw, "statement"))
                    self.assignments.append(_new_assignment(name, None, raw, "statement"))
        elif kind == "expansion":
            self._expansion(node)
        if kind in ("raw_string", "string", "word") and in_eval:
            word = _word(node, self.data, self.text)
            if word.value is not None and ("$(" in word.value or "`" in word.value):
                self.evaluated.append(word.value)
        if kind == "compound_statement" and node.child_count and _kind(node.children[0]) == "((":
            in_eval = True
            self._arithmetic_names(node)
        elif kind in _EVAL_CONTEXTS:
            in_eval = True
            if kind == "test_command":
                self._test_arithmetic(node)
            else:
                self._arithmetic_names(node)
        elif kind == "subscript":
            index = node.child_by_field_name("index")
            if index is not None:
                self._arithmetic_names(index)
        for child in node.children:
            if child.is_named:
                self.walk(child, depth + 1, in_eval)

    def _walk_children(self, node: Node, depth: int) -> None:
        for child in node.children:
            if child.is_named:
                self.walk(child, depth + 1, False)

    def _command(self, node: Node, depth: int, extra: tuple[Node, ...]) -> None:
        name: Word | None = None
        args: list[Word] = []
        prefix: list[Assignment] = []
        redirects: list[Redirect] = []
        nested: list[Node] = []
        late: list[Node] = []
        data = self.data
        source = self.text
        # A plain word needs no look inside when its text has no substitution and the depth
        # leaves room (what _scan_node would do for it: _leaf_text, or the depth error).
        shallow = depth + 2 <= _MAX_DEPTH
        # _split_word over this node's children, made in the same pass (see _split_step):
        # where the last word ended, and the first child bash splits or joins.
        end = -1
        split: Node | None = None
        operators = False
        for child in node.children:
            kind = _kind(child)
            if kind == "word":
                # Most arguments: the source text sliced once (Node.text copies the whole
                # tree's source per call) and the Word built without a builder.
                start = child.start_byte
                stop = child.end_byte
                if source is not None:
                    text = source[start:stop]
                else:
                    text = data[start:stop].decode("utf-8", "surrogateescape")
                args.append(
                    _plain_word(text) if _is_plain(text) else _word(child, self.data, self.text)
                )
                if not shallow or "`" in text or "$(" in text:
                    nested.append(child)
                if split is None:
                    end, split = _split_step(child, kind, start, stop, text, end, data)
                continue
            if kind == "comment":
                continue
            if not child.is_named:
                if kind == "==" or kind == "=~":
                    # tree-sitter takes `==` / `=~` after a command name for an operator
                    # and drops it; bash passes it as an argument (`uniq == F` writes F:
                    # uniq IN OUT). Kept as the word it is; glued to a neighbour (`=~{v}`
                    # is one word to bash) the split check below refuses it.
                    args.append(_plain_word(kind))
                    operators = True
                    if split is None:
                        end, split = _split_step(
                            child, kind, child.start_byte, child.end_byte, "", end, data
                        )
                # tree-sitter splits `$"..."` into `$` and a string; bash drops the `$`.
                continue
            start = child.start_byte
            stop = child.end_byte
            if split is None:
                end, split = _split_step(child, kind, start, stop, "", end, data)
            if kind == "command_name":
                inner = child.named_children
                if shallow and len(inner) == 1 and _kind(inner[0]) == "word":
                    # A command_name node spans its one word exactly: the word's offsets
                    # are the ones just read.
                    word = inner[0]
                    if source is not None:
                        text = source[start:stop]
                    else:
                        text = data[start:stop].decode("utf-8", "surrogateescape")
                    name = (
                        _plain_word(text) if _is_plain(text) else _word(word, self.data, self.text)
                    )
                    if "`" in text or "$(" in text:
                        nested.append(child)
                    continue
                name = (
                    _word(inner[0], self.data, self.text)
                    if inner
                    else _word(child, self.data, self.text)
                )
                nested.append(child)
            elif kind == "variable_assignment":
                prefix.append(self._make_assignment(child, "prefix"))
                nested.append(child)
            elif kind in _REDIRECT_NODES:
                redirects.extend(self._make_redirects(child))
                nested.append(child)
                late.extend(_words_after_redirect(child))
            else:
                argument = _word(child, self.data, self.text)
                before = child.prev_sibling
                if (
                    (kind == "string" or kind == "concatenation")
                    and before is not None
                    and not before.is_named
                    and _kind(before) == "$"
                    and before.end_byte == child.start_byte
                ):
                    # `$"..."` as written (its value is only known at run time)
                    argument = _new_word(
                        "$" + argument.text,
                        argument.value,
                        argument.quoted,
                        argument.expanded,
                        argument.glob,
                        argument.home_path,
                        argument.braces,
                    )
                args.append(argument)
                nested.append(child)
        self.assignments.extend(prefix)
        self.redirects.extend(redirects)
        for outer in extra:
            # Recorded script-wide when the statement's redirect nodes are walked.
            redirects.extend(self._make_redirects(outer))
            late.extend(_words_after_redirect(outer))
        if split is None and self.error is None:
            for container in extra:
                if _kind(container) in _WORD_REDIRECTS:
                    split = _split_word(container, data)
                    if split is not None:
                        break
        if split is not None and self.error is None:
            self.error = (
                f"the parser and bash split words differently near {self._src(split)[:40]!r}"
            )
        if late and operators and self.error is None:
            self.error = "an `==` or `=~` word among words after a redirection"
        if late:
            # `cat >/dev/null /etc/shadow`: tree-sitter hangs the words after a redirection
            # on the redirection; to bash they are the command's arguments (found by the
            # differential test). Put them back, in source order.
            args = [
                _word(w, self.data, self.text)
                for w in sorted([*arg_nodes(node), *late], key=_start)
            ]
        if name is not None:
            fn = self.fn_stack[-1] if self.fn_stack else None
            if name.value is not None and name.value in self.fn_stack:
                self.recursive.append(name.value)
            self.commands.append(
                _new_command(name, tuple(args), tuple(prefix), tuple(redirects), fn)
            )
        for child in nested:
            # Look inside for substitutions; name, assignment and redirect nodes were
            # recorded above, so only their insides are scanned; arguments are scanned whole.
            if _kind(child) in _RECORDED:
                self._scan(child, depth + 1)
            else:
                self._scan_node(child, depth + 1)

    def _scan(self, node: Node, depth: int) -> None:
        """Look inside an already-recorded node for nested commands and redirects."""
        for child in node.children:
            if child.is_named:
                self._scan_node(child, depth + 1)

    def _scan_node(self, node: Node, depth: int) -> None:
        if depth > _MAX_DEPTH:
            if self.error is None:
                self.error = f"nesting deeper than {_MAX_DEPTH} levels"
            return
        kind = _kind(node)
        if kind == "expansion":
            self._expansion(node)
        if kind in ("command_substitution", "process_substitution"):
            self.walk(node, depth, False)
        elif kind in _REDIRECT_NODES:
            # A here-doc's own redirects (`<<EOF > f`) are nested inside it.
            self.redirects.extend(self._make_redirects(node))
            if kind == "heredoc_redirect":
                self._heredoc_body(node, depth)
            self._scan(node, depth)
        elif kind in _EVAL_CONTEXTS or kind == "subscript":
            self.walk(node, depth, True)
        elif kind == "array":
            self._array_subscripts(node)
            self._scan(node, depth)
        elif kind in _LEAVES:
            if kind in _TEXT_LEAVES:
                self._leaf_text(node, depth)
            return
        elif kind in _STATEMENTS:
            # tree-sitter nests what follows a here-doc operator on its line inside the
            # redirect node (`cat <<EOF | sudo tee x`): those are commands like any other.
            self.walk(node, depth, False)
        else:
            self._scan(node, depth)

    def _leaf_text(self, node: Node, depth: int) -> None:
        """Parse backtick substitutions the grammar left inside a leaf's text."""
        text = self._src(node)
        if "`" in text:
            self._backticks(text, depth)
        elif "$(" in text and _kind(node) != "string_content":
            if self.error is None:
                self.error = f"a command substitution the parser did not understand: {text!r}"

    def _heredoc_body(self, node: Node, depth: int) -> None:
        """Backticks in an unquoted here-doc body run commands; the grammar skips them."""
        start = next((c for c in node.children if _kind(c) == "heredoc_start"), None)
        if start is None or any(q in self._src(start) for q in "'\"\\"):
            return  # a quoted delimiter: the body is literal
        for child in node.children:
            if _kind(child) != "heredoc_body":
                continue
            raw = child.text or b""
            base = child.start_byte
            pos = base
            pieces: list[bytes] = []
            for part in child.children:
                if _kind(part) in ("command_substitution", "expansion", "simple_expansion"):
                    pieces.append(raw[pos - base : part.start_byte - base])
                    pos = part.end_byte
            pieces.append(raw[pos - base :])
            text = b" ".join(pieces).decode("utf-8", "surrogateescape")
            if "`" in text:
                self._backticks(text, depth)
            if "$" in text and self.error is None and _unread_expansion(text):
                # tree-sitter drops an expansion at the start of a body line after a blank
                # (`cat <<E` / TAB `$(cmd)` / `E`): bash runs it (EXE-8a).
                self.error = (
                    "a $(…), ${…} or $[…] in a here-document body the parser did not read "
                    "as an expansion"
                )

    def _backticks(self, text: str, depth: int) -> None:
        """Walk the commands inside every unescaped `...` pair of ``text``."""
        inner: list[str] | None = None
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            if ch == "\\" and i + 1 < n:
                if inner is not None:
                    inner.append(text[i : i + 2])
                i += 2
                continue
            if ch == "`":
                if inner is None:
                    inner = []
                else:
                    self._sub_parse(_unescape_backticks("".join(inner)), depth)
                    inner = None
                i += 1
                continue
            if inner is not None:
                inner.append(ch)
            i += 1
        if inner is not None and self.error is None:
            self.error = "an unterminated backtick substitution"

    def _sub_parse(self, source: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            if self.error is None:
                self.error = f"nesting deeper than {_MAX_DEPTH} levels"
            return
        data = source.encode("utf-8")
        root = _PARSER.parse(data).root_node
        if root.has_error:
            if self.error is None:
                self.error = "inside backticks: " + _first_error(root)
            return
        # The text bash parses inside backticks has the same divergences as the whole
        # (`\\ ` becomes `\ `, a word of its own; found by the differential test).
        dropped = _divergence(root, data, source)
        if dropped is not None:
            if self.error is None:
                self.error = "inside backticks: " + dropped
            return
        outer, outer_text = self.data, self.text
        self.data, self.text = data, source if len(data) == len(source) else None
        try:
            self.walk(root, depth + 1, False)
        finally:
            self.data, self.text = outer, outer_text

    def _array_subscripts(self, node: Node) -> None:
        """``a=( [SUB]=v )``: bash expands SUB and evaluates it as arithmetic (an indexed
        array), and quotes or escapes do not keep a substitution in it from running
        (``a=( ['$(cmd)']=1 )``, ``a=( [a\\[\\$\\(cmd\\)\\]]=1 )`` run cmd; found by a
        red-team pass, session 7): quoted code there is refused, variables and unquoted
        substitutions are arithmetic names like ``a[x]=1``'s (EXE-8b)."""
        for element in node.named_children:
            text = self._src(element)
            end = text.find("]=")
            if not text.startswith("[") or end < 0:
                continue
            sub = text[1:end]
            plain = sub.replace("\\", "").replace("'", "").replace('"', "")
            code = "$(" in plain or "`" in plain or "$[" in plain
            if code and plain != sub:
                self.evaluated.append(plain)
            elif code:
                self.arithmetic.append("$" + plain if not plain.startswith("$") else plain)
            self._arithmetic_assigns(plain)
            self.arithmetic.extend(_IDENTIFIERS.findall(plain))

    def _arithmetic_names(self, node: Node) -> None:
        """Record the variables an arithmetic context reads (not inside substitutions),
        and the ones it assigns."""
        self._arithmetic_assigns(self._src(node))
        stack = [node]
        while stack:
            current = stack.pop()
            kind = _kind(current)
            if kind in ("variable_name", "special_variable_name"):
                self.arithmetic.append(self._src(current))
            elif kind == "word" and _VARIABLE.match(self._src(current)):
                # A bare name in `$(( ))` (`x` in `i<x`) is a word to the grammar.
                self.arithmetic.append(self._src(current))
            elif kind == "command_substitution" or (
                kind == "translated_string" or (kind == "string" and _translated(current))
            ):
                # Text only known at run time, evaluated as arithmetic: `$(( $(cat f) ))`
                # with f holding a[$(cmd)] runs cmd (so does a translated `$"..."`).
                source = self._src(current)
                if not _NUMERIC_OUTPUT.match(source):
                    self.arithmetic.append(source if source.startswith("$") else "$" + source)
            elif kind != "process_substitution":
                stack.extend(current.named_children)

    def _arithmetic_assigns(self, text: str) -> None:
        """``((PATH=1))`` assigns PATH a number: judged as an assignment (EXE-8b), and a
        target named by an expansion (``(( $n = 1 ))``) as code."""
        names, indirect = arithmetic_assignments(text)
        for name in names:
            self.assignments.append(Assignment(name, _ARITH_VALUE, text[:40], "arithmetic"))
        if indirect:
            self.evaluated.append(text)

    def _test_arithmetic(self, node: Node) -> None:
        """In ``[[ ]]``, the operands of -eq -ne -lt -le -gt -ge are arithmetic, and the
        operand of -v / -R names a variable (whose subscript is evaluated)."""
        stack = [node]
        while stack:
            current = stack.pop()
            if _kind(current) == "unary_expression":
                operator = current.child_by_field_name("operator")
                if operator is not None and self._src(operator) in ("-v", "-R"):
                    self._arithmetic_names(current)
                    continue
            if _kind(current) == "binary_expression":
                operator = current.child_by_field_name("operator")
                if operator is not None and self._src(operator) in _ARITHMETIC_TESTS:
                    self._arithmetic_names(current)
                    continue
            if _kind(current) not in ("command_substitution", "process_substitution"):
                stack.extend(current.named_children)

    def _expansion(self, node: Node) -> None:
        """``${NAME=value}`` and ``${NAME:=value}`` assign NAME; the offset and length of
        ``${s:o:l}`` are arithmetic."""
        kinds = [_kind(c) for c in node.children]
        if len(kinds) > 2 and kinds[1] == "!":
            # `${!x}` dereferences the name held in x: a name like a[$(cmd)] runs cmd.
            name_node = node.children[2]
            if _kind(name_node) == "variable_name":
                self.arithmetic.append(self._src(name_node))
        if any(a == "@" and b == "P" for a, b in zip(kinds, kinds[1:], strict=False)):
            # `${x@P}` expands x as a prompt string, running the $(...) in its value.
            self.evaluated.append(self._src(node))
        names = [c for c in node.named_children if _kind(c) == "variable_name"]
        if ":" in kinds:
            substring = _SUBSTRING.match(self._src(node))
            if substring is not None:
                self._arithmetic_assigns(substring.group(1))
                # The offset and length are arithmetic: a substitution's text there is
                # evaluated (`${s:$(cat f)}` with f holding a[$(cmd)] runs cmd).
                for child in node.children[kinds.index(":") + 1 :]:
                    if _kind(child) == "command_substitution":
                        source = self._src(child)
                        if not _NUMERIC_OUTPUT.match(source):
                            self.arithmetic.append(source)
        if len(names) > 1 and ":" in kinds:
            for extra in names[1:]:
                self.arithmetic.append(self._src(extra))
        name: str | None = None
        for child in node.children:
            if _kind(child) == "variable_name" and name is None:
                name = self._src(child)
            elif _kind(child) in ("=", ":=") and name is not None:
                self.assignments.append(_new_assignment(name, None, self._src(node), "statement"))
                return

    def _declaration(self, node: Node, depth: int) -> None:
        children = node.children
        keyword = children[0] if children else node
        name = _new_word(self._src(keyword), self._src(keyword), False, False, False, None, None)
        args: list[Word] = []
        declares = _kind(node) == "declaration_command"
        exports = self._src(keyword) == "export" or any(
            _kind(c) == "word" and self._src(c).startswith("-") and "x" in self._src(c)
            for c in children
        )
        kind = "export" if exports else "declare"
        for child in children[1:]:
            if not child.is_named:
                continue
            if _kind(child) == "variable_name" and declares:
                # `export LD_PRELOAD` exports a value set elsewhere (e.g. `${X:=...}`).
                self.assignments.append(
                    _new_assignment(self._src(child), None, self._src(node), kind)
                )
            if _kind(child) == "variable_assignment":
                assignment = self._make_assignment(child, kind)
                self.assignments.append(assignment)
                if assignment.value is not None and assignment.value.value is not None:
                    text = assignment.value.value
                    if "$(" in text or "`" in text:
                        self.evaluated.append(text)
            if _kind(child) == "variable_assignment":
                args.append(_assign_word(child, self.data, self.text))
            elif _kind(child) == "variable_name":
                text = self._src(child)  # `unset f`, `export X`: a name, not an expansion
                args.append(_new_word(text, text, False, False, False, None, None))
            else:
                args.append(_word(child, self.data, self.text))
        fn = self.fn_stack[-1] if self.fn_stack else None
        self.commands.append(_new_command(name, tuple(args), (), (), fn))
        self._scan(node, depth + 1)

    def _assignment(self, node: Node, depth: int, in_eval: bool) -> None:
        assignment = self._make_assignment(node)
        self.assignments.append(assignment)
        if assignment.value is not None and assignment.value.value is not None:
            text = assignment.value.value
            if "$(" in text or "`" in text:
                self.evaluated.append(text)
        self._scan(node, depth + 1)

    def _make_assignment(self, node: Node, kind: str = "statement") -> Assignment:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        name = self._src(name_node) if name_node is not None else ""
        if name_node is not None and _kind(name_node) == "subscript":
            base = name_node.child_by_field_name("name")
            name = self._src(base) if base is not None else name
        if not _VARIABLE.match(name) and self.error is None:
            # tree-sitter takes `--o=v` for an assignment; to bash it is a command word
            # (`ls &--o=v` runs `--o=v`; found by the differential test).
            self.error = f"{self._src(node)[:40]!r} is not an assignment to bash (not a name)"
        value = _word(value_node, self.data, self.text) if value_node is not None else None
        return _new_assignment(name, value, self._src(node), kind)

    def _make_redirects(self, node: Node) -> list[Redirect]:
        kind = _kind(node)
        start = node.start_byte
        if (
            start
            and self.data[start - 1] == 0x7D  # `}` right before the operator
            and self.error is None
            and not (node.child_count and _kind(node.children[0]) == "file_descriptor")
            and _FD_VARIABLE.search(self.data[max(0, start - 256) : start]) is not None
        ):
            self.error = (
                "a {NAME} word right before a redirection: bash assigns the new file "
                "descriptor's number to NAME (the parser reads it as an argument)"
            )
        if kind == "heredoc_redirect":
            for child in node.children:
                if child.is_named and _kind(child) not in _HEREDOC_PARTS and self.error is None:
                    self.error = (
                        f"words after a here-document operator: {self._src(child)[:40]!r} "
                        "(bash passes them to the command; the parser cannot place them)"
                    )
                if _kind(child) == "heredoc_start" and self.error is None:
                    if any(c in _DELIMITER_BAD for c in self._src(child)):
                        self.error = f"unusual here-document delimiter {self._src(child)[:40]!r}"
                    row = child.start_point[0]
                    seen = self.heredoc_rows.setdefault(row, child.start_byte)
                    if seen != child.start_byte:
                        # Bodies of several here-docs on one line follow in order; the
                        # grammar mixes them up (`cat <<A || cat <<'B'`).
                        self.error = "several here-documents start on one line"
            raw = node.text or b""
            if raw.find(b"\\\n") >= 0 and self.error is None:
                # bash joins backslash-newline in an unquoted here-doc body, so `E\<nl>OF`
                # ends it early and the lines after run as commands; tree-sitter keeps them
                # in the body. Refused rather than guessed.
                self.error = "a backslash-newline inside a here-document"
            return [_new_redirect("<<", None, None)]
        if kind == "herestring_redirect":
            return [_new_redirect("<<<", None, None)]
        op = ""
        fd: str | None = None
        target: Word | None = None
        for child in node.children:
            ctype = _kind(child)
            if ctype == "file_descriptor":
                fd = self._src(child)
            elif not child.is_named:
                op = op or ctype
            elif target is None:
                target = _word(child, self.data, self.text)
        return [_new_redirect(op, fd, target)]

    def _redirect(self, node: Node, depth: int) -> None:
        self.redirects.extend(self._make_redirects(node))
        if _kind(node) == "heredoc_redirect":
            self._heredoc_body(node, depth + 1)
        self._scan(node, depth + 1)

    def _function(self, node: Node, depth: int) -> None:
        name_node = node.child_by_field_name("name")
        name = self._src(name_node) if name_node is not None else ""
        self.functions.append(name)
        self.fn_stack.append(name)
        try:
            self._walk_children(node, depth)
        finally:
            self.fn_stack.pop()


def _split_word(node: Node, data: bytes) -> Node | None:
    """A child of ``node`` (a command or redirection) that bash joins to the one before it.

    Two nodes with nothing but backslash-newlines between them are one word to bash:
    tree-sitter splits `[ab]\\#`, `a\\<newline>b` and `>f\\<newline>x` in two (found by the
    differential test), so `git -\\<newline>c x` would hide the -c. ``data`` is the whole
    source (byte offsets index it). (_Walker._command makes the same pass over a command's
    children while it reads them.)"""
    end = -1
    for child in node.children:
        if not child.is_named:
            continue
        kind = _kind(child)
        if kind == "comment":
            continue
        start = child.start_byte
        stop = child.end_byte
        text = data[start:stop].decode("utf-8", "surrogateescape") if kind == "word" else ""
        end, found = _split_step(child, kind, start, stop, text, end, data)
        if found is not None:
            return found
    return None


def _split_step(
    child: Node, kind: str, start: int, stop: int, text: str, end: int, data: bytes
) -> tuple[int, Node | None]:
    """One named child (not a comment) of :func:`_split_word`: ``kind`` its kind, ``start``
    and ``stop`` its byte offsets, ``text`` its source when it is a word, ``end`` where the
    word before it ended (-1: none). Gives where the next child's word must not start (-1:
    anywhere) and the node bash splits or joins differently, or None."""
    if kind == "heredoc_redirect":
        return -1, None  # its body and delimiter are lines of their own
    # _joined and the word case of _blank_inside, inline: this runs for every command,
    # and almost every gap is one blank and almost no word holds one.
    if end >= 0 and (
        start == end or (start > end and data[end] == 0x5C and _joined(data, end, start))
    ):
        return end, child
    if kind == "word":
        if (" " in text or "\t" in text) and _unescaped_blank(data[start:stop]):
            return end, child
    elif kind == "concatenation":
        if _blank_inside(child, data):
            return end, child
    elif kind in _WORD_REDIRECTS:
        inner = _split_word(child, data)
        if inner is not None:
            return end, inner
    return stop, None


_WORD_REDIRECTS: Final = frozenset({"file_redirect", "herestring_redirect"})


def _blank_inside(node: Node, data: bytes) -> bool:
    """A word node with an unescaped blank in it: bash splits there (tree-sitter reads
    `c1 { {` as one word `{ {`; found by the differential test). ``data`` is the source
    the node's byte offsets index."""
    kind = _kind(node)
    if kind == "concatenation":
        return any(_blank_inside(c, data) for c in node.children if _kind(c) == "word")
    if kind != "word":
        return False
    raw = data[node.start_byte : node.end_byte]
    if raw.find(b" ") < 0 and raw.find(b"\t") < 0:
        return False
    return _unescaped_blank(raw)


def _unescaped_blank(raw: bytes) -> bool:
    """Whether the source of a word has a space or TAB not escaped by a backslash."""
    escaped = False
    for byte in raw:
        if escaped:
            escaped = False
        elif byte == 0x5C:  # backslash
            escaped = True
        elif byte in (0x20, 0x09):
            return True
    return False


def _joined(data: bytes, end: int, start: int) -> bool:
    """Whether only backslash-newlines (or nothing) separate the node that starts at byte
    ``start`` from the word that ends at byte ``end`` of the source ``data``: bash joins
    them into one word."""
    if start == end:
        return True
    gap = data[end:start]
    return gap.startswith(b"\\\n") and not gap.replace(b"\\\n", b"")


def _start(node: Node) -> int:
    return node.start_byte


def arg_nodes(command: Node) -> list[Node]:
    """The argument nodes of a command node (what :meth:`_Walker._command` takes as args)."""
    return [
        c
        for c in command.children
        if c.is_named and _kind(c) not in _NOT_WORDS and _kind(c) != "command_name"
    ]


def _redirect_targets(node: Node) -> list[Node]:
    """The destination words tree-sitter put on a file redirection (the target first)."""
    if _kind(node) != "file_redirect":
        return []
    return [c for c in node.named_children if _kind(c) not in ("file_descriptor", "comment")]


def _words_after_redirect(node: Node) -> list[Node]:
    """Words tree-sitter put on a file redirection after its target (``>f a b``: a, b)."""
    return _redirect_targets(node)[1:]


def _unescape_backticks(body: str) -> str:
    """Inside `...`, a backslash before \\, ` or $ is removed before parsing."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch == "\\" and i + 1 < n and body[i + 1] in "\\`$":
            out.append(body[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _uncovered(node: Node) -> str | None:
    """Non-blank source text between the children of ``node`` that no child covers."""
    raw = node.text
    if raw is None:
        return None
    base = node.start_byte
    pos = base
    for child in node.children:
        if child.start_byte > pos:
            gap = raw[pos - base : child.start_byte - base].replace(b"\\\n", b"").strip()
            if gap:
                return gap.decode("utf-8", "surrogateescape")
        pos = max(pos, child.end_byte)
    return None


def _assign_word(node: Node, data: bytes, source: str | None) -> Word:
    """An ``export NAME=value`` argument as one word (its value may be dynamic)."""
    value_node = node.child_by_field_name("value")
    if value_node is None:
        text = _slice(node, data, source)
        return _new_word(text, text, False, False, False, None, None)
    value = _word(value_node, data, source)
    text = _slice(node, data, source)
    prefix = text[: len(text) - len(_slice(value_node, data, source))]
    return Word(
        text,
        prefix + value.value if value.value is not None else None,
        value.quoted,
        value.expanded,
        value.glob,
    )


def _first_error(node: Node) -> str:
    """Describe the first ERROR or MISSING node under ``node``."""
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_missing:
            row, col = current.start_point
            return f"missing {_kind(current)!r} at line {row + 1}, column {col + 1}"
        if _kind(current) == "ERROR":
            row, col = current.start_point
            snippet = _text(current)[:40]
            return f"syntax error at line {row + 1}, column {col + 1} near {snippet!r}"
        stack.extend(reversed(current.children))
    return "syntax error"


# tree-sitter-bash's scanner crashes the process (SIGSEGV) on `{` followed by a code point
# in Unicode planes 3-16 (found by the hypothesis tests); lone surrogates cannot be encoded.
# Neither belongs in a shell command (planes 3-16 are unassigned, private-use or invisible
# tag characters used to smuggle text), so such input is refused before it is parsed.
# (Built with chr(): a surrogate in a literal cannot be compiled by mypyc, `make native`.)
_UNPARSEABLE_CHARS: Final = re.compile(
    f"[{chr(0xD800)}-{chr(0xDFFF)}{chr(0x30000)}-{chr(0x10FFFF)}]"
)

# Control characters (EXE-8a). bash reads only space, TAB and newline as blanks: CR, FF,
# VT and every other C0 control character and DEL are ordinary word characters to it
# (checked in real bash, tests/unit/executor/test_bash_bypass_classes.py). tree-sitter-bash reads
# CR, FF and VT as blanks, backslash-CR-LF as a line continuation and a `#` after them as
# a comment, so `echo a\<CR><LF>bash -c id` would be judged `echo a bash -c id` while
# bash runs a shell. No honest command needs a raw control character (`$'\r'` and
# `printf '\t'` spell them), so all of them but TAB and newline are refused before
# parsing, whatever the position (in quotes too: one rule, no guessing of contexts).
# DEL and \x01 are also bash's own internal quoting markers (CTLNUL, CTLESC).
_CONTROL_CHARS: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f]")

_CONTROL_NAMES: Final = {
    0: "NUL",
    0x0B: "VT (vertical tab)",
    0x0C: "FF (form feed)",
    0x0D: "CR",
    0x7F: "DEL",
}


def control_character(source: str) -> str | None:
    """Why ``source`` is refused for a control character bash and the parser read
    differently (EXE-8a), or None."""
    if source.isprintable():
        # Every C0 control character and DEL is unprintable (category Cc): a one-line
        # command is settled without the regex (TAB and newline need it).
        return None
    bad = _CONTROL_CHARS.search(source)
    if bad is None:
        return None
    code = ord(bad.group())
    name = _CONTROL_NAMES.get(code, "a control character")
    return (
        f"{name} (U+{code:04X}) at offset {bad.start()}: bash and the parser read control "
        "characters differently (bash takes CR, FF and VT as part of a word, the parser as "
        "blanks); write them as $'\\r' or with printf"
    )


def parse(source: str, isolated: IsolatedParser | None = None) -> ParsedScript:
    """Parse ``source`` and collect its simple commands, redirects and assignments.

    Text with a control character other than TAB and newline is refused (EXE-8a). ASCII
    text is parsed here; anything else in a child process (``isolated``, see
    :mod:`.isolated`), so that a crash of the C parser on unusual text costs a child, not
    the executor. Without ``isolated`` a child is started for this one command and
    stopped again (the executor passes the long-lived one its BashAnalyzer owns).
    """
    control = control_character(source)
    if control is not None:
        return ParsedScript((), (), (), (), (), (), control)
    if source.isascii():
        return _parse_tree(source)
    refused = _refused_characters(source)
    if refused is not None:
        return refused
    if isolated is None:
        from stockade.executor.bash.isolated import IsolatedParser

        one_shot = IsolatedParser()
        try:
            script = one_shot.parse(source)
        finally:
            one_shot.close()
    else:
        script = isolated.parse(source)
    if script is None:
        return ParsedScript(
            (), (), (), (), (), (),
            "the command crashed or hung the shell parser (in an isolated process); refused",
        )  # fmt: skip
    return script


def parse_here(source: str) -> ParsedScript:
    """:func:`parse` in this process (what the isolated child runs)."""
    control = control_character(source)
    if control is not None:
        return ParsedScript((), (), (), (), (), (), control)
    refused = _refused_characters(source)
    return refused if refused is not None else _parse_tree(source)


# Unicode blanks and invisible characters (EXE-8a): bash reads them as word characters,
# tree-sitter-bash as blanks at the start of a word (`c1 \u2028-x` is one word `\u2028-x` to
# bash and an option `-x` to the grammar; found by the differential test). Refused.
_UNICODE_BLANKS: Final = re.compile(
    "[\x85\xa0\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u3000\ufeff]"
)


def _refused_characters(source: str) -> ParsedScript | None:
    blank = _UNICODE_BLANKS.search(source)
    if blank is not None:
        return ParsedScript(
            (), (), (), (), (), (),
            f"character U+{ord(blank.group()):04X} (a Unicode blank or invisible character, "
            "which bash and the parser read differently) is not accepted in a command",
        )  # fmt: skip
    bad = _UNPARSEABLE_CHARS.search(source)
    if bad is None:
        return None
    return ParsedScript(
        (), (), (), (), (), (),
        f"character U+{ord(bad.group()):04X} (surrogate, unassigned, private-use or tag "
        "character) is not accepted in a command",
    )  # fmt: skip


_ESCAPED_BLANK: Final = re.compile(rb"\\[ \t]")

# (Substring tests on bytes use find(), not `in`: CPython's bytes `in` first tries its
# operand as an integer, and formats a TypeError it then discards.)

# Nodes inside which an escaped blank is text bash and the grammar agree on.
_TEXT_NODES: Final = frozenset(
    {
        "word",
        "string",
        "string_content",
        "raw_string",
        "ansi_c_string",
        "comment",
        "heredoc_body",
        "heredoc_content",
        "regex",
        "extglob_pattern",
        "number",
    }
)


def _divergence(root: Node, data: bytes, source: str) -> str | None:
    """Where bash and the grammar read the backslashes of ``source`` differently (the tree
    ``root`` of its UTF-8 ``data``), or None. Both checks look at backslashes only: text
    without one (most commands) is settled by one test of the str."""
    if "\\" not in source:
        return None
    return _dropped_escapes(root, data) or _false_comment(root, data)


def _dropped_escapes(root: Node, data: bytes) -> str | None:
    """tree-sitter-bash reads a backslash before a space or TAB at the start of a word as a
    blank and drops it (an extra); to bash `\\ ` is a word of its own (found by the
    differential test): `c1 \\  x` is `c1 ' ' x` to bash, `c1 x` to the grammar."""
    if data.find(b"\\ ") < 0 and data.find(b"\\\t") < 0:
        return None
    for match in _ESCAPED_BLANK.finditer(data):
        node = root.descendant_for_byte_range(match.start(), match.start() + 1)
        if node is not None and _kind(node) not in _TEXT_NODES:
            return f"an escaped blank the parser did not read as a word (byte {match.start()})"
    return None


def _false_comment(root: Node, data: bytes) -> str | None:
    """bash joins backslash-newline before it reads words, so in `a\\<newline>#$(cmd)` the
    `#` is inside the word `a#...` and cmd runs; tree-sitter reads a comment there (found
    by the differential test). Such a comment is refused."""
    start = data.find(b"\\\n#")
    while start >= 0:
        hash_at = start + 2
        node = root.descendant_for_byte_range(hash_at, hash_at + 1)
        if node is not None and _kind(node) == "comment" and node.start_byte == hash_at:
            j = hash_at
            while data[j - 2 : j] == b"\\\n":
                j -= 2
            if j > 0 and data[j - 1 : j] not in (b" ", b"\t", b"\n", b";", b"|", b"&", b"(", b")"):
                return "a comment after a line continuation inside a word (bash reads no comment)"
        start = data.find(b"\\\n#", start + 1)
    return None


def _parse_tree(source: str) -> ParsedScript:
    data = source.encode("utf-8")
    tree = _PARSER.parse(data)
    root = tree.root_node
    if root.has_error:
        return ParsedScript((), (), (), (), (), (), _first_error(root))
    # (children, not named_children: the walk reads the same list again, which the node
    # keeps; named_children builds a new one per call.)
    for child in root.children:
        if child.is_named and _kind(child) != "comment":
            break
    else:  # nothing but comments (a loop, not all(): this runs for every command)
        return ParsedScript((), (), (), (), (), (), None, True)
    dropped = _divergence(root, data, source)
    if dropped is not None:
        return ParsedScript((), (), (), (), (), (), dropped)
    walker = _Walker(data, source if len(data) == len(source) else None)
    walker.walk(root, 0, False)
    if walker.error is not None:
        return ParsedScript((), (), (), (), (), (), walker.error)
    arithmetic = walker.arithmetic
    return ParsedScript(
        tuple(walker.commands),
        tuple(walker.redirects),
        tuple(walker.assignments),
        tuple(walker.functions),
        tuple(walker.recursive),
        tuple(walker.evaluated),
        None,
        False,
        tuple(dict.fromkeys(arithmetic)) if arithmetic else (),
    )
