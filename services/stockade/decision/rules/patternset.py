"""Many patterns against one string: which of them match (#18, PERF-1c).

A ``PatternSet`` answers "which of these N patterns match this text" at a cost that does
not grow with N for the usual rule sets and is linear in the text whatever the patterns
(no backtracking blow-up: ``*rm*-rf*`` over a 64 KB command once took 5.3 s in Python's
``re``). docs/decisions/0002-rule-matcher.md gives the measurements and the reasons.

- Exact strings (ALLOW contents, always-allow grants) are a dictionary look-up.
- A handful of patterns of a shape Python's ``re`` matches in linear time
  (``backtrack_free``) are screened with one small regex and confirmed one by one on a hit.
- Otherwise every pattern's longest literal run (its anchor) goes into one Aho–Corasick
  automaton (``ahocorasick-rs``: linear in the text); the patterns whose anchor occurs are
  the only candidates, confirmed by a linear matcher: Python's ``re`` for backtrack-free
  shapes, RE2 (automata, no backtracking) for the rest. A substring pattern is its own
  anchor and needs no confirmation.

Patterns are given as ``Piece`` sequences (literal text, ``ANY`` = any run of characters,
``SEGMENT`` = any run without ``/``, ``DIRS`` = nothing or any text ending in ``/``), so
the one translation here serves the rule compiler and anyone who wants to ask about a
pattern (policy lint). RE2 and the automaton work on UTF-8 bytes (``surrogatepass``);
every wildcard above matches whole characters there too (``/`` never occurs inside a
multi-byte sequence), so byte and character matching agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

import ahocorasick_rs
import re2

from stockade.errors import InvalidPattern

__all__ = [
    "ANY",
    "DIRS",
    "SEGMENT",
    "PatternSet",
    "Piece",
    "Spec",
    "backtrack_free",
    "byte_regex",
    "literal_of",
]


class _Wild(NamedTuple):
    regex: str


ANY: Final = _Wild(".*")
"""Any run of characters, ``/`` and newlines included."""
SEGMENT: Final = _Wild("[^/]*")
"""Any run of characters without ``/`` (one path component's worth)."""
DIRS: Final = _Wild("(?:.*/)?")
"""Nothing, or any text ending in ``/`` (``**/``: any leading directories)."""

Piece = str | _Wild
"""A literal run of text or a wildcard."""


class Spec(NamedTuple):
    """One pattern of a set: its pieces and whether it must match the whole text."""

    pieces: tuple[Piece, ...]
    whole: bool
    """True: the pieces must cover the whole text; False: only a literal, found anywhere."""


_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/")


def _encode(text: str) -> bytes:
    # surrogatepass: a lone surrogate (possible in-process, never over gRPC) is still one
    # exact byte sequence, on the pattern's side and the text's side alike.
    return text.encode("utf-8", "surrogatepass")


def _as_latin1(text: str) -> str:
    """``text``'s UTF-8 bytes as a str of code points 0-255 (what the automaton scans):
    the same text when it is ASCII."""
    return text if text.isascii() else _encode(text).decode("latin-1")


def _escape(literal: str) -> str:
    """Every byte that is not plainly safe as ``\\xHH``: no metacharacter, NUL or newline
    can change the pattern's meaning."""
    return "".join(chr(b) if b in _SAFE else f"\\x{b:02x}" for b in _encode(literal))


def byte_regex(spec: Spec) -> str:
    """The pattern as an RE2 expression over UTF-8 bytes (Latin-1 mode, dot matches
    newline), anchored at both ends when ``whole``."""
    body = "".join(p.regex if isinstance(p, _Wild) else _escape(p) for p in spec.pieces)
    return f"\\A(?:{body})\\z" if spec.whole else body


def literal_of(spec: Spec) -> str | None:
    """The pattern's text when it has no wildcard, else None."""
    if all(isinstance(p, str) for p in spec.pieces):
        return "".join(p for p in spec.pieces if isinstance(p, str))
    return None


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.dot_nl = True
    options.log_errors = False
    return options


_RE2_OPTIONS: Final = _re2_options()


def _re2_test(spec: Spec) -> Callable[[bytes], object]:
    try:
        pattern = byte_regex(spec).encode("ascii")  # LATIN1 mode takes bytes
        return re2.compile(pattern, _RE2_OPTIONS).search  # type: ignore[no-any-return]
    except re2.error as err:
        raise InvalidPattern(
            f"rule pattern cannot be compiled: {err}", pattern="", problem="too complex"
        ) from err


def backtrack_free(spec: Spec) -> bool:
    """True when Python's backtracking ``re`` matches ``spec`` (as ``_python_regex`` writes
    it) in time linear in the text.

    A literal is; so is a pattern with one wildcard (``git *``, ``*.pem``, ``/w/src/*.py``:
    the wildcard backs off at most once over the text, trying a fixed literal at each
    place), and one with a wildcard, a literal and a trailing wildcard (``*rm*``,
    ``**/secrets/x/**``: once the literal is found, the trailing wildcard ends the match).
    A leading ``DIRS`` followed only by ``/``-free literals and ``SEGMENT`` s (``*.pem``
    or ``*secret*`` as a path, matching the last component) is written as an atomic group
    that takes everything up to the last ``/`` once, and the rest is judged by the same
    rules within that component. Anything else (``*a*a*b``, ``**/a/**/b``) can cost a power
    of the text's length and is left to RE2.
    """
    pieces = spec.pieces
    if _last_component(pieces):
        # No "/" is left after the atomic group: a segment wildcard is a plain wildcard.
        return _few_wildcards(pieces[1:], trailing=(ANY, SEGMENT))
    return _few_wildcards(pieces, trailing=(ANY,))


def _few_wildcards(pieces: Sequence[Piece], trailing: tuple[_Wild, ...]) -> bool:
    """One wildcard, or wildcard-literal-wildcard where the last one can take whatever is
    left (so the first wildcard is backed off once, trying the literal at each place)."""
    if sum(isinstance(p, _Wild) for p in pieces) <= 1:
        return True
    return (
        len(pieces) == 3
        and isinstance(pieces[0], _Wild)
        and isinstance(pieces[1], str)
        and any(pieces[2] is t for t in trailing)
    )


def _last_component(pieces: Sequence[Piece]) -> bool:
    """``DIRS`` then only ``/``-free literals and segments: the text's last component must
    match the rest, so ``DIRS`` can take everything up to the last ``/`` at once."""
    return (
        len(pieces) > 1
        and pieces[0] is DIRS
        and all(p is SEGMENT or (isinstance(p, str) and "/" not in p) for p in pieces[1:])
    )


def _python_regex(spec: Spec) -> str:
    pieces = spec.pieces
    head = ""
    if _last_component(pieces):
        head, pieces = "(?>(?:.*/)?)", pieces[1:]
    body = head + "".join(p.regex if isinstance(p, _Wild) else re.escape(p) for p in pieces)
    # \Z in Python is the very end of the text (unlike $, which allows a final newline).
    return f"\\A(?:{body})\\Z" if spec.whole else body


def _python_screen(
    specs: Sequence[Spec], ids: Sequence[int]
) -> tuple[Callable[[str], object], list[tuple[Callable[[str], object], int]]]:
    """One regex that finds whether any spec matches, and one test per spec, for a handful
    of backtrack-free specs (a search tries every alternative at each place: linear in
    the text times the handful)."""
    regexes = [_python_regex(sp) for sp in specs]
    screen: Callable[[str], object] = re.compile("|".join(regexes), re.DOTALL).search
    tests: list[tuple[Callable[[str], object], int]] = [
        (re.compile(r, re.DOTALL).search, i) for r, i in zip(regexes, ids, strict=True)
    ]
    return screen, tests


_NONE: Final[tuple[int, ...]] = ()


class _Candidate(NamedTuple):
    ident: int
    test: Callable[[str], object] | None
    """Confirms on the text (None when it is ``byte_test``'s job or a plain substring)."""
    byte_test: Callable[[bytes], object] | None
    """Confirms on the text's UTF-8 bytes (RE2), for shapes ``re`` could backtrack on."""
    literal: str | None
    """A substring pattern's text: found by the automaton means matched."""


def _candidate(spec: Spec, ident: int) -> _Candidate:
    if not spec.whole:
        return _Candidate(ident, None, None, literal_of(spec) or "")
    if backtrack_free(spec):
        return _Candidate(ident, re.compile(_python_regex(spec), re.DOTALL).search, None, None)
    return _Candidate(ident, None, _re2_test(spec), None)


def _anchor(spec: Spec) -> str:
    """The longest literal run every match contains ("" when there is none); adjacent
    literal pieces are one run."""
    runs: list[str] = []
    buf = ""
    for p in spec.pieces:
        if isinstance(p, str):
            buf += p
        else:
            runs.append(buf)
            buf = ""
    runs.append(buf)
    return max(runs, key=len)


class PatternSet:
    """Which of a list of patterns match a text; see the module docstring.

    ``search(text)`` returns the ids (``ids[i]`` for the i-th spec; by default its
    position) of every pattern that matches, unordered and without duplicates, as a
    sequence the caller must not change. Built once per rule tier and reused; it holds no
    per-call state, so threads may share it.
    """

    __slots__ = (
        "_exact", "_screen", "_tests", "_automaton", "_by_anchor", "_always", "_all", "size",
        "search", "screen",
    )  # fmt: skip

    SMALL: Final = 8
    """Up to this many patterns, all backtrack-free, are screened with one combined regex
    (a C call) and confirmed one by one only on a hit: cheaper than the automaton for a
    handful. More, or any other shape, go through the automaton."""

    LONG: Final = 4096
    """Texts longer than this skip the automaton and confirm every pattern (one linear
    pass each): a long text can hold an anchor thousands of times, and reporting each
    occurrence costs more than the passes (and grows faster than the text)."""

    MIN_ANCHOR: Final = 3
    """Anchors shorter than this are not worth finding: a one- or two-byte run occurs all
    over a long text (every occurrence costs a report), so such patterns are confirmed on
    every text instead (one linear pass each)."""

    def __init__(self, specs: Sequence[Spec], ids: Sequence[int] | None = None) -> None:
        ids = range(len(specs)) if ids is None else ids
        exact: dict[str, list[int]] = {}
        rest: list[tuple[Spec, int]] = []
        for ident, spec in zip(ids, specs, strict=True):
            lit = literal_of(spec)
            if lit is not None and spec.whole:
                exact.setdefault(lit, []).append(ident)
            else:
                rest.append((spec, ident))
        self.size = len(specs)
        """How many patterns the set holds."""
        self._exact = {k: tuple(v) for k, v in exact.items()}
        self._screen: Callable[[str], object] | None = None
        self._tests: list[tuple[Callable[[str], object], int]] = []
        self._automaton: ahocorasick_rs.AhoCorasick | None = None
        self._by_anchor: list[list[_Candidate]] = []
        self._always: list[_Candidate] = []
        self._all: list[_Candidate] = []
        self.search: Callable[[str], Sequence[int]]
        self.screen: Callable[[str], object] | None = None
        """A C-level test that is falsy when no pattern can match (None: no such test), so a
        caller can skip ``search`` (a Python call) for most texts."""
        if not rest:
            self.search = self._exact_only
            self.screen = self._exact.get
            return
        if len(specs) <= self.SMALL and all(backtrack_free(sp) for sp in specs):
            self._screen, self._tests = _python_screen(specs, ids)
            self.search = self._screened
            self.screen = self._screen
            return
        anchors: dict[str, int] = {}
        for spec, ident in rest:
            anchor = _as_latin1(_anchor(spec))
            cand = _candidate(spec, ident)
            self._all.append(cand)
            if len(anchor) < self.MIN_ANCHOR:
                self._always.append(cand)
                continue
            slot = anchors.setdefault(anchor, len(anchors))
            if slot == len(self._by_anchor):
                self._by_anchor.append([])
            self._by_anchor[slot].append(cand)
        if anchors:
            self._automaton = ahocorasick_rs.AhoCorasick(list(anchors))
        self.search = self._anchored

    @property
    def engine(self) -> str:
        """How ``search`` works: ``"exact"`` (a dictionary), ``"python-re"`` (a handful of
        backtrack-free patterns) or ``"automaton"`` (anchors, then linear confirmation)."""
        if self._screen is not None:
            return "python-re"
        return "exact" if self.search == self._exact_only else "automaton"

    def confirmers(self) -> dict[int, str]:
        """For each pattern past the automaton, how a candidate is confirmed:
        ``"substring"`` (found is matched), ``"python-re"`` (a backtrack-free shape) or
        ``"re2"`` (linear automata)."""
        out: dict[int, str] = {}
        for c in [*(c for cands in self._by_anchor for c in cands), *self._always]:
            out[c.ident] = "python-re" if c.test else "re2" if c.byte_test else "substring"
        return out

    def _screened(self, text: str) -> Sequence[int]:
        assert self._screen is not None
        if self._screen(text) is None:
            return _NONE
        return [i for test, i in self._tests if test(text)]

    def _exact_only(self, text: str) -> Sequence[int]:
        return self._exact.get(text, _NONE)

    def _anchored(self, text: str) -> Sequence[int]:
        out: list[int] = list(self._exact.get(text, _NONE))
        if len(text) > self.LONG:
            groups: list[list[_Candidate]] = [self._all]
        else:
            found: set[int] = set()
            if self._automaton is not None:
                key = _as_latin1(text)
                found = {m[0] for m in self._automaton.find_matches_as_indexes(key, True)}
            if not found and not self._always:
                return out
            by_anchor = self._by_anchor
            groups = [*(by_anchor[a] for a in found), self._always]
        data: bytes | None = None
        for cands in groups:
            for c in cands:
                if c.test is not None:
                    if c.test(text) is None:
                        continue
                elif c.byte_test is not None:
                    if data is None:
                        data = _encode(text)
                    if c.byte_test(data) is None:
                        continue
                elif c.literal is not None and c.literal not in text:
                    continue
                out.append(c.ident)
        return out

    def __len__(self) -> int:
        return self.size
