"""Helpers that several executor modules now share: sweeps, child listing, sandbox rebasing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.errors import PathRefused, StaleWrite
from stockade.executor.confine import limits, worker
from stockade.executor.paths import PathSandbox, Root
from stockade.executor.tools.base import Status
from stockade.executor.tools.support import write_failure


@pytest.fixture
def fake_launcher() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line names the launcher module (what liveness checks)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "stockade.executor.confine.launcher"]
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_tmp_removes_only_dead_launchers_dirs(
    tmp_path: Path, fake_launcher: subprocess.Popen[bytes]
) -> None:
    dead = tmp_path / f"{limits.LAUNCHER_PREFIX}{_dead_pid()}-abc"
    live = tmp_path / f"{limits.LAUNCHER_PREFIX}{fake_launcher.pid}-abc"
    other = tmp_path / "someone-else"
    not_a_pid = tmp_path / f"{limits.LAUNCHER_PREFIX}x1-abc"
    for folder in (dead, live, other, not_a_pid):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f").write_text("x")
    limits.sweep_tmp(str(tmp_path))
    assert not dead.exists()
    assert live.exists() and other.exists() and not_a_pid.exists()


def test_sweep_tmp_of_a_missing_folder_is_a_no_op(tmp_path: Path) -> None:
    limits.sweep_tmp(str(tmp_path / "missing"))
    assert not (tmp_path / "missing").exists()


def test_own_children_lists_a_running_child() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proc.pid in worker.own_children()
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in worker.own_children()


def test_with_cwd_keeps_roots_and_globs_and_resolves_against_the_new_cwd(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "ro").mkdir()
    sb = PathSandbox(
        [Root(str(tmp_path), True), Root(str(tmp_path / "ro"), False)],
        str(tmp_path),
        protected_write_globs=("*.lock",),
        denied_read_globs=("secret*",),
    )
    assert sb.with_cwd(sb.cwd) is sb
    moved = sb.with_cwd(str(tmp_path / "sub"))
    assert moved is not sb and sb.cwd == str(tmp_path.resolve())
    assert moved.cwd == str((tmp_path / "sub").resolve())
    assert moved.roots == sb.roots
    assert moved.check("f.txt", write=True).resolved == str((tmp_path / "sub" / "f.txt").resolve())
    assert not moved.check("x.lock", write=True).allowed
    assert not moved.check("secret.txt").allowed
    assert not moved.check("../ro/f", write=True).allowed
    # A path outside the roots stays outside, whatever the working directory.
    assert not moved.check("../../outside").allowed
    assert os.path.isabs(moved.check("g").resolved)


def test_write_failure_maps_each_kind_of_failure() -> None:
    refused = write_failure(PathRefused("/w/.git/config is protected", path="/w/x"), "edit", "/w/x")
    assert refused.status is Status.REFUSED and refused.error == "/w/.git/config is protected"
    stale = write_failure(StaleWrite("/w/x changed since it was read"), "edit", "/w/x")
    assert stale.status is Status.ERROR and stale.error == "/w/x changed since it was read"
    full = write_failure(OSError(28, "No space left on device"), "write", "/w/x")
    assert full.status is Status.ERROR
    assert full.error == "cannot write /w/x: No space left on device"
    assert full.content == "Error: cannot write /w/x: No space left on device"
