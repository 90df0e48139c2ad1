"""Property: no generated path that resolves outside the roots is ever allowed (EXE-3)."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.executor.paths import PathSandbox, Root

COMPONENTS = [
    "f.txt",
    "sub",
    "g.txt",
    "new",
    "ws",
    "ws2",
    "ro",
    "outside",
    "secret.txt",
    "in_link",
    "out_link",
    "out_dir",
    "up_link",
    "loop",
    "ro_link",
    "chain",
    ".",
    "..",
    "",
    "~",
    "a..b",
    "x~",
    "proc",
    "self",
    "root",
    "fd",
    "0",
]
PREFIXES = [
    "",
    "/",
    "{t}/",
    "{t}/ws/",
    "{t}/ro/",
    "{t}/outside/",
    "/proc/self/root{t}/ws/",
    "/dev/fd/",
    "/etc/",
    "~/",
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PathSandbox]:
    t = tmp_path_factory.mktemp("prop")
    ws = t / "ws"
    (ws / "sub").mkdir(parents=True)
    (t / "ws2").mkdir()
    (t / "ro").mkdir()
    (t / "outside" / "sub").mkdir(parents=True)
    for f in (
        ws / "f.txt",
        ws / "sub" / "g.txt",
        t / "ws2" / "f.txt",
        t / "ro" / "f.txt",
        t / "outside" / "secret.txt",
    ):
        f.write_text("x")
    os.symlink("f.txt", ws / "in_link")
    os.symlink("../outside/secret.txt", ws / "out_link")
    os.symlink(t / "outside", ws / "out_dir")
    os.symlink("..", ws / "up_link")
    os.symlink("loop", ws / "loop")
    os.symlink(t / "ro", ws / "ro_link")
    os.symlink(t / "ws", t / "outside" / "chain")
    os.symlink(t / "outside" / "chain", ws / "sub" / "chain")
    os.symlink("../ws2", ws / "sub" / "ws2")
    os.symlink("nowhere", ws / "dangling")
    # A bare repository layout: writes in or below it are refused (git layout checks).
    (ws / "bare" / "objects").mkdir(parents=True)
    (ws / "bare" / "HEAD").write_text("ref: refs/heads/main\n")
    sb = PathSandbox([Root(str(ws), True), Root(str(t / "ro"), False)], str(ws))
    return t, sb


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


paths = st.builds(
    lambda prefix, parts, slash: prefix + "/".join(parts) + ("/" if slash else ""),
    st.sampled_from(PREFIXES),
    st.lists(st.sampled_from(COMPONENTS), min_size=0, max_size=6),
    st.booleans(),
)


@settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=paths, write=st.booleans())
def test_allowed_paths_resolve_inside_roots(
    world: tuple[Path, PathSandbox], raw: str, write: bool
) -> None:
    t, sb = world
    path = raw.replace("{t}", str(t))
    decision = sb.check(path, write=write)
    if not decision.allowed:
        return
    # Independent oracle: the kernel-like resolution of the C library.
    real = os.path.realpath(os.path.join(sb.cwd, path))
    assert real == decision.resolved
    assert any(_inside(real, r.path) for r in sb.roots)
    assert ".." not in path.split("/") and not path.startswith("~") and "\0" not in path
    assert not path.startswith(("/proc", "/dev/fd"))
    if write:
        assert not _inside(real, str(t / "ro"))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.text(st.characters(exclude_categories=()), min_size=1, max_size=40))
def test_arbitrary_text_names_never_escape(world: tuple[Path, PathSandbox], name: str) -> None:
    _, sb = world
    decision = sb.check(name)  # never raises, even on lone surrogates
    if "\0" in name or name.startswith("~") or ".." in name.split("/"):
        assert not decision.allowed
    if decision.allowed:
        assert any(_inside(decision.resolved, r.path) for r in sb.roots)


def _glob_parts_match(pattern: list[str], parts: list[str]) -> bool:
    """The reference: components matched by fnmatch, ``**`` tried at every split."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_parts_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return (
        bool(parts)
        and fnmatch.fnmatchcase(parts[0], pattern[0])
        and _glob_parts_match(pattern[1:], parts[1:])
    )


GLOB_PARTS = ["*", "**", "?", "a", "b", ".git", "hooks", "*.py", "[ab]", "[!a]", "a*b", "x?"]
PATH_PARTS = ["a", "b", "ab", ".git", "hooks", "x.py", "xy", "c", "a.b", "ba"]


@settings(max_examples=1500, deadline=None)
@given(
    glob_parts=st.lists(st.sampled_from(GLOB_PARTS), min_size=1, max_size=4),
    anchored=st.booleans(),
    path_parts=st.lists(st.sampled_from(PATH_PARTS), min_size=1, max_size=5),
)
def test_compiled_globs_agree_with_component_matching(
    glob_parts: list[str], anchored: bool, path_parts: list[str]
) -> None:
    """The compiled regex (fast path) means exactly what the glob says component-wise."""
    from stockade.executor.paths import is_protected_write

    glob = ("/" if anchored else "") + "/".join(glob_parts)
    path = "/" + "/".join(path_parts)
    if anchored:
        expected = _glob_parts_match(glob_parts, path_parts)
    else:
        expected = any(
            _glob_parts_match(glob_parts, path_parts[i:]) for i in range(len(path_parts))
        )
    assert (is_protected_write(path, [glob]) is not None) == expected


# Names that exercise each way the openat2 fast path of PathSandbox._resolve can fail:
# a dangling link, a file used as a directory, a missing parent, links at every depth.
FAST_PATH_COMPONENTS = [
    *COMPONENTS,
    *("dangling", "nowhere", "f.txt", "in_link", "sub"),
    *("bare", "HEAD", "objects", "refs", "config"),
]

fast_paths = st.builds(
    lambda prefix, parts, slash: prefix + "/".join(parts) + ("/" if slash else ""),
    st.sampled_from(PREFIXES),
    st.lists(st.sampled_from(FAST_PATH_COMPONENTS), min_size=0, max_size=6),
    st.booleans(),
)


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=fast_paths, write=st.booleans())
def test_the_symlink_free_fast_path_decides_as_the_walk_does(
    world: tuple[Path, PathSandbox], raw: str, write: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_resolve settles a path without symlinks in one openat2 (a missing one by its
    ancestors, and the git layout check starts at the deepest existing one); every
    decision (allowed, canonical form, reason) is the one the component-by-component walk
    makes."""
    from stockade.executor import paths

    t, sb = world
    path = raw.replace("{t}", str(t))
    assert paths.openat2_available()  # the kernel here has it: the fast path is under test
    fast = sb.check(path, write=write)
    with monkeypatch.context() as patched:
        patched.setattr(paths, "_OPENAT2", False)
        walked = sb.check(path, write=write)
    assert fast == walked


@settings(max_examples=1500, deadline=None)
@given(
    parts=st.lists(st.sampled_from(["", ".", "a", "b.c", "...", ".x", "x."]), max_size=6),
    slashes=st.integers(min_value=1, max_value=3),
)
def test_a_path_taken_as_normal_is_what_normpath_returns(parts: list[str], slashes: int) -> None:
    """_lexical skips normpath for a path it takes as normal: only when normpath would
    return it unchanged (with no leading '//', which it keeps)."""
    from stockade.executor.paths import _is_normal

    path = "/" * slashes + "/".join(parts)
    if _is_normal(path):
        assert os.path.normpath(path) == path
        assert not path.startswith("//")


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raws=st.lists(st.tuples(fast_paths, st.booleans()), min_size=1, max_size=6))
def test_checks_sharing_known_directories_decide_as_the_walk_does(
    world: tuple[Path, PathSandbox],
    raws: list[tuple[str, bool]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checks of one analysis share the directories found to exist without symlinks
    (one lstat for the next path in them); every decision is still the walk's, and only
    directories are remembered."""
    from stockade.executor import paths

    t, sb = world
    known: set[str] = set()
    for raw, write in raws:
        path = raw.replace("{t}", str(t))
        fast = sb.check(path, write=write, known_dirs=known)
        with monkeypatch.context() as patched:
            patched.setattr(paths, "_OPENAT2", False)
            walked = sb.check(path, write=write)
        assert fast == walked
    for directory in known:
        assert os.path.isdir(directory) and os.path.realpath(directory) == directory


@pytest.mark.parametrize(
    "name",
    [
        "in_link",
        "out_link",
        "out_dir/secret.txt",
        "dangling",
        "loop",
        "up_link",
        "ro_link/f.txt",
        "sub/chain",
        "sub/ws2/f.txt",
        "f.txt/x",
        "bare/HEAD",
        "bare/new",
        "nowhere/deeper/file",
    ],
)
@pytest.mark.parametrize("write", [False, True])
def test_a_known_directory_does_not_hide_a_symlink_below_it(
    world: tuple[Path, PathSandbox], name: str, write: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a check found the workspace (and sub/) to exist without symlinks, each link,
    loop, missing or non-directory name below them is still decided as the walk does."""
    from stockade.executor import paths

    t, sb = world
    known: set[str] = set()
    sb.check(str(t / "ws" / "f.txt"), known_dirs=known)
    sb.check(str(t / "ws" / "sub" / "g.txt"), known_dirs=known)
    assert {str(t / "ws"), str(t / "ws" / "sub")} <= known
    path = str(t / "ws" / name)
    fast = sb.check(path, write=write, known_dirs=known)
    with monkeypatch.context() as patched:
        patched.setattr(paths, "_OPENAT2", False)
        walked = sb.check(path, write=write)
    assert fast == walked
