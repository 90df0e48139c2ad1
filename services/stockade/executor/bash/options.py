"""Command-line option parsing shared by the command judges (GNU getopt conventions)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from stockade.contract.shell import canonical_option, split_option
from stockade.executor.bash.parser import Word

__all__ = [
    "OptionArg",
    "canonical",
    "literal",
    "may_split",
    "option_value",
    "options_of",
    "split_arguments",
    "split_option",
    "until",
]


# canonical's answers by (option, the known sets): a long option that no set holds is
# looked up as a prefix of each of their options (git's `--oneline` against its list),
# once, not for every command that passes it. Bounded; the answer depends on nothing else.
_CANONICAL: Final[dict[tuple[str, tuple[frozenset[str], ...]], str]] = {}
_CANONICAL_ENTRIES: Final = 4096
_CANONICAL_LONGEST: Final = 64  # longer options (no real one is) are not kept


def canonical(option: str, known: Sequence[frozenset[str]]) -> str:
    """:func:`stockade.contract.shell.canonical_option`: the known long option that a
    unique prefix stands for (``--compress-prog`` is ``--compress-program``)."""
    if not option.startswith("--") or len(option) < 3:
        return option
    if len(option) > _CANONICAL_LONGEST:
        return canonical_option(option, known)
    key = (option, tuple(known))
    answer = _CANONICAL.get(key)
    if answer is None:
        answer = canonical_option(option, known)
        if len(_CANONICAL) >= _CANONICAL_ENTRIES:
            _CANONICAL.clear()
        _CANONICAL[key] = answer
    return answer


def literal(value: str) -> Word:
    """A static word made by the analysis (an option value split off ``--opt=value``)."""
    return Word(value, value, False, False, any(c in "*?[{" for c in value))


# A word that is one double-quoted string: its expansions stay one word.
_ONE_QUOTED: Final = re.compile(r'"(?:[^"\\]|\\.)*"\Z', re.S)


def may_split(word: Word) -> bool:
    """Whether bash may make several words of ``word``: it holds an expansion (only known
    at run time) outside double quotes, which is split on IFS and globbed (EXE-8c)."""
    return word.value is None and _ONE_QUOTED.match(word.text) is None


def options_of(
    value: str,
    args: Sequence[Word],
    index: int,
    takes_value: frozenset[str],
    known: Sequence[frozenset[str]] = (),
    optional: frozenset[str] = frozenset(),
) -> list[tuple[str, Word | None, bool]]:
    """Options in one argument: (option, its value word, whether the next arg was used).

    ``known`` lists the command's long options by severity, for abbreviations;
    ``optional``: options whose value is only ever attached (``--color[=WHEN]``).

    A long option written shorter than the known one it stands for (``--time`` for
    ``--time-style``) may be another option of the program, unknown to the lists: its
    value is judged, and the next word is still read as an operand too (``du --time
    /etc/shadow`` reads /etc/shadow)."""
    nxt = args[index + 1] if index + 1 < len(args) else None
    if value.startswith("--"):
        written, eq, attached = value.partition("=")
        option = canonical(written, (*known, takes_value, optional))
        if eq:
            return [(option, literal(attached), False)]
        if option in takes_value:
            return [(option, nxt, nxt is not None and option == written)]
        return [(option, None, False)]
    out: list[tuple[str, Word | None, bool]] = []
    for k in range(1, len(value)):
        option = "-" + value[k]
        if option in takes_value or option in optional:
            rest = value[k + 1 :]
            if rest:
                out.append((option, literal(rest), False))
            elif option in optional:
                out.append((option, None, False))
            else:
                out.append((option, nxt, nxt is not None))
            return out
        out.append((option, None, False))
    return out


@dataclass(frozen=True, init=False)
class OptionArg:
    """One option argument of a command line and the options it holds (the judges build
    one per option argument of every command, so it must be cheap: an __init__ of its own,
    which mypyc compiles to direct stores, as parser.Word; a NamedTuple is built through
    its interpreted __new__)."""

    text: str
    """The argument as written (``-rf``, ``--file=x``)."""
    options: list[tuple[str, Word | None, bool]]
    """:func:`options_of` of it: each option, its value word (None when it takes none or
    the value is missing) and whether that value was the next argument."""

    def __init__(self, text: str, options: list[tuple[str, Word | None, bool]]) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "options", options)


def split_arguments(
    args: Sequence[Word],
    takes_value: frozenset[str],
    known: Sequence[frozenset[str]] = (),
    optional: frozenset[str] = frozenset(),
) -> tuple[list[Word], list[OptionArg]]:
    """Split a command's arguments into operands and option arguments, in order.

    Words that do not start with ``-`` (and ``-`` itself, dynamic words and everything
    after ``--``) are operands; an option that takes a value consumes the next word
    (one in ``optional`` never does). One
    walk for every judge, so a fix to the GNU conventions lands everywhere at once.
    """
    operands: list[Word] = []
    found: list[OptionArg] = []
    ended = False
    i = 0
    while i < len(args):
        word = args[i]
        value = word.value
        if ended or value is None or not value.startswith("-") or value == "-":
            operands.append(word)
            i += 1
            continue
        if value == "--":
            ended = True
            i += 1
            continue
        parsed = options_of(value, args, i, takes_value, known, optional)
        found.append(OptionArg(value, parsed))
        # Only the last option of an argument can take the next word as its value.
        i += 2 if parsed[-1][2] else 1
    return operands, found


def option_value(args: Sequence[Word], names: tuple[str, ...]) -> Word | None:
    """The value of the first of ``names`` given (``-f X``, ``--file X``, ``--file=X``)."""
    for k, word in enumerate(args):
        value = word.value
        if value is None:
            continue
        for name in names:
            if value == name and k + 1 < len(args):
                return args[k + 1]
            if name.startswith("--") and value.startswith(name + "="):
                return literal(value[len(name) + 1 :])
    return None


def until(words: list[Word], stops: tuple[str, ...]) -> list[Word]:
    """The words before the first one in ``stops``."""
    for k, word in enumerate(words):
        if word.value in stops:
            return words[:k]
    return words
