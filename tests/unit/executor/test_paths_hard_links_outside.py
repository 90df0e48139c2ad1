"""Issue 11, gaps (session 7): a hard link inside a root to a denied file outside them.

Landlock and the sandbox judge paths, not files: `notes.txt`, a hard link in the workspace
to a file reading is denied outside every root (`/etc/shadow`, `~/.ssh/id_rsa` when the
home is not a root, a policy's `/srv/keys/**`), reads that file. read_file refused only
links to denied files inside the roots, and `cat notes.txt` was ALLOWED. The sandbox's
check now sees that a regular file has several links (one fstat of the descriptor the
symlink-free check opens anyway) and compares its identity with the denied files', inside
the roots and, for absolute globs, outside them; a file with several links that is no
denied file's stays readable.

Real bash runs only inside throwaway directories.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from stockade.errors import PathRefused
from stockade.executor import openat2
from stockade.executor.bash import analyze
from stockade.executor.confine import ConfinementPolicy, Launcher, Rlimits
from stockade.executor.paths import PathSandbox, Root
from stockade.executor.tools.run_bash import confinement_policy


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = Path(os.path.realpath(tmp_path))
    home = base / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def _setup(tmp_path: Path) -> tuple[Path, Path, PathSandbox]:
    base = Path(os.path.realpath(tmp_path))
    ws = base / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    keys = base / "srv" / "keys"
    keys.mkdir(parents=True)
    (keys / "signing.key").write_text("SEKRIT\n")
    sandbox = PathSandbox(
        [Root(str(ws), True)], str(ws), denied_read_globs=("**/.env", f"{base}/srv/keys/**")
    )
    return ws, keys / "signing.key", sandbox


def test_a_link_to_a_denied_file_outside_the_roots_is_refused(tmp_path: Path, home: Path) -> None:
    ws, secret, sandbox = _setup(tmp_path)
    os.link(secret, ws / "notes.txt")
    os.link(home / ".ssh" / "id_ed25519", ws / "key.txt")
    done = subprocess.run(
        ["bash", "-c", "cat notes.txt key.txt"], cwd=ws, capture_output=True, text=True
    )
    assert "SEKRIT" in done.stdout and "PRIVATE KEY" in done.stdout  # bash reads them
    for name, original in (("notes.txt", secret), ("key.txt", home / ".ssh" / "id_ed25519")):
        decision = sandbox.check(str(ws / name))
        assert not decision.allowed and str(original) in decision.reason, decision.reason
        with pytest.raises(PathRefused):
            os.close(sandbox.open(str(ws / name), os.O_RDONLY))  # read_file's open
    for command in ("cat notes.txt", "head -1 key.txt", "grep K key.txt", "sort < notes.txt",
                    "cd / && cat " + str(ws / "notes.txt"), "cp notes.txt x"):  # fmt: skip
        result = analyze(command, sandbox=sandbox)
        assert result.verdict == "deny", (command, result.reasons)
    result = analyze("cat *.txt", sandbox=sandbox)
    assert result.verdict != "allow" and result.bypass_immune, result.reasons


def test_a_link_through_a_symlinked_directory_is_refused(tmp_path: Path, home: Path) -> None:
    """The slow walk (a symlink on the way) sees the links too."""
    ws, secret, sandbox = _setup(tmp_path)
    (ws / "d").mkdir()
    os.link(secret, ws / "d" / "notes.txt")
    os.symlink("d", ws / "s")
    assert not sandbox.check(str(ws / "s" / "notes.txt")).allowed
    assert analyze("cat s/notes.txt", sandbox=sandbox).verdict == "deny"


def test_links_of_ordinary_files_stay_readable(tmp_path: Path, home: Path) -> None:
    ws, _, sandbox = _setup(tmp_path)
    os.link(ws / "a.txt", ws / "b.txt")
    outside = Path(os.path.realpath(tmp_path)) / "plain.txt"
    outside.write_text("x\n")
    os.link(outside, ws / "c.txt")
    for name in ("a.txt", "b.txt", "c.txt"):
        assert sandbox.check(str(ws / name)).allowed, name
        os.close(sandbox.open(str(ws / name), os.O_RDONLY))
    for command in ("cat a.txt b.txt", "cat c.txt", "wc -l *.txt", "grep a b.txt"):
        assert analyze(command, sandbox=sandbox).verdict == "allow", command
    # Writes are not reads: a link of a denied file is judged as a write by its path.
    assert sandbox.check(str(ws / "b.txt"), write=True).allowed


def test_the_symlink_free_check_says_several_links(tmp_path: Path) -> None:
    (tmp_path / "one").write_text("x")
    (tmp_path / "two").write_text("x")
    os.link(tmp_path / "two", tmp_path / "three")
    (tmp_path / "d").mkdir()
    for check in (openat2.symlink_free_links, openat2.ctypes_symlink_free_links):
        assert check(str(tmp_path / "one")) == 0
        assert check(str(tmp_path / "two")) == errno.EMLINK
        assert check(str(tmp_path / "d")) == 0  # directories have several links: not files
        assert check(str(tmp_path / "missing")) == errno.ENOENT
    for check in (openat2.symlink_free_errno, openat2.ctypes_symlink_free_errno):
        assert check(str(tmp_path / "two")) == 0  # writes do not pay for the fstat


async def test_a_link_to_a_denied_file_outside_is_masked_at_run_time(
    launcher: Launcher, tmp_path: Path, home: Path
) -> None:
    """A program the analysis cannot see into reads the link too: Landlock judges the
    path; the command's mount namespace masks every name in the roots of a denied file
    outside them (the `mount_mask` layer counts them)."""
    ws, secret, sandbox = _setup(tmp_path)
    os.link(secret, ws / "notes.txt")
    (ws / "d").mkdir()
    os.link(home / ".ssh" / "id_ed25519", ws / "d" / "k")
    command = "cat notes.txt d/k; echo done"
    unmasked = ConfinementPolicy(readable_roots=(str(ws),), writable_roots=(str(ws),))
    leak = await launcher.run(command, cwd=str(ws), policy=unmasked, timeout_s=60)
    assert "SEKRIT" in leak.stdout and "PRIVATE KEY" in leak.stdout  # Landlock alone lets it
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    assert policy.linked_outside
    outcome = await launcher.run(command, cwd=str(ws), policy=policy, timeout_s=60)
    assert outcome.stdout == "done\n", (outcome.stdout, outcome.stderr)
    assert (ws / "a.txt").read_text() == "a\n"  # ordinary files untouched
