"""bash's pathname patterns as Python's :mod:`glob`/:mod:`fnmatch` patterns (EXE-8a, 8c).

The analysis looks at what a glob matches (a secret, a symlink out of the roots, a file
named ``-delete``) with Python's glob, whose patterns differ from bash's: ``[^x]`` negates
in bash and is a literal ``^`` to Python, so ``cat .[^x]nv`` read ``.env`` while the
checker matched nothing; POSIX classes (``[[:alpha:]]``), equivalence classes
(``[[=e=]]``) and collating symbols (``[[.e.]]``) are bash's only. And a word's value has
its quotes removed, so which of its ``[``, ``*``, ``?`` were quoted (literal) is not
known here once quoting is mixed with globbing (``'['x]*``).

:func:`python_glob` gives a pattern that matches at least every name bash's pattern
matches (a superset): the checks that use it then look at more files, never fewer.
"""

from __future__ import annotations

from typing import Final

__all__ = ["python_glob"]

_CLASS_OPENERS: Final = ("[:", "[=", "[.")


def _bracket_end(pattern: str, start: int) -> tuple[int, bool] | None:
    """(index of the ``]`` closing the bracket expression at ``start``, whether it holds a
    class), or None when it is not closed (bash then reads the ``[`` literally)."""
    k = start + 1
    if k < len(pattern) and pattern[k] in "!^":
        k += 1
    if k < len(pattern) and pattern[k] == "]":
        k += 1  # a `]` first in the list is a member
    has_class = False
    while k < len(pattern):
        pair = pattern[k : k + 2]
        if pair in _CLASS_OPENERS:
            close = pattern.find(pair[1] + "]", k + 2)
            if close != -1:
                has_class = True
                k = close + 2
                continue
        if pattern[k] == "]":
            return k, has_class
        if pattern[k] == "/":
            return None  # a bracket expression never spans a `/`: the `[` is literal
        k += 1
    return None


def python_glob(pattern: str, *, mixed_quoting: bool = False) -> str:
    """A Python glob pattern matching every name ``pattern`` matches in bash (and maybe
    more). ``mixed_quoting``: some characters of the word were quoted, so any ``[...]``
    may be literal text or a set — it becomes ``*``, which covers both."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        char = pattern[i]
        if char == "[":
            found = _bracket_end(pattern, i)
            if found is None:
                out.append("*" if mixed_quoting else "[[]")
                i += 1
                continue
            end, has_class = found
            if "[=" in pattern[i:end] or "[." in pattern[i:end]:
                # bash's equivalence classes and collating symbols match more than they
                # say (`[[=a=]][[=b=]]` matches `]` and `b` in bash 5.2): the rest of the
                # path component may be anything.
                out.append("*")
                slash = pattern.find("/", end)
                i = n if slash == -1 else slash
                continue
            if mixed_quoting:
                out.append("*")
            elif has_class:
                out.append("?")  # any one character covers every class
            else:
                body = pattern[i + 1 : end]
                if body[:1] == "^":
                    body = "!" + body[1:]
                out.append("[" + body + "]")
            i = end + 1
            continue
        if char == "]" and mixed_quoting:
            out.append("*")  # maybe the end of a set whose `[` was taken literally
        else:
            out.append(char)
        i += 1
    return "".join(out)
