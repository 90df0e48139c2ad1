"""The executor's path globs: one syntax, one matcher, time linear in the path.

Every place that matches a path against a configured or requested glob uses this module:
the sandbox's denied-read and protected-write checks (:mod:`stockade.executor.paths`),
the bash analysis's denied-read and credential checks
(:mod:`stockade.executor.bash.patterns`) and the mask walk that hides denied files from
bash commands (:mod:`stockade.executor.confine.masks`). So the three agree by construction.
The glob and grep tools' own patterns (:func:`match_relative`) use the same translation.

Syntax (a glob is split on ``/``; empty components are ignored):

* a component ``**`` matches any number (zero included) of path components;
* in any other component, ``*`` matches any run of characters and ``?`` one character,
  never ``/``; ``[...]`` is a character class with :mod:`fnmatch`'s rules: ``[!...]`` is
  its negation, ``[^...]`` is NOT (it means "``^`` or ..."), a ``]`` right after ``[`` or
  ``[!`` is a member, a ``[`` without a closing ``]`` is a literal ``[``, and a reversed
  range such as ``z-a`` is empty (so ``[z-a]`` matches nothing: :func:`glob_problem`
  reports that, and the executor's settings refuse such a glob);
* a glob starting with ``/`` is anchored at the file-system root; any other matches the
  trailing components of the path (at any depth).

Paths are matched as normalised: repeated and trailing slashes do not count.

Linear time: the paths come from the (untrusted) agent, so a glob such as
``**/a/**/b/**/c`` must not backtrack over a long path. Each glob is compiled once into a
regular expression whose pieces cannot backtrack into each other: the components between
two ``**`` are found at their leftmost occurrence inside an atomic group (``(?>...)``),
which is correct because what follows starts with ``**`` and so can begin anywhere later,
and within one component the runs between two ``*`` are placed the same way (as
:func:`fnmatch.translate` does); a last segment is found by backing off from the end.
Matching costs O(path length x total size of the globs).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "GlobSet",
    "compile_globs",
    "glob_problem",
    "match_relative",
    "validate_globs",
]

# `**`: any number of whole, non-empty components. `[^/]++` is possessive: a component is
# taken whole, never split (nothing after it could match inside it anyway).
_ANY_COMPONENTS: Final = "(?:/[^/]++)*"
_ANY_COMPONENTS_LAZY: Final = "(?:/[^/]++)*?"
# An unanchored glob may start after any leading components (a relative path's first
# name is not a boundary, hence the first part).
_ANY_PREFIX: Final = "[^/]*+" + _ANY_COMPONENTS_LAZY
# Any leading text; what is put after it begins with '/', so it starts at a component
# boundary. (A single-character repeat: the regex engine's fast path.)
_ANY_TEXT: Final = "(?s:.*)"
_COMPONENT_END: Final = r"(?=/|\Z)"
_NEVER: Final = "(?!)"


def _class_regex(part: str, start: int) -> tuple[str, int] | None:
    """The ``[...]`` class at ``part[start]`` as a regex that never matches ``/``, and the
    index of its ``]``; None when there is no closing ``]`` (the ``[`` is then literal)."""
    j = start + 1
    if j < len(part) and part[j] == "!":
        j += 1
    if j < len(part) and part[j] == "]":
        j += 1
    close = part.find("]", j)
    if close < 0:
        return None
    # fnmatch's translation of the class alone: '(?s:<class>)\Z'. It knows the escaping
    # rules and drops reversed ranges ('(?!)' when nothing is left, '.' for a negation of
    # nothing); reuse it instead of re-deriving them.
    translated = fnmatch.translate(part[start : close + 1])
    cls = translated[len("(?s:") : -len(")\\Z")]
    if cls == ".":
        return "[^/]", close
    if cls.startswith("[^"):
        return "(?!/)" + cls, close  # a negated class must not match the separator
    return cls, close


def _chunk_tokens(part: str) -> list[str | None]:
    """A component's tokens: regex pieces for fixed-width items, None for each ``*`` run."""
    tokens: list[str | None] = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "*":
            if not tokens or tokens[-1] is not None:
                tokens.append(None)
        elif ch == "?":
            tokens.append("[^/]")
        elif ch == "[" and (cls := _class_regex(part, i)) is not None:
            tokens.append(cls[0])
            i = cls[1]
        else:
            tokens.append(re.escape(ch))
        i += 1
    return tokens


def _component_regex(part: str) -> str:
    """One glob component (not ``**``) as a regex matching one whole path component.

    ``C0*C1*...*Cn`` becomes ``C0(?>[^/]*?C1)...[^/]*Cn``: each middle run is taken at its
    leftmost place and never revisited, so a component with many ``*`` stays linear.
    """
    tokens = _chunk_tokens(part)
    chunks: list[str] = [""]
    for token in tokens:
        if token is None:
            chunks.append("")
        else:
            chunks[-1] += token
    if len(chunks) == 1:
        return chunks[0]
    middle = "".join(f"(?>[^/]*?{chunk})" for chunk in chunks[1:-1])
    return chunks[0] + middle + "[^/]*" + chunks[-1]


def _segments(glob: str) -> list[list[str]]:
    """The glob's components cut at each ``**`` (consecutive ones count as one)."""
    segments: list[list[str]] = [[]]
    for part in glob.split("/"):
        if not part:
            continue
        if part == "**":
            if segments[-1] or len(segments) == 1:
                segments.append([])
        else:
            segments[-1].append(part)
    # A `**` that was merged away leaves an empty segment only at the ends, where it belongs.
    return segments


def _sequence(parts: Sequence[str]) -> str:
    return "".join("/" + _component_regex(p) for p in parts)


@functools.lru_cache(maxsize=1024)
def _segments_of(glob: str) -> tuple[bool, tuple[tuple[str, ...], ...]] | None:
    """(anchored, segments) of a glob; None when it has no component (``""``, ``/``)."""
    segments = _segments(glob)
    if not any(segments) and len(segments) == 1:
        return None
    anchored = glob.startswith("/")
    if not anchored and len(segments) > 1 and not segments[0]:
        # Unanchored, a leading `**` adds nothing (the glob may start at any component).
        segments = segments[1:]
    return anchored, tuple(tuple(seg) for seg in segments)


def _tail(glob: str) -> str | None:
    """For an unanchored glob that names the path's last few components (no ``**``) or
    any component run followed by anything (``S/**``): the regex to put after
    :data:`_ANY_TEXT`. The engine then backs off from the end to each '/', and all such
    globs (most globs) share that one prefix in a set's union."""
    shape = _segments_of(glob)
    if shape is None or shape[0]:
        return None
    segments = shape[1]
    if len(segments) == 1 and segments[0]:
        return _sequence(segments[0]) + r"\Z"
    if len(segments) == 2 and segments[0] and not segments[1]:
        # What follows the run is whole components (paths are normalised): any will do.
        return _sequence(segments[0]) + _COMPONENT_END
    return None


@functools.lru_cache(maxsize=1024)
def _glob_body(glob: str) -> str | None:
    """The regex (for ``re.match``, ends with ``\\Z``) of one glob; None for a glob with no
    components (``""``, ``/``), which names nothing."""
    shape = _segments_of(glob)
    if shape is None:
        return None
    tail = _tail(glob)
    if tail is not None:
        return _ANY_TEXT + tail
    anchored, segments = shape
    first, last = segments[0], segments[-1]
    if len(segments) == 1:
        if not first:
            return _ANY_TEXT + r"\Z"  # only `**`: any path at all
        return _sequence(first) + r"\Z"  # anchored, no `**`: the whole path
    if first and anchored:
        head = _sequence(first) + _COMPONENT_END
    elif first:
        # The leftmost occurrence of the first segment is the best one: a `**` follows.
        head = _leftmost(first, _ANY_PREFIX)
    else:
        head = "(?=/)"  # anchored, starting with `**`: an absolute path
    middle = "".join(_leftmost(seg, _ANY_COMPONENTS_LAZY) for seg in segments[1:-1])
    if not last:
        return head + middle + _ANY_COMPONENTS + r"\Z"
    # The last segment ends the path: back off from the end to each '/'. Checking that
    # first (a cheap necessary condition) turns most paths away before the scans above.
    end = _ANY_TEXT + _sequence(last) + r"\Z"
    return "(?=" + end + ")" + head + middle + end


def _leftmost(segment: Sequence[str], skip: str) -> str:
    """The segment at its leftmost place after what ``skip`` passes over, never revisited
    (atomic): right for a segment that a ``**`` follows, since what comes after it may
    then start anywhere later."""
    return "(?>" + skip + _sequence(segment) + _COMPONENT_END + ")"


@functools.lru_cache(maxsize=1024)
def _glob_pattern(glob: str) -> re.Pattern[str] | None:
    body = _glob_body(glob)
    return None if body is None else re.compile(body)


_SLASHES: Final = re.compile("//+")


def _normalise(path: str) -> str:
    """``path`` without repeated or trailing slashes (the root stays ``/``)."""
    if "//" in path:
        path = _SLASHES.sub("/", path)
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path


@dataclass(frozen=True)
class GlobSet:
    """Globs compiled once; :meth:`match` names the first one that matches a path."""

    globs: tuple[str, ...]
    """The globs, in order (those with no component, such as ``/``, are dropped)."""
    _union: re.Pattern[str] | None
    _each: tuple[re.Pattern[str], ...]

    def match(self, path: str) -> str | None:
        """The first glob that matches ``path`` (absolute, or relative to nothing), or None.

        One regex call decides; only a match pays for finding which glob it was.
        """
        if self._union is None:
            return None
        path = _normalise(path)
        if self._union.match(path) is None:
            return None
        for glob, pattern in zip(self.globs, self._each, strict=True):
            if pattern.match(path) is not None:
                return glob
        return None  # pragma: no cover - the union matched, so one of its members does

    def matches(self, path: str) -> bool:
        """Whether any glob matches ``path`` (the mask walk's per-entry test: kept lean)."""
        if "//" in path or path.endswith("/"):
            path = _normalise(path)
        return self._union is not None and self._union.match(path) is not None

    def __bool__(self) -> bool:
        return bool(self.globs)


@functools.lru_cache(maxsize=256)
def _compile(globs: tuple[str, ...]) -> GlobSet:
    kept: list[str] = []
    tails: list[str] = []
    bodies: list[str] = []
    for glob in globs:
        body = _glob_body(glob)
        if body is None:
            continue
        kept.append(glob)
        tail = _tail(glob)
        if tail is not None:
            tails.append(tail)
        else:
            bodies.append(body)
    if tails:
        bodies.insert(0, _ANY_TEXT + "(?:" + "|".join(tails) + ")")
    union = re.compile("(?:" + "|".join(bodies) + ")") if bodies else None
    each = tuple(p for p in (_glob_pattern(g) for g in kept) if p is not None)
    return GlobSet(tuple(kept), union, each)


def compile_globs(globs: Iterable[str]) -> GlobSet:
    """Compile ``globs`` (cached by value). Never raises: see the module docstring."""
    return _compile(tuple(globs))


def match_relative(pattern: str, rel: str) -> bool:
    """Whether the relative path ``rel`` is matched by the whole of ``pattern``.

    Both are taken component by component, ignoring empty and ``.`` components; ``**``
    spans directories. (The glob and grep tools' ``pattern``/``include`` arguments.)
    """
    pattern_parts = [p for p in pattern.split("/") if p not in ("", ".")]
    rel_parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not pattern_parts:
        return not rel_parts
    if not rel_parts:
        return all(p == "**" for p in pattern_parts)
    compiled = _glob_pattern("/" + "/".join(pattern_parts))
    return compiled is not None and compiled.match("/" + "/".join(rel_parts)) is not None


def _reversed_range(body: str) -> bool:
    """Whether a class body (without its brackets and ``!``) holds a range like ``z-a``."""
    k = 0
    while k + 2 < len(body):
        if body[k + 1] == "-":
            if body[k] > body[k + 2]:
                return True
            k += 3
        else:
            k += 1
    return False


def glob_problem(glob: str) -> str | None:
    """Why ``glob`` cannot be what its author meant, or None when it is fine.

    Refused: a NUL character, and a character class with a reversed range such as
    ``[z-a]`` (fnmatch drops such a range silently, so ``secret[z-a]`` names nothing and
    ``[!z-a]`` any character). Matching such a glob never raises; this is for settings.
    """
    if "\0" in glob:
        return f"glob {glob!r} contains a NUL character"
    for part in glob.split("/"):
        i = 0
        while i < len(part):
            if part[i] == "[" and (cls := _class_regex(part, i)) is not None:
                body = part[i + 1 : cls[1]]
                if cls[0] == _NEVER or _reversed_range(body[1:] if body[:1] == "!" else body):
                    return (
                        f"glob {glob!r}: the character class {part[i : cls[1] + 1]!r} has a "
                        "reversed range (it does not match what it seems to)"
                    )
                i = cls[1]
            i += 1
    return None


def validate_globs(globs: Iterable[str]) -> list[str]:
    """``globs`` as a list, or ValueError naming the first bad one (see :func:`glob_problem`)."""
    out = list(globs)
    for glob in out:
        problem = glob_problem(glob)
        if problem is not None:
            raise ValueError(problem)
    return out
