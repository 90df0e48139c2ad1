"""Scanners for the little programs sed and awk run: what they execute, write and read."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SedEffects", "sed_effects", "strip_awk_literals"]


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


_SED_SIMPLE = frozenset("=dDgGhHlnNpPqQxzF")


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
_AWK_REGEX_AFTER = frozenset("(,~!&|{};\n?:=*%<>^")


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
