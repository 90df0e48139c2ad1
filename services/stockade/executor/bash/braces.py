"""bash brace expansion over the parts of one word (EXE-8c rev 2).

bash expands ``{a,b}`` and ``{1..3}`` before anything else and passes every result as its
own argument: ``git -C {.,-c,core.fsmonitor=CMD} status`` is ``git -C . -c
core.fsmonitor=CMD status``. The analysis therefore judges the expanded words, never the
braced one. Only unquoted, unescaped ``{``, ``,`` and ``}`` are syntax (``'{a,b}'`` and
``{a\\,b}`` are not lists), parts that are only known at run time (``$x``, ``$(cmd)``)
travel through unchanged, and the number of results is bounded.

The algorithm is bash's own (braces.c ``brace_expand`` and ``brace_gobbler``): the first
``{`` that opens a valid brace expression splits the word into preamble, amble and
postamble. A ``}`` closes only at the top level and only after a top-level comma or
``..`` (so in ``a{}x,y}`` and ``a{x}y,z}`` the first ``}`` is text: ``a}x ay``); a ``{``
at the start followed by ``}`` is text (``{}x,y}`` stays one word); a ``{`` with no such
``}`` is text and the search goes on right after it. Items and postamble are expanded
recursively and combined in order; an amble closed by ``..`` that is not a sequence
stays literal and the postamble still expands. The few shapes where bash looks at raw
quote characters the atoms do not keep are refused (TooMany) rather than guessed.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_BRACE_GROUPS", "MAX_BRACE_WORDS", "Atom", "TooMany", "expand_atoms"]

MAX_BRACE_WORDS: Final = 256
"""More results than this from one word are refused (a bound on the analysis's work)."""

# An atom: ("{",) / (",",) / ("}",) for unquoted syntax characters; ("c", text, glob) for a
# literal piece (glob: it holds an unquoted * ? [), ("c", text, False, True) for a quoted or
# escaped one; ("d", source) for a dynamic part.
Atom = tuple[str, ...] | tuple[str, str, bool] | tuple[str, str, bool, bool]

_SEQUENCE: Final = re.compile(r"([+-]?\d+|[A-Za-z])\.\.([+-]?\d+|[A-Za-z])(?:\.\.([+-]?\d+))?\Z")


class TooMany(Exception):
    """The expansion has more than MAX_BRACE_WORDS results."""


MAX_BRACE_GROUPS: Final = 64
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
    """bash's ``brace_expand`` over atoms (braces.c): the first ``{`` that opens a valid
    brace expression splits the word into preamble, amble and postamble."""
    i = 0
    while True:
        i = _next_open(atoms, i)
        if i < 0:
            return [atoms]
        if _closing(atoms, i + 1) >= 0:
            break
        i += 1  # not an opener; the search goes on right after it (inside it too)
    close = _closing(atoms, i + 1)
    amble = atoms[i + 1 : close]
    preamble = atoms[:i]
    postamble = atoms[close + 1 :]
    items: list[list[Atom]] | None
    if any(atom[0] == "," for atom in amble):
        items = []
        for part in _split_commas(amble):
            items.extend(_expand(part))
            if len(items) > MAX_BRACE_WORDS:
                raise TooMany
    else:
        # The close was made valid by a `..`: a sequence, or else literal text. bash's
        # scan for a comma here also sees commas inside quotes and substitutions (and
        # then splits nothing but drops the braces): too unusual to follow, refused.
        if any(atom[0] in ("c", "d") and len(atom) != 3 and "," in str(atom[1]) for atom in amble):
            raise TooMany
        items = _sequence(amble)
        if items is None:
            if not postamble:
                return [atoms]
            items = [[("{",), *amble, ("}",)]]  # literal braces; the rest still expands
    posts = _expand(postamble) if postamble else [[]]
    if len(items) * len(posts) > MAX_BRACE_WORDS:
        raise TooMany
    return [preamble + item + post for item in items for post in posts]


def _next_open(atoms: list[Atom], start: int) -> int:
    """The first ``{`` from ``start`` that may open a brace expression: bash ignores one
    at the start of the text (or after a blank) that is followed by ``}`` (``{}x,y}`` is
    literal, ``a{}x,y}`` is not)."""
    for k in range(start, len(atoms)):
        if atoms[k][0] != "{":
            continue
        followed_by_close = k + 1 < len(atoms) and atoms[k + 1][0] == "}"
        if not followed_by_close:
            return k
        if k == 0:
            continue
        before = atoms[k - 1]
        if before[0] == "c" and len(before) > 3 and str(before[1])[-1:] in (" ", "\t", "\n"):
            # bash looks at the raw character before the brace: a blank if it was escaped
            # (`\ {}`), a quote if it was quoted (`' '{}`); the atoms do not say which.
            raise TooMany
        return k
    return -1


def _closing(atoms: list[Atom], start: int) -> int:
    """bash's search for the ``}`` that closes a brace expression opened just before
    ``start`` (brace_gobbler with ``}``): only at the top level, and only once a top-level
    comma or ``..`` (not followed by ``}``) was seen; a ``}`` before that is text
    (``a{x}y,z}`` is ``ax}y az``). -1 when there is none."""
    depth = 0
    separators = 0
    n = len(atoms)
    for k in range(start, n):
        kind = atoms[k][0]
        if kind == "}" and depth == 0 and separators:
            return k
        if kind == "{":
            depth += 1
        elif kind == "}":
            if depth:
                depth -= 1
        elif depth == 0 and kind == ",":
            separators += 1
        elif (
            depth == 0
            and _unquoted_dot(atoms[k])
            and k + 1 < n
            and _unquoted_dot(atoms[k + 1])
            and not (k + 2 < n and atoms[k + 2][0] == "}")
        ):
            separators += 1
    return -1


def _unquoted_dot(atom: Atom) -> bool:
    return atom[0] == "c" and len(atom) == 3 and atom[1] == "."


def _split_commas(amble: list[Atom]) -> list[list[Atom]]:
    """The items of an amble: split at top-level commas (a ``}`` with nothing open is
    text, as in bash's gobbler)."""
    parts: list[list[Atom]] = [[]]
    depth = 0
    for atom in amble:
        kind = atom[0]
        if kind == "{":
            depth += 1
        elif kind == "}":
            if depth:
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
