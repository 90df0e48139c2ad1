"""The symlink-free check of the path sandbox's fast path (EXE-4, PERF-4a): the C module
`make native` builds (executor/_openat2.c) answers exactly as the ctypes version it
replaces, for every kind of path the check meets."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from stockade.executor import native, openat2


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "dir" / "sub").mkdir(parents=True)
    (tmp_path / "dir" / "file.txt").write_text("x")
    (tmp_path / "dir" / "ü ñame").write_text("x")
    os.symlink(tmp_path / "dir", tmp_path / "link_dir")
    os.symlink(tmp_path / "dir" / "file.txt", tmp_path / "link_file")
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    os.symlink(tmp_path / "loop_b", tmp_path / "loop_a")
    os.symlink(tmp_path / "loop_a", tmp_path / "loop_b")
    os.mkfifo(tmp_path / "dir" / "fifo")
    os.link(tmp_path / "dir" / "file.txt", tmp_path / "dir" / "linked")
    return tmp_path


def _cases(tree: Path) -> list[str]:
    return [
        str(tree),
        str(tree / "dir"),
        str(tree / "dir" / "sub"),
        str(tree / "dir" / "file.txt"),
        str(tree / "dir" / "linked"),
        str(tree / "dir" / "ü ñame"),
        str(tree / "dir" / "fifo"),  # O_PATH: never blocks on a FIFO
        str(tree / "dir" / "missing"),
        str(tree / "dir" / "missing" / "deeper"),
        str(tree / "dir" / "file.txt" / "not_a_dir"),
        str(tree / "link_dir"),
        str(tree / "link_dir" / "file.txt"),
        str(tree / "link_file"),
        str(tree / "dangling"),
        str(tree / "loop_a"),
        str(tree / "dir" / ".." / "dir" / "file.txt"),
        os.fsdecode(os.fsencode(str(tree / "dir")) + b"/\xff-undecodable"),
        "/proc/self/cwd",  # a magic link
        "/proc/self/root/etc",
        "/",
        "relative/path",
    ]


def test_the_c_check_answers_as_the_ctypes_check(tree: Path) -> None:
    answers = {path: openat2.ctypes_symlink_free_errno(path) for path in _cases(tree)}
    assert answers[str(tree / "dir" / "file.txt")] == 0
    assert answers[str(tree / "link_dir" / "file.txt")] == errno.ELOOP
    assert answers[str(tree / "dir" / "missing")] == errno.ENOENT
    assert answers[str(tree / "dir" / "file.txt" / "not_a_dir")] == errno.ENOTDIR
    assert answers["/proc/self/cwd"] == errno.ELOOP
    for path, expected in answers.items():
        assert openat2.symlink_free_errno(path) == expected, path
    links = {path: openat2.ctypes_symlink_free_links(path) for path in _cases(tree)}
    assert links[str(tree / "dir" / "linked")] == errno.EMLINK
    for path, expected in links.items():
        assert openat2.symlink_free_links(path) == expected, path
        assert expected == answers[path] or (expected == errno.EMLINK and not answers[path])


def test_the_c_existence_check_answers_as_os_access(tree: Path) -> None:
    cases = [*_cases(tree), str(tree / "dir" / "nul\0name"), str(tree / "missing" / "x")]
    answers = {path: openat2.os_entry_exists(path) for path in cases}
    assert answers[str(tree / "dangling")]  # the symlink itself is there
    assert answers[str(tree / "dir" / "fifo")]
    assert not answers[str(tree / "dir" / "missing")]
    assert not answers[str(tree / "dir" / "nul\0name")]  # as os.path.lexists answers
    assert not answers[str(tree / "dir" / "file.txt" / "not_a_dir")]
    for path, expected in answers.items():
        assert openat2.entry_exists(path) == expected, path
        assert os.path.lexists(path) == expected, path


def test_the_c_check_is_used_exactly_when_the_build_is_there() -> None:
    built = bool(native.compiled())
    assert openat2.NATIVE == built
    assert (openat2.symlink_free_errno is openat2.ctypes_symlink_free_errno) == (not built)
    assert (openat2.entry_exists is openat2.os_entry_exists) == (not built)
    assert (openat2.symlink_free_links is openat2.ctypes_symlink_free_links) == (not built)
