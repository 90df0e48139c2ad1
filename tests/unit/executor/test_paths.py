"""Adversarial tests of the path sandbox (EXE-1 … EXE-5), on real files and symlinks."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from stockade.errors import PathRefused
from stockade.executor.paths import (
    DEFAULT_PROTECTED_WRITES,
    PathDecision,
    PathSandbox,
    Root,
    is_protected_write,
    match_relative_glob,
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A workspace ``ws``, a read-only ``ro`` root, siblings and a web of symlinks.

    tmp_path/
      ws/            read-write root (cwd)
        f.txt  sub/g.txt  a..b.txt  notes~draft.md  ünïcödé.txt  'sp ace.txt'
        in_link -> f.txt             rel_chain1 -> rel_chain2 -> f.txt
        out_link -> ../outside/secret.txt
        out_dir -> <abs>/outside
        loop_a -> loop_b -> loop_a    self_loop -> self_loop
        dangling_out -> <abs>/outside/new.txt   dangling_in -> not_yet.txt
        subdir_link -> sub           up_link -> ..   (points at tmp_path, outside)
        chain_out_back -> <abs>/outside/back_in  (outside/back_in -> <abs>/ws/f.txt)
        ro_link -> <abs>/ro/r.txt
        proc_link -> /proc/self/root/<abs>/ws/f.txt
      ws2/x.txt      sibling whose name extends "ws"
      ro/r.txt       read-only root
      outside/secret.txt
    """
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (tmp_path / "ws2").mkdir()
    (tmp_path / "ro").mkdir()
    (tmp_path / "outside").mkdir()
    (ws / "f.txt").write_text("f")
    (ws / "sub" / "g.txt").write_text("g")
    (ws / "a..b.txt").write_text("dots")
    (ws / "notes~draft.md").write_text("tilde")
    (ws / "ünïcödé.txt").write_text("u")
    (ws / "sp ace.txt").write_text("s")
    (tmp_path / "ws2" / "x.txt").write_text("x")
    (tmp_path / "ro" / "r.txt").write_text("r")
    (tmp_path / "outside" / "secret.txt").write_text("secret")
    os.symlink("f.txt", ws / "in_link")
    os.symlink("rel_chain2", ws / "rel_chain1")
    os.symlink("f.txt", ws / "rel_chain2")
    os.symlink("../outside/secret.txt", ws / "out_link")
    os.symlink(tmp_path / "outside", ws / "out_dir")
    os.symlink("loop_b", ws / "loop_a")
    os.symlink("loop_a", ws / "loop_b")
    os.symlink("self_loop", ws / "self_loop")
    os.symlink(tmp_path / "outside" / "new.txt", ws / "dangling_out")
    os.symlink("not_yet.txt", ws / "dangling_in")
    os.symlink("sub", ws / "subdir_link")
    os.symlink("..", ws / "up_link")
    os.symlink(ws / "f.txt", tmp_path / "outside" / "back_in")
    os.symlink(tmp_path / "outside" / "back_in", ws / "chain_out_back")
    os.symlink(tmp_path / "ro" / "r.txt", ws / "ro_link")
    os.symlink(f"/proc/self/root{ws}/f.txt", ws / "proc_link")
    os.symlink(ws / "f.txt", tmp_path / "anc_link")
    os.symlink("../anc_link", ws / "via_ancestor_link")
    os.symlink(ws, tmp_path / "ws_alias")
    return tmp_path


@pytest.fixture
def sb(tree: Path) -> PathSandbox:
    return PathSandbox(
        [Root(str(tree / "ws"), True), Root(str(tree / "ro"), False)], str(tree / "ws")
    )


def R(tree: Path, rel: str) -> str:
    return str(tree / rel)


# (path, allowed for read) — {t} is replaced by tmp_path. 50+ cases.
READ_CASES: list[tuple[str, bool]] = [
    # plain and relative
    ("f.txt", True),
    ("./f.txt", True),
    ("sub/g.txt", True),
    ("sub/./g.txt", True),
    ("sub//g.txt", True),
    ("sub/", True),
    ("sub/g.txt/", True),
    (".", True),
    ("{t}/ws", True),
    ("{t}/ws/", True),
    ("{t}/ws/f.txt", True),
    ("//{t}/ws/f.txt", True),
    ("{t}/ws/./sub/../f.txt", False),  # '..' component, even if it would stay inside
    # EXE-2 lexical: component-wise '..', leading '~', NUL
    ("a..b.txt", True),
    ("notes~draft.md", True),
    ("...", True),
    ("sub/..g", True),
    ("..", False),
    ("../outside/secret.txt", False),
    ("sub/../../outside/secret.txt", False),
    ("sub/..", False),
    ("{t}/ws/../outside/secret.txt", False),
    ("~", False),
    ("~/x", False),
    ("~root/.ssh/id_rsa", False),
    ("f.txt\0.png", False),
    ("\0", False),
    ("\ud800", False),  # lone surrogate: not valid UTF-8, refused instead of crashing
    ("sub/a\udcff.txt", False),
    ("", False),
    # unicode, spaces, new files
    ("ünïcödé.txt", True),
    ("sp ace.txt", True),
    ("new_file.txt", True),
    ("new/dir/deep/file.txt", True),
    ("sub/new.txt", True),
    # absolute outside, siblings
    ("/etc/passwd", False),
    ("/", False),
    ("{t}", False),
    ("{t}/ws2/x.txt", False),
    ("{t}/ws2", False),
    ("{t}/wsx", False),
    ("{t}/outside/secret.txt", False),
    # read-only root readable
    ("{t}/ro/r.txt", True),
    ("ro_link", True),
    # symlinks inside, chains inside
    ("in_link", True),
    ("rel_chain1", True),
    ("subdir_link/g.txt", True),
    ("dangling_in", True),
    # symlinks out
    ("out_link", False),
    ("out_dir/secret.txt", False),
    ("out_dir", False),
    ("out_dir/new.txt", False),
    ("dangling_out", False),
    ("up_link", False),
    ("up_link/outside/secret.txt", False),
    # Through an ancestor of the root straight back into it (as any absolute target does).
    ("up_link/ws/f.txt", True),
    ("up_link/ws2/x.txt", False),
    ("chain_out_back", False),  # chain out of the roots and back in
    ("via_ancestor_link", False),  # back in through a link in the root's parent
    ("{t}/ws_alias/f.txt", True),  # an alias of the root, before entering it: fine
    ("{t}/anc_link", True),  # a link outside that leads into the root: fine
    ("loop_a", False),
    ("self_loop", False),
    ("loop_a/x", False),
    # magic links
    ("/proc/self/root{t}/ws/f.txt", False),
    ("/proc/self/cwd/f.txt", False),
    ("/proc/thread-self/root/etc/passwd", False),
    ("/proc/1/root/etc/shadow", False),
    ("/proc/self/fd/0", False),
    ("/dev/fd/0", False),
    ("/dev/stdin", False),
    ("proc_link", False),
    # very long names
    ("x" * 255, True),
    ("x" * 256, False),
    ("/".join(["d"] * 2000), True),  # deep but inside (does not exist: lexical tail)
]


@pytest.mark.parametrize(("raw", "allowed"), READ_CASES, ids=[repr(c[0])[:60] for c in READ_CASES])
def test_read_cases(sb: PathSandbox, tree: Path, raw: str, allowed: bool) -> None:
    path = raw.replace("{t}", str(tree))
    decision = sb.check(path)
    assert decision.allowed is allowed, decision.reason
    if allowed:
        assert decision.root is not None
        assert decision.reason == f"inside {decision.root.path}"
        assert decision.resolved.startswith(decision.root.path)
        assert decision.resolved == os.path.normpath(decision.resolved)
    else:
        assert decision.reason
        with pytest.raises(PathRefused):
            sb.require(path)


def test_case_count_is_at_least_fifty() -> None:
    assert len(READ_CASES) >= 50


@pytest.mark.parametrize(
    ("raw", "allowed"),
    [
        ("f.txt", True),
        ("new/file.txt", True),
        ("{t}/ro/r.txt", False),
        ("{t}/ro/new.txt", False),
        ("ro_link", False),
        (".git/hooks/pre-commit", False),
        (".git/hooks", False),
        ("sub/.git/hooks/post-checkout", False),
        (".git/config", False),
        # EXE-3 rev 2: the whole git directory, and the `.git` file (gitdir pointer).
        (".git/HEAD", False),
        (".git/objects/ab/cdef", False),
        (".git/commondir", False),
        (".git/config.worktree", False),
        (".git/modules/m/config", False),
        (".git/worktrees/w/config", False),
        ("sub/.git", False),
        ("deep/er/.git/config", False),
        (".gitattributes", True),
        (".gitmodules", False),
        (".bashrc", False),
        ("sub/.profile", False),
        (".zshrc", False),
        (".vscode/tasks.json", False),
        (".vscode", False),
        (".envrc", False),
        (".ssh/authorized_keys", False),
        ("bashrc.txt", True),
        ("my.bashrc", True),
        (".vscodeignore", True),
        ("docs/.gitignore", True),
    ],
)
def test_write_cases(sb: PathSandbox, tree: Path, raw: str, allowed: bool) -> None:
    decision = sb.check(raw.replace("{t}", str(tree)), write=True)
    assert decision.allowed is allowed, decision.reason
    assert sb.check(raw.replace("{t}", str(tree))).allowed or not allowed


def test_relative_resolves_against_cwd(tree: Path) -> None:
    sb = PathSandbox([Root(str(tree / "ws"), True)], str(tree / "ws" / "sub"))
    assert sb.check("g.txt").resolved == R(tree, "ws/sub/g.txt")


def test_containment_is_by_component_not_prefix(tree: Path) -> None:
    sb = PathSandbox([Root(str(tree / "ws"), True)], str(tree / "ws"))
    assert not sb.check(R(tree, "ws2/x.txt")).allowed
    assert sb.root_for(R(tree, "ws2")) is None
    assert sb.inside_cwd(R(tree, "ws/sub"))
    assert not sb.inside_cwd(R(tree, "ws2"))


def test_most_specific_root_wins(tree: Path) -> None:
    vendor = tree / "ws" / "vendor"
    vendor.mkdir()
    sb = PathSandbox([Root(str(tree / "ws"), True), Root(str(vendor), False)], str(tree / "ws"))
    assert sb.check("vendor/lib.py").allowed
    assert not sb.check("vendor/lib.py", write=True).allowed
    assert sb.check("other.py", write=True).allowed


def test_duplicate_root_stricter_mode_wins(tree: Path) -> None:
    ws = str(tree / "ws")
    sb = PathSandbox([Root(ws, True), Root(ws + "/", False)], ws)
    assert sb.roots == (Root(ws, False),)


def test_root_given_through_symlink_is_canonicalised(tree: Path) -> None:
    sb = PathSandbox([Root(str(tree / "ws_alias"), True)], str(tree / "ws_alias"))
    assert sb.roots[0].path == R(tree, "ws")
    # A path spelled through the alias (outside any root, before entering one) is fine.
    assert sb.check(R(tree, "ws_alias/f.txt")).resolved == R(tree, "ws/f.txt")


def test_symlinked_parent_dir_resolution(tree: Path, sb: PathSandbox) -> None:
    assert sb.check("subdir_link/g.txt").resolved == R(tree, "ws/sub/g.txt")
    decision = sb.check("out_dir/secret.txt")
    assert decision.resolved == R(tree, "outside/secret.txt")
    assert "outside the allowed roots" in decision.reason


def test_new_file_judged_by_deepest_existing_ancestor(tree: Path, sb: PathSandbox) -> None:
    assert sb.check("out_dir/a/b/c.txt").resolved == R(tree, "outside/a/b/c.txt")
    assert not sb.check("out_dir/a/b/c.txt", write=True).allowed
    assert sb.check("subdir_link/a/b.txt", write=True).resolved == R(tree, "ws/sub/a/b.txt")


def test_unsearchable_directory_is_refused(tree: Path, sb: PathSandbox) -> None:
    if os.geteuid() == 0:
        # root bypasses directory permissions; simulate with a path under a regular file.
        assert sb.check("f.txt/child").allowed  # ENOTDIR: lexical tail, inside
        return
    locked = tree / "ws" / "locked"
    locked.mkdir(mode=0)
    assert not sb.check("locked/x").allowed


def test_from_settings_modes(tree: Path) -> None:
    lib = tree / "lib"
    skills = tree / "skills"
    lib.mkdir()
    skills.mkdir()
    sb = PathSandbox.from_settings(
        tree / "ws", lib, skills, [f"{tree}/ro:ro", f"{tree}/ws2:rw", f"{tree}/outside"]
    )
    modes = {r.path: r.writable for r in sb.roots}
    assert modes == {
        R(tree, "ws"): True,
        str(lib): True,
        str(skills): False,
        R(tree, "ro"): False,
        R(tree, "ws2"): True,
        R(tree, "outside"): True,
    }
    assert sb.cwd == R(tree, "ws")
    with pytest.raises(ValueError):
        PathSandbox.from_settings(tree / "ws", None, None, [":ro"])


def test_denied_read_globs(tree: Path) -> None:
    (tree / "ws" / ".env").write_text("K=1")
    (tree / "ws" / "sub" / ".env").write_text("K=2")
    os.symlink(".env", tree / "ws" / "env_alias")
    sb = PathSandbox(
        [Root(str(tree / "ws"), True)], str(tree / "ws"), denied_read_globs=["**/.env"]
    )
    assert not sb.check(".env").allowed
    assert not sb.check("sub/.env").allowed
    assert not sb.check("env_alias").allowed  # judged on the canonical path too
    assert sb.check(".env.example").allowed
    with pytest.raises(PathRefused):
        sb.open(".env", os.O_RDONLY)


def test_protected_globs_helpers() -> None:
    assert is_protected_write("/w/.git/hooks/x", DEFAULT_PROTECTED_WRITES) == ".git/**"
    assert is_protected_write("/w/a/.bashrc", DEFAULT_PROTECTED_WRITES) == ".bashrc"
    assert is_protected_write("/w/a/bashrc", DEFAULT_PROTECTED_WRITES) is None
    assert is_protected_write("/etc/cron.d/x", ["/etc/cron.d/*"]) == "/etc/cron.d/*"
    assert is_protected_write("/x/etc/cron.d/x", ["/etc/cron.d/*"]) is None
    assert match_relative_glob("**/*.py", "a/b/c.py")
    assert match_relative_glob("**/*.py", "c.py")
    assert not match_relative_glob("*.py", "a/c.py")
    assert match_relative_glob("src/*/x.txt", "src/a/x.txt")


def test_custom_protected_writes_configurable(tree: Path) -> None:
    sb = PathSandbox(
        [Root(str(tree / "ws"), True)], str(tree / "ws"), protected_write_globs=["*.lock"]
    )
    assert sb.check(".bashrc", write=True).allowed
    assert not sb.check("poetry.lock", write=True).allowed


# --- open (EXE-4) ---------------------------------------------------------------------


def test_open_reads_inside(sb: PathSandbox) -> None:
    fd = sb.open("sub/g.txt", os.O_RDONLY)
    try:
        assert os.read(fd, 10) == b"g"
    finally:
        os.close(fd)


def test_open_creates_new_file(tree: Path, sb: PathSandbox) -> None:
    fd = sb.open("created.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"c")
    os.close(fd)
    assert (tree / "ws" / "created.txt").read_text() == "c"


def test_open_refuses_outside_and_readonly_writes(tree: Path, sb: PathSandbox) -> None:
    with pytest.raises(PathRefused):
        sb.open("out_link", os.O_RDONLY)
    with pytest.raises(PathRefused):
        sb.open(R(tree, "ro/r.txt"), os.O_WRONLY | os.O_TRUNC)
    assert (tree / "ro" / "r.txt").read_text() == "r"
    with pytest.raises(PathRefused):
        sb.open("dangling_out", os.O_WRONLY | os.O_CREAT)
    assert not (tree / "outside" / "new.txt").exists()


def test_open_refuses_fifo(tree: Path, sb: PathSandbox) -> None:
    os.mkfifo(tree / "ws" / "fifo")
    with pytest.raises(PathRefused, match="not a regular file"):
        sb.open("fifo", os.O_RDONLY)


class _StaleCheckSandbox(PathSandbox):
    """A real PathSandbox whose check answers with a decision made earlier: the state of
    the file system at check time, before a swap, as a race between check and open sees
    it."""

    stale: PathDecision | None = None

    def check(
        self, path: str, *, write: bool = False, known_dirs: set[str] | None = None
    ) -> PathDecision:
        if self.stale is not None:
            return self.stale
        return super().check(path, write=write, known_dirs=known_dirs)


def test_open_symlink_swapped_after_check_is_not_followed(tree: Path) -> None:
    """The check passes on a real directory; the directory is then replaced by a symlink
    out of the roots before the open: the open must fail, not read outside."""
    sb = _StaleCheckSandbox(
        [Root(str(tree / "ws"), True), Root(str(tree / "ro"), False)], str(tree / "ws")
    )
    victim = tree / "ws" / "d"
    victim.mkdir()
    (victim / "s.txt").write_text("inside")
    assert sb.check("d/s.txt").allowed
    # The swap between check() and the open: check() answers what it saw before it.
    sb.stale = sb.check("d/s.txt")
    (victim / "s.txt").unlink()
    victim.rmdir()
    os.symlink(tree / "outside", victim)
    os.symlink(tree / "outside" / "secret.txt", tree / "outside" / "s.txt")
    with pytest.raises(PathRefused):
        sb.open("d/s.txt", os.O_RDONLY)
    # The final component swapped for a symlink is refused too.
    (tree / "ws" / "e.txt").write_text("e")
    sb.stale = None
    sb.stale = sb.check("e.txt")
    (tree / "ws" / "e.txt").unlink()
    os.symlink(tree / "outside" / "secret.txt", tree / "ws" / "e.txt")
    with pytest.raises(PathRefused):
        sb.open("e.txt", os.O_RDONLY)
    with pytest.raises(PathRefused):
        sb.open("e.txt", os.O_WRONLY | os.O_TRUNC)
    assert (tree / "outside" / "secret.txt").read_text() == "secret"


def test_walk_open_fallback_refuses_swapped_symlinks(tree: Path, sb: PathSandbox) -> None:
    """The O_NOFOLLOW walk used where openat2 is missing."""
    root_fd = os.open(str(tree / "ws"), os.O_PATH | os.O_DIRECTORY)
    try:
        fd = PathSandbox._walk_open(root_fd, "sub/g.txt", os.O_RDONLY | os.O_NOFOLLOW, 0)
        assert os.read(fd, 5) == b"g"
        os.close(fd)
        for rel in ("out_dir/secret.txt", "out_link", "subdir_link/g.txt"):
            with pytest.raises(OSError) as info:
                PathSandbox._walk_open(root_fd, rel, os.O_RDONLY | os.O_NOFOLLOW, 0)
            assert info.value.errno in (errno.ELOOP, errno.ENOTDIR)
    finally:
        os.close(root_fd)


def test_makedirs_creates_inside_and_refuses_symlink_routes(tree: Path, sb: PathSandbox) -> None:
    assert sb.makedirs("m/n/o") == R(tree, "ws/m/n/o")
    assert (tree / "ws" / "m" / "n" / "o").is_dir()
    with pytest.raises(PathRefused):
        sb.makedirs("out_dir/evil")
    assert not (tree / "outside" / "evil").exists()
    with pytest.raises(PathRefused):
        sb.makedirs(".git/hooks")
