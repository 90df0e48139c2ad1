"""Scanners for the little programs sed and awk run: what they execute, write and read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["AwkEffects", "SedEffects", "awk_effects", "sed_effects", "strip_awk_literals"]


@dataclass(frozen=True)
class SedEffects:
    """What a sed script does besides filtering text."""

    execute: bool
    """It runs shell commands (the ``e`` command or the ``s///e`` flag)."""
    writes: tuple[str, ...]
    """Files written by ``w``/``W`` commands and the ``s///w`` flag."""
    reads: tuple[str, ...]
    """Files read by ``r``/``R`` commands."""
    unknown: bool
    """Something the scanner does not understand (never taken as harmless)."""

    # Written out (dataclass keeps an __init__ the class defines): compiled with mypyc, the
    # generated one is an interpreted function (about 15x slower), and one is made for
    # every sed script.
    def __init__(
        self, execute: bool, writes: tuple[str, ...], reads: tuple[str, ...], unknown: bool
    ) -> None:
        object.__setattr__(self, "execute", execute)
        object.__setattr__(self, "writes", writes)
        object.__setattr__(self, "reads", reads)
        object.__setattr__(self, "unknown", unknown)


_SED_SIMPLE: Final = frozenset("=dDgGhHlnNpPqQxzF")


def sed_effects(script: str) -> SedEffects:
    """Scan a sed script for the commands that execute (e), write (w W) or read (r R)."""
    writes: list[str] = []
    reads: list[str] = []
    execute = False
    i, n = 0, len(script)

    def skip_delimited(pos: int, delim: str) -> int:
        while pos < n and script[pos] != delim:
            if script[pos] == "\\":
                pos += 1
            elif script[pos] == "\n" and delim != "\n":
                return n + 1  # unterminated: unknown
            pos += 1
        return pos + 1

    def to_eol(pos: int) -> tuple[str, int]:
        end = script.find("\n", pos)
        end = n if end < 0 else end
        return script[pos:end].strip(), end

    while i < n:
        ch = script[i]
        if ch in " \t\n;":
            i += 1
            continue
        # Addresses: numbers, $, /re/, \cREc, first~step, addr,+N
        for _ in range(2):
            while i < n and script[i] in " \t":
                i += 1
            if i < n and (script[i].isdigit() or script[i] in "$"):
                while i < n and (script[i].isdigit() or script[i] in "$~"):
                    i += 1
            elif i < n and script[i] == "/":
                i = skip_delimited(i + 1, "/")
                while i < n and script[i] in "IM":
                    i += 1
            elif i + 1 < n and script[i] == "\\":
                i = skip_delimited(i + 2, script[i + 1])
                while i < n and script[i] in "IM":
                    i += 1
            if i < n and script[i] == ",":
                i += 1
                if i < n and script[i] in "+~":
                    i += 1
                continue
            break
        while i < n and script[i] in " \t!":
            i += 1
        if i >= n:
            break
        if i > n:
            return SedEffects(execute, tuple(writes), tuple(reads), True)
        cmd = script[i]
        i += 1
        if cmd in "{}":
            continue
        if cmd in _SED_SIMPLE:
            while i < n and (script[i].isdigit() or script[i] in " \t"):
                i += 1
            continue
        if cmd in ":btTv":
            while i < n and script[i] not in ";\n}":
                i += 1
            continue
        if cmd in "aic":
            _, i = to_eol(i)
            # GNU one-liner `a text`; classic `a\` continues over escaped newlines.
            while i < n and script[i - 1 : i] == "\\":
                _, i = to_eol(i + 1)
            continue
        if cmd in "rRwW":
            name, i = to_eol(i)
            (reads if cmd in "rR" else writes).append(name)
            continue
        if cmd == "e":
            execute = True
            _, i = to_eol(i)
            continue
        if cmd in "sy":
            if i >= n:
                return SedEffects(execute, tuple(writes), tuple(reads), True)
            delim = script[i]
            if delim in "\n\\":
                return SedEffects(execute, tuple(writes), tuple(reads), True)
            i = skip_delimited(i + 1, delim)
            i = skip_delimited(i, delim)
            if i > n:
                return SedEffects(execute, tuple(writes), tuple(reads), True)
            if cmd == "y":
                continue
            while i < n and script[i] not in ";\n}":
                flag = script[i]
                if flag == "e":
                    execute = True
                elif flag == "w":
                    name, i = to_eol(i + 1)
                    writes.append(name)
                    break
                elif not (flag.isdigit() or flag in "gpiImM \t"):
                    return SedEffects(execute, tuple(writes), tuple(reads), True)
                i += 1
            continue
        return SedEffects(execute, tuple(writes), tuple(reads), True)
    return SedEffects(
        execute,
        tuple(w for w in writes if w not in ("/dev/stdout", "/dev/stderr")),
        tuple(reads),
        False,
    )


# After these characters (or at the start) a `/` begins a regex literal in awk; after an
# operand (a name, a number, `)`, `]`, `$`) it is division. Regexes are only skipped where
# awk itself reads one, so code cannot hide in what the scan takes for a regex. `+` and `-`
# are left out: after a postfix `i--` a `/` is division.
_AWK_REGEX_AFTER: Final = frozenset("(,~!&|{};\n?:=*%<>^")


def strip_awk_literals(program: str) -> str:
    """Blank out string and regex literals in one left-to-right pass (as awk lexes them),
    so `/a|b/` and `"x > y"` are not taken for operators."""
    out: list[str] = []
    last = ""  # last significant character emitted
    i, n = 0, len(program)
    while i < n:
        ch = program[i]
        if ch == "#":
            end = program.find("\n", i)
            i = n if end < 0 else end
            continue
        if ch == '"' or (ch == "/" and (not last or last in _AWK_REGEX_AFTER)):
            close = ch
            j = i + 1
            in_bracket = False
            while j < n and program[j] != "\n":
                c = program[j]
                if c == "\\":
                    j += 2
                    continue
                if close == "/" and c == "[":
                    in_bracket = True
                elif close == "/" and c == "]":
                    in_bracket = False
                elif c == close and not in_bracket:
                    break
                j += 1
            out.append('""' if close == '"' else "//")
            last = '"'
            i = j + 1
            continue
        out.append(ch)
        if not ch.isspace():
            last = ch
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class AwkEffects:
    """What an awk program does besides printing to stdout (from its tokens)."""

    runs: tuple[str, ...]
    """Why it runs other programs or code: ``system()``, pipes (``|``, ``|&``), ``@load``,
    ``@include``, indirect calls (``@f()`` may call ``system``)."""
    writes: tuple[str | None, ...]
    """Targets of ``print``/``printf`` redirections (``>``, ``>>``): the file name when it
    is a string literal, None when it is computed."""
    reads: tuple[str | None, ...]
    """Files ``getline < FILE`` reads (None when computed)."""
    argv: bool
    """It assigns ARGV, ARGC or ENVIRON: the files it reads are chosen at run time."""
    unknown: bool
    """Text the lexer does not understand (an unterminated string or regex)."""

    # Written out (dataclass keeps an __init__ the class defines): compiled with mypyc, the
    # generated one is an interpreted function (about 15x slower), and one is made for
    # every awk program.
    def __init__(
        self,
        runs: tuple[str, ...],
        writes: tuple[str | None, ...],
        reads: tuple[str | None, ...],
        argv: bool,
        unknown: bool,
    ) -> None:
        object.__setattr__(self, "runs", runs)
        object.__setattr__(self, "writes", writes)
        object.__setattr__(self, "reads", reads)
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "unknown", unknown)


_AWK_TWO_CHAR: Final = frozenset(
    {
        ">>",
        "|&",
        "||",
        "&&",
        "==",
        "!=",
        "<=",
        ">=",
        "++",
        "--",
        "+=",
        "-=",
        "*=",
        "/=",
        "%=",
        "^=",
        "**",
        "!~",
    }  # fmt: skip
)
_AWK_ASSIGN: Final = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "^=", "**=", "++", "--"})
# A newline after these tokens continues the statement (POSIX awk grammar: newline_opt).
_AWK_CONTINUES: Final = frozenset({",", "{", "&&", "||", "do", "else"})
_AWK_RUN_ARRAYS: Final = frozenset({"ARGV", "ARGC", "ENVIRON"})
_AWK_ARRAY_CALLS: Final = frozenset({"split", "sub", "gsub", "patsplit", "getline"})


def _awk_tokens(program: str) -> tuple[list[tuple[str, str]], bool]:
    """(kind, text) tokens: name, number, string (its value), regex, op, nl, at."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(program)
    unknown = False
    while i < n:
        ch = program[i]
        if ch in " \t\r":
            i += 1
            continue
        if ch == "\\" and i + 1 < n and program[i + 1] == "\n":
            i += 2  # line continuation
            continue
        if ch == "#":
            end = program.find("\n", i)
            i = n if end < 0 else end
            continue
        if ch == "\n":
            tokens.append(("nl", "\n"))
            i += 1
            continue
        last = tokens[-1] if tokens else ("nl", "\n")
        regex_allowed = last[0] in ("nl", "at") or (
            last[0] == "op" and last[1] not in (")", "]", "$", "++", "--")
        ) or (last[0] == "name" and last[1] in ("print", "printf", "return", "in"))  # fmt: skip
        if ch == '"' or (ch == "/" and regex_allowed):
            j = i + 1
            value: list[str] = []
            in_bracket = False
            closed = False
            while j < n and program[j] != "\n":
                c = program[j]
                if c == "\\" and j + 1 < n:
                    value.append(program[j : j + 2] if ch == "/" else _awk_escape(program[j + 1]))
                    j += 2
                    continue
                if ch == "/" and c == "[":
                    in_bracket = True
                elif ch == "/" and c == "]":
                    in_bracket = False
                elif c == ch and not in_bracket:
                    closed = True
                    break
                value.append(c)
                j += 1
            if not closed:
                unknown = True
            tokens.append(("string" if ch == '"' else "regex", "".join(value)))
            i = j + 1
            continue
        if ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (program[j].isalnum() or program[j] == "_"):
                j += 1
            tokens.append(("name", program[i:j]))
            i = j
            continue
        if ch.isdigit() or (ch == "." and i + 1 < n and program[i + 1].isdigit()):
            j = i + 1
            while j < n and (program[j].isalnum() or program[j] in "._"):
                j += 1
            tokens.append(("number", program[i:j]))
            i = j
            continue
        if ch == "@":
            tokens.append(("at", "@"))
            i += 1
            continue
        three = program[i : i + 3]
        if three == "**=":
            tokens.append(("op", three))
            i += 3
            continue
        two = program[i : i + 2]
        if two in _AWK_TWO_CHAR:
            tokens.append(("op", two))
            i += 2
            continue
        tokens.append(("op", ch))
        i += 1
    return tokens, unknown


def _awk_escape(ch: str) -> str:
    return {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "/": "/"}.get(ch, "\\" + ch)


def awk_effects(program: str) -> AwkEffects:
    """Lex an awk program (strings, regexes, comments, continuations, as awk reads them)
    and report what it runs, writes and reads. A regex scan is not enough: a newline after
    a comma continues a ``printf``, so ``printf "x",\\n "y" > "f"`` writes f."""
    tokens, unknown = _awk_tokens(program)
    runs: list[str] = []
    writes: list[str | None] = []
    reads: list[str | None] = []
    argv = False
    depth = 0
    print_depth: int | None = None  # paren depth of the print statement being read
    calls: list[str] = []  # names of the calls whose parentheses are open
    last_significant = "\n"  # the last token that is not a newline
    count = len(tokens)
    for k, (kind, text) in enumerate(tokens):
        nxt = tokens[k + 1] if k + 1 < count else ("nl", "\n")
        prev = tokens[k - 1] if k > 0 else ("nl", "\n")
        if kind == "at":
            runs.append("loads extensions, includes files or calls a function by name (@)")
        elif kind == "op" and text in ("|", "|&"):
            runs.append("pipes to or from a shell command")
        elif kind == "name" and text == "system":
            runs.append("calls system(), which runs shell commands")
        if kind == "op" and text == "(":
            calls.append(prev[1] if prev[0] == "name" else "")
            depth += 1
        elif kind == "op" and text == ")":
            if calls:
                calls.pop()
            depth = max(0, depth - 1)
        if kind == "name" and text in ("print", "printf"):
            print_depth = depth
        elif print_depth is not None:
            ends = (kind == "op" and text in (";", "}")) or (
                kind == "nl" and last_significant not in _AWK_CONTINUES
            )
            if ends or depth < print_depth:
                print_depth = None
            elif kind == "op" and text in (">", ">>") and depth == print_depth:
                writes.append(nxt[1] if nxt[0] == "string" else None)
        if kind == "name" and text == "getline":
            # `getline [var] < FILE`: the `<` comes within the next few tokens.
            for later in tokens[k + 1 : k + 6]:
                if later == ("op", "<"):
                    target_index = tokens.index(later, k + 1) + 1
                    target = tokens[target_index] if target_index < count else ("nl", "")
                    reads.append(target[1] if target[0] == "string" else None)
                    break
                if later[0] in ("nl",) or later[1] in (";", "}", ")"):
                    break
        if kind == "name" and text in _AWK_RUN_ARRAYS:
            after = k + 1
            if after < count and tokens[after] == ("op", "["):
                level = 0
                while after < count:
                    if tokens[after] == ("op", "["):
                        level += 1
                    elif tokens[after] == ("op", "]"):
                        level -= 1
                        if level == 0:
                            break
                    after += 1
                after += 1
            following = tokens[after] if after < count else ("nl", "")
            if (
                (following[0] == "op" and following[1] in _AWK_ASSIGN)
                or (prev[0] == "op" and prev[1] in ("++", "--"))
                or (calls and calls[-1] in _AWK_ARRAY_CALLS and prev[1] in (",", "("))
                or (prev == ("name", "getline"))
            ):
                argv = True
        if kind != "nl":
            last_significant = text
    return AwkEffects(tuple(runs), tuple(writes), tuple(reads), argv, unknown)
