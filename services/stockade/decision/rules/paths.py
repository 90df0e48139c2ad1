"""Path handling (DEC-1): call paths made absolute and folded, rule paths normalised the
same way, and path globs (``*`` one segment, ``**`` any depth) split into pattern pieces.
"""

from __future__ import annotations

import posixpath
import re

from stockade.decision.rules.patternset import ANY, DIRS, SEGMENT, Piece

_NEEDS_FOLDING = re.compile(r"//|/\.\.?(?:/|$)|/$")


def normalize_path(path: str, cwd: str) -> str:
    """Make ``path`` absolute against ``cwd`` and fold ``.``, ``..`` and duplicate slashes."""
    if path.startswith("/") and len(path) > 1 and _NEEDS_FOLDING.search(path) is None:
        return path  # already absolute and folded: the common case, kept cheap
    joined = posixpath.join(cwd or "/", path)
    folded = posixpath.normpath(joined)
    # normpath folds every run of slashes except a leading "//" (exactly two: POSIX allows
    # it to mean something else); we do not keep it.
    return folded[1:] if folded.startswith("//") else folded


def rule_path(content: str, cwd: str, *, exact: bool) -> tuple[str, bool]:
    """A rule's path content normalised like call paths (DEC-1 rev 2), and whether it is
    anchored at the root.

    - ``/abs/...``: folded (``.``, ``..``, repeated and trailing slashes), anchored;
    - ``./x``, ``../x``, ``.``, ``..``: relative to ``cwd``, folded, anchored, so
      ``read_file(./.env)`` names the same file as ``read_file(/w/.env)`` for every effect;
    - ALLOW (``exact``): a bare content or one with a ``/`` is relative to ``cwd`` too (an
      ALLOW never matches more than written: ``read_file(README.md)`` is the one in the
      working directory); only ``**/x`` and slash-free globs (``*.py``) match at any depth;
    - DENY/ASK: ``x/y`` matches those trailing components at any depth and a pattern without
      ``/`` matches the base name at any depth (a bare one is a substring), so a protective
      rule written relative catches the file wherever it is.

    Folding never removes a wildcard component (``**/..`` stays), which only makes such a
    pattern match less, never more. Escaped stars (``\\*``) are kept as written.
    """
    dotted = content in (".", "..") or content.startswith(("./", "../"))
    if content.startswith("/"):
        return _fold(content), True
    if dotted or (exact and ("/" in content.rstrip("/") or "*" not in content)):
        if exact and content.startswith("**"):
            return _fold(content), False
        return _fold(posixpath.join(cwd or "/", content)), True
    return _fold(content), False


def _fold(path: str) -> str:
    """Fold ``.``, ``..`` (after a wildcard-free component) and repeated or trailing slashes."""
    absolute = path.startswith("/")
    out: list[str] = []
    for comp in path.split("/"):
        if comp in ("", "."):
            continue
        if comp == ".." and out and out[-1] != ".." and "*" not in out[-1]:
            out.pop()
        elif comp == ".." and absolute and not out:
            continue  # /.. is /
        else:
            out.append(comp)
    folded = "/".join(out)
    return "/" + folded if absolute else folded or "."


def path_glob_pieces(glob: str) -> list[Piece]:
    """Split a path glob: ``**/`` → any directories, ``**`` → anything, ``*`` → one segment."""
    glob = re.sub(r"/+", "/", glob)
    out: list[Piece] = []
    buf: list[str] = []

    def wild(w: Piece) -> None:
        if buf:
            out.append("".join(buf))
            buf.clear()
        out.append(w)

    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            wild(DIRS)
            i += 3
        elif glob.startswith("**", i):
            wild(ANY)
            i += 2
        elif glob[i] == "*":
            wild(SEGMENT)
            i += 1
        elif glob[i] == "\\" and i + 1 < len(glob) and glob[i + 1] in "*\\":
            buf.append(glob[i + 1])
            i += 2
        else:
            buf.append(glob[i])
            i += 1
    if buf:
        out.append("".join(buf))
    return out
