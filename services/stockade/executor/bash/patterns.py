"""Path patterns for the bash analysis: the sandbox's globs, secret names, brace expansion."""

from __future__ import annotations

import fnmatch
import functools
import re
from typing import Final

from stockade.executor import globs
from stockade.executor.bash import lists
from stockade.executor.globs import GlobSet

__all__ = ["SECRET_BASENAMES", "brace_expand", "compile_globs", "credential_patterns"]


@functools.lru_cache(maxsize=8)
def credential_patterns(home: str) -> tuple[str, ...]:
    """lists.CREDENTIAL_PATHS with ``~`` replaced by ``home``."""
    return tuple(home + p[1:] if p.startswith("~") else p for p in lists.CREDENTIAL_PATHS)


def compile_globs(patterns: tuple[str, ...]) -> GlobSet:
    """The credential or denied-read globs compiled by :mod:`stockade.executor.globs`, the
    sandbox's own matcher: the analysis denies exactly what ``read_file`` refuses
    (``match(path)`` names the first matching glob, or is None)."""
    return globs.compile_globs(patterns)


SECRET_BASENAMES: Final = re.compile(
    "(?:" + "|".join(fnmatch.translate(p) for p in lists.CREDENTIAL_BASENAMES) + ")"
)


MAX_BRACE_ITEMS: Final = 64


def brace_expand(value: str) -> list[str] | None:
    """bash brace expansion of ``value`` (comma lists, nesting, ``{a..z}`` / ``{1..9}``
    ranges); None past MAX_BRACE_ITEMS results. Over-splitting on a quoted comma only
    yields shorter items, which are judged too."""
    depth = 0
    start = -1
    for k, ch in enumerate(value):
        if ch == "{":
            if depth == 0:
                start = k
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                inner = value[start + 1 : k]
                items = _brace_items(inner)
                if items is None:
                    continue
                prefix, suffix = value[:start], value[k + 1 :]
                out: list[str] = []
                for item in items:
                    expanded = brace_expand(prefix + item + suffix)
                    if expanded is None:
                        return None
                    out.extend(expanded)
                    if len(out) > MAX_BRACE_ITEMS:
                        return None
                return out
    return [value]


def _brace_items(inner: str) -> list[str] | None:
    """The items of one ``{...}``, or None when it is not a brace expansion."""
    parts: list[str] = []
    depth = 0
    last = 0
    for k, ch in enumerate(inner):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[last:k])
            last = k + 1
    if parts:
        parts.append(inner[last:])
        return parts
    match = re.fullmatch(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.-?\d+)?", inner)
    if match is None:
        return None
    first, last_item = match.group(1), match.group(2)
    if first.lstrip("-").isdigit() and last_item.lstrip("-").isdigit():
        lo, hi = int(first), int(last_item)
        if abs(hi - lo) > MAX_BRACE_ITEMS:
            return [str(lo)] * (MAX_BRACE_ITEMS + 1)
        step = 1 if hi >= lo else -1
        return [str(n) for n in range(lo, hi + step, step)]
    if first.isalpha() and last_item.isalpha():
        step = 1 if ord(last_item) >= ord(first) else -1
        return [chr(c) for c in range(ord(first), ord(last_item) + step, step)]
    return None
