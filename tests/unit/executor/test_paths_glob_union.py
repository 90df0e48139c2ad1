"""The sandbox's union glob check names exactly the glob the per-glob check names."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.executor.globs import compile_globs
from stockade.executor.paths import DEFAULT_PROTECTED_WRITES, is_protected_write

_GLOB_PART = st.sampled_from(
    ["a", "b", "*", "?", "**", "a*", "*.b", ".*", "[ab]", "[!a]*", "[^a]", "[z-a]", "[]a]", ".git"]
)
_PATH_PART = st.sampled_from(["a", "b", "ab", ".a", "a.b", "^", "]", "z", ".git", "a\nb", "x y"])
_GLOB = st.builds(
    lambda anchored, parts: ("/" if anchored else "") + "/".join(parts),
    st.booleans(),
    st.lists(_GLOB_PART, min_size=0, max_size=4),
)


def _per_glob(resolved: str, globs: Sequence[str]) -> str | None:
    """The reference: each glob compiled alone, tried in order."""
    for glob in globs:
        if glob.strip("/") and compile_globs([glob]).match(resolved) is not None:
            return glob
    return None


@settings(max_examples=1500, deadline=None)
@given(
    globs=st.lists(_GLOB, min_size=0, max_size=5),
    path_parts=st.lists(_PATH_PART, min_size=0, max_size=6),
)
def test_one_regex_names_the_same_glob(globs: list[str], path_parts: list[str]) -> None:
    path = "/" + "/".join(path_parts)
    assert is_protected_write(path, globs) == _per_glob(path, globs), (globs, path)


def test_default_protected_writes_examples() -> None:
    for path in (
        "/w/.git/hooks",
        "/w/.git/hooks/pre-commit",
        "/w/a/.bashrc",
        "/w/.ssh/k",
        "/w/.git",
        "/w/a/.git/commondir",
    ):
        assert is_protected_write(path, DEFAULT_PROTECTED_WRITES) == _per_glob(
            path, DEFAULT_PROTECTED_WRITES
        )
        assert is_protected_write(path, DEFAULT_PROTECTED_WRITES) is not None
    for path in ("/w/src/x.py", "/w/bashrc", "/w/.gitignore", "/w/x.git/config", "/"):
        assert is_protected_write(path, DEFAULT_PROTECTED_WRITES) is None
    # Only empty globs: nothing is protected (as before: such globs are skipped).
    assert is_protected_write("/w/x", ["", "/", "//"]) is None
