"""Issue 11, gaps (session 7): what ANY git configuration readable from the writable roots
names as code is protected, wherever in the roots it lies.

The path sandbox read the configuration of the repositories git finds from the path
written and from the working directory only: a workspace holding a repository `app/`
whose `core.hooksPath` is `../shared-hooks` (or an absolute path, or whose global
configuration names a directory of the workspace) let `shared-hooks/pre-commit` be written
from the workspace's top, and the person's next `git commit` in `app/` ran it on the host.
Now every repository in the writable roots is found (one bounded walk, kept a second), the
system and global configuration is read even where no repository is, and so is the global
configuration of the roots' owners (a person's git reads their home's).

Real git runs only in throwaway directories, as a person's would (tests/hostgit.py).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from stockade.executor import gitconfig
from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root
from tests.hostgit import host_git

_WRITES = ("printf x > {p}", "cp a.txt {p}", "tee {p} < a.txt", "mv a.txt {p}")


def _workspace(tmp_path: Path) -> Path:
    ws = Path(os.path.realpath(tmp_path)) / "ws"
    (ws / "app").mkdir(parents=True)
    (ws / "a.txt").write_text("a\n")
    assert host_git(ws / "app", "init", "-q", ".").returncode == 0
    return ws


def _configure(repo: Path, key: str, value: str) -> None:
    assert host_git(repo, "config", key, value).returncode == 0


def _hook(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("hooks", ["../shared-hooks", "{ws}/shared-hooks"])
def test_a_hooks_directory_named_by_another_repository_is_protected(
    tmp_path: Path, hooks: str
) -> None:
    ws = _workspace(tmp_path)
    _configure(ws / "app", "core.hooksPath", hooks.format(ws=ws))
    (ws / "shared-hooks").mkdir()
    marker = Path(os.path.realpath(tmp_path)) / "RAN"
    _hook(ws / "shared-hooks" / "pre-commit", marker)  # as a write would have made it
    assert host_git(ws / "app", "commit", "-q", "--allow-empty", "-m", "x").returncode == 0
    assert marker.exists()  # the person's git ran the file of the workspace
    (ws / "shared-hooks" / "pre-commit").unlink()
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))  # working from the top
    assert not sandbox.check("shared-hooks/pre-commit", write=True).allowed
    assert not sandbox.with_cwd(str(ws / "shared-hooks")).check("x", write=True).allowed
    for command in _WRITES:
        line = command.format(p="shared-hooks/pre-commit")
        assert analyze(line, sandbox=sandbox).verdict == "deny", line
    # Ordinary files beside it stay writable.
    assert sandbox.check("notes.txt", write=True).allowed
    assert analyze("printf x > notes.txt", sandbox=sandbox).verdict != "deny"


def test_a_program_named_by_a_nested_repository_is_protected(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    (ws / "tools").mkdir()
    _configure(ws / "app", "diff.conv.textconv", f"{ws}/tools/conv.sh")
    sandbox = PathSandbox([Root(str(ws), True)], str(ws / "tools"))
    assert not sandbox.check("conv.sh", write=True).allowed
    assert analyze("printf x > conv.sh", sandbox=sandbox).verdict == "deny"


def test_a_bare_repository_in_the_roots_is_read_too(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    assert host_git(ws, "init", "-q", "--bare", "srv.git").returncode == 0
    _configure(ws / "srv.git", "core.hooksPath", f"{ws}/push-hooks")
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    assert not sandbox.check("push-hooks/post-receive", write=True).allowed


def test_the_global_configuration_counts_without_any_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = Path(os.path.realpath(tmp_path))
    ws = base / "ws"
    ws.mkdir()
    home = base / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {ws}/hooks\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    assert not sandbox.check("hooks/pre-commit", write=True).allowed
    assert sandbox.check("other/pre-commit", write=True).allowed


def test_the_owners_global_configuration_is_read(tmp_path: Path) -> None:
    """The roots' owner's home (from the password database) and its global files."""
    base = Path(os.path.realpath(tmp_path))
    ws = base / "ws"
    ws.mkdir()
    other = base / "person"
    other.mkdir()
    (other / ".gitconfig").write_text("[core]\n\thooksPath = ~/proj/hooks\n")
    named = gitconfig.named_paths("", None, "/nonexistent", (str(other),))
    assert str(other / "proj" / "hooks") in named  # `~` is that person's home
    owned = base / "owned"
    owned.mkdir()
    person = next(
        (e for e in _passwd() if e[0] != os.getuid() and os.path.isdir(e[1]) and e[1] != "/"),
        None,
    )
    assert person is not None  # this machine has another account with a home
    os.chown(owned, person[0], -1)
    assert gitconfig._owner_homes((str(owned),), "/nonexistent") == (person[1].rstrip("/"),)
    mine = pwd.getpwuid(os.stat(ws).st_uid).pw_dir
    assert gitconfig._owner_homes((str(ws),), mine) == ()  # the executor's own home: read


def _passwd() -> list[tuple[int, str]]:
    return [(p.pw_uid, p.pw_dir) for p in pwd.getpwall()]


def test_too_large_a_workspace_refuses_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _workspace(tmp_path)
    for k in range(30):
        (ws / f"f{k}").write_text("x")
    monkeypatch.setattr(gitconfig, "_MAX_WALK_ENTRIES", 10)
    gitconfig._walks.clear()
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    decision = sandbox.check("notes.txt", write=True)
    assert not decision.allowed and "cannot all be found" in decision.reason
    assert sandbox.check("a.txt").allowed  # reads are not concerned
