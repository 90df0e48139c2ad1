"""bash brace expansion over the parts of one word (EXE-8c rev 2).

bash expands ``{a,b}`` and ``{1..3}`` before anything else and passes every result as its
own argument: ``git -C {.,-c,core.fsmonitor=CMD} status`` is ``git -C . -c
core.fsmonitor=CMD status``. The analysis therefore judges the expanded words, never the
braced one. Only unquoted, unescaped ``{``, ``,`` and ``}`` are syntax (``'{a,b}'`` and
``{a\\,b}`` are not lists), parts that are only known at run time (``$x``, ``$(cmd)``)
travel through unchanged, and the number of results is bounded.

The algorithm is bash's own (braces.c ``brace_expand``): the first ``{`` that has a
matching ``}`` and either a top-level comma or a sequence expression splits the word into
preamble, items and postscript; items and postscript are expanded recursively and
combined in order. A ``{`` without either is literal and the search goes on after it.
"""

from __future__ import annotations

import re

__all__ = ["MAX_BRACE_GROUPS", "MAX_BRACE_WORDS", "Atom", "TooMany", "expand_atoms"]

MAX_BRACE_WORDS = 256
"""More results than this from one word are refused (a bound on the analysis's work)."""

# An atom: ("{",) / (",",) / ("}",) for unquoted syntax characters; ("c", text, glob) for a
# literal piece (glob: it holds an unquoted * ? [), ("c", text, False, True) for a quoted or
# escaped one; ("d", source) for a dynamic part.
Atom = tuple[str, ...] | tuple[str, str, bool] | tuple[str, str, bool, bool]

_SEQUENCE = re.compile(r"([+-]?\d+|[A-Za-z])\.\.([+-]?\d+|[A-Za-z])(?:\.\.([+-]?\d+))?\Z")


class TooMany(Exception):
    """The expansion has more than MAX_BRACE_WORDS results."""


MAX_BRACE_GROUPS = 64
"""More unquoted ``{`` than this in one word is refused before expanding: the search for
each group's end is linear, so thousands of nested braces would cost seconds (and the
recursion would overflow the stack)."""


def expand_atoms(atoms: list[Atom]) -> list[list[Atom]]:
    """The words of ``atoms`` after brace expansion (``[atoms]`` when there is none).

    Raises :class:`TooMany` past MAX_BRACE_WORDS results or MAX_BRACE_GROUPS braces."""
    if sum(1 for atom in atoms if atom[0] == "{") > MAX_BRACE_GROUPS:
        raise TooMany
    return _expand(atoms)


def _expand(atoms: list[Atom]) -> list[list[Atom]]:
    start = 0
    n = len(atoms)
    while start < n:
        i = _next_open(atoms, start)
        if i < 0:
            return [atoms]
        j, commas = _matching_close(atoms, i)
        if j < 0:
            start = i + 1  # `{{a,b}`: an unclosed `{` is literal; the next may open a list
            continue
        amble = atoms[i + 1 : j]
        items: list[list[Atom]] | None
        if commas:
            items = []
            for part in _split_commas(amble):
                items.extend(_expand(part))
                if len(items) > MAX_BRACE_WORDS:
                    raise TooMany
        else:
            items = _sequence(amble)
        if items is None:
            start = i + 1  # `{a}`, `{}`: literal braces; look further
            continue
        preamble = atoms[:i]
        posts = _expand(atoms[j + 1 :])
        if len(items) * len(posts) > MAX_BRACE_WORDS:
            raise TooMany
        return [preamble + item + post for item in items for post in posts]
    return [atoms]


def _next_open(atoms: list[Atom], start: int) -> int:
    for k in range(start, len(atoms)):
        if atoms[k][0] == "{":
            return k
    return -1


def _matching_close(atoms: list[Atom], i: int) -> tuple[int, bool]:
    """The index of the ``}`` closing the ``{`` at ``i`` and whether a comma sits at its
    top level; (-1, False) when it is never closed."""
    depth = 0
    commas = False
    for k in range(i, len(atoms)):
        kind = atoms[k][0]
        if kind == "{":
            depth += 1
        elif kind == "}":
            depth -= 1
            if depth == 0:
                return k, commas
        elif kind == "," and depth == 1:
            commas = True
    return -1, False


def _split_commas(amble: list[Atom]) -> list[list[Atom]]:
    parts: list[list[Atom]] = [[]]
    depth = 0
    for atom in amble:
        kind = atom[0]
        if kind == "{":
            depth += 1
        elif kind == "}":
            depth -= 1
        elif kind == "," and depth == 0:
            parts.append([])
            continue
        parts[-1].append(atom)
    return parts


def _literal_text(amble: list[Atom]) -> str | None:
    out: list[str] = []
    for atom in amble:
        if atom[0] != "c" or atom[2] or len(atom) > 3:
            return None
        out.append(str(atom[1]))
    return "".join(out)


def _sequence(amble: list[Atom]) -> list[list[Atom]] | None:
    """``{1..5}``, ``{01..10..3}``, ``{a..e}``, ``{z..a..2}`` as bash makes them."""
    text = _literal_text(amble)
    if text is None:
        return None
    match = _SEQUENCE.match(text)
    if match is None:
        return None
    first, last, incr_text = match.groups()
    step = abs(int(incr_text)) if incr_text else 1
    step = step or 1
    values: list[str]
    if first.isalpha() and last.isalpha():
        lo, hi = ord(first), ord(last)
        count = abs(hi - lo) // step + 1
        if count > MAX_BRACE_WORDS:
            raise TooMany
        sign = 1 if hi >= lo else -1
        values = [chr(lo + sign * step * k) for k in range(count)]
    elif not first.isalpha() and not last.isalpha():
        lo, hi = int(first), int(last)
        count = abs(hi - lo) // step + 1
        if count > MAX_BRACE_WORDS:
            raise TooMany
        sign = 1 if hi >= lo else -1
        width = 0
        if _zero_padded(first) or _zero_padded(last):
            width = max(len(first), len(last))
        values = []
        for k in range(count):
            number = lo + sign * step * k
            values.append(
                f"{'-' if number < 0 else ''}{str(abs(number)).zfill(width - (number < 0))}"
                if width
                else str(number)
            )
    else:
        return None
    return [[("c", v, False)] for v in values]


def _zero_padded(number: str) -> bool:
    digits = number.lstrip("+-")
    return len(digits) > 1 and digits.startswith("0")
