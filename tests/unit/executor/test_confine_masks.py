"""The mask walk: compiled globs agree with the sandbox's matcher; the walk finds them."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.executor.confine.masks import (
    GlobMatcher,
    find_masked,
    find_sockets,
    nested_read_only,
)
from stockade.executor.paths import is_protected_write

_PART = st.sampled_from(["a", "b", "ab", ".a", "a.b", "ba", ".env", "x-y", "a b"])
_GLOB_PART = st.sampled_from(
    ["a", "b", "*", "?", "**", "a*", "*.b", ".*", "[ab]", "[!a]*", "?b", ".env", "[a-b]"]
)


@settings(max_examples=400, deadline=None)
@given(
    glob_parts=st.lists(_GLOB_PART, min_size=1, max_size=4),
    anchored=st.booleans(),
    path_parts=st.lists(_PART, min_size=1, max_size=6),
)
def test_compiled_glob_agrees_with_the_sandbox(
    glob_parts: list[str], anchored: bool, path_parts: list[str]
) -> None:
    glob = ("/" if anchored else "") + "/".join(glob_parts)
    path = "/" + "/".join(path_parts)
    expected = is_protected_write(path, (glob,)) is not None
    assert GlobMatcher.compile([glob]).file(path) == expected, (glob, path)


def test_examples() -> None:
    m = GlobMatcher.compile(["**/.env", "vault/**", "/etc/secret*", "*.pem"])
    assert m.file("/w/.env") and m.file("/w/a/b/.env")
    assert not m.file("/w/.env.example") and not m.file("/w/x.env")
    assert m.file("/w/vault/k") and m.file("/w/a/vault/k/l")
    # As in the sandbox, "vault/**" names the directory itself too.
    assert m.dir("/w/vault") and m.file("/w/vault")
    assert GlobMatcher.compile(["**"]).file("/anything/at/all")
    assert m.file("/etc/secret1") and not m.file("/w/etc/secret1")
    assert m.file("/w/k.pem") and not m.file("/w/k.pem/x")
    assert not GlobMatcher.compile([]).file("/w/.env")


def test_walk_finds_files_and_directories_and_skips_symlinks(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".env").write_text("x")
    (tmp_path / "a" / "b" / ".env").write_text("x")
    (tmp_path / "a" / "vault").mkdir()
    (tmp_path / "a" / "vault" / "k").write_text("x")
    (tmp_path / "link.env").symlink_to(tmp_path / ".env")
    (tmp_path / "a" / "loop").symlink_to(tmp_path)
    files, dirs = find_masked([str(tmp_path)], ["**/.env", "**/vault/**", "*.env"])
    assert sorted(files) == sorted([str(tmp_path / ".env"), str(tmp_path / "a" / "b" / ".env")])
    assert dirs == [str(tmp_path / "a" / "vault")]


def test_walk_without_globs_does_nothing(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("x")
    assert find_masked([str(tmp_path)], []) == ([], [])


def test_nested_read_only() -> None:
    assert nested_read_only(["/w", "/w/skills", "/r"], ["/w"]) == ["/w/skills"]
    assert nested_read_only(["/w", "/w2"], ["/w"]) == []


def test_find_sockets(tmp_path: Path) -> None:
    import socket

    (tmp_path / "d").mkdir()
    path = tmp_path / "d" / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        assert find_sockets([(str(tmp_path), 2)]) == [str(path)]
        assert find_sockets([(str(tmp_path), 1)]) == []
        assert find_sockets([(str(tmp_path), 2)], skip=[str(tmp_path / "d")]) == []
    finally:
        server.close()
        os.unlink(path)
