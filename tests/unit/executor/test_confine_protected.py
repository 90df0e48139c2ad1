"""Protected files at run time (EXE-3), with the real launcher, Landlock and namespaces.

The bash analysis and the file tools refuse writes to the protected list (rc files,
``.envrc``, ``.vscode/``, ``.npmrc`` …) at any depth, but a program they cannot see into
(an approved ``python3 x.py``) or a chain of steps (``touch .bashrc; ln .bashrc b2; echo
… >> b2``) can still make one. At run time:

* what exists is read-only (any depth, with every other name of its inode);
* what the command creates is removed when it ends, by the worker, or by the launcher
  after a kill, and the command's stderr and the mount_mask layer say so.

Each attack runs first without the protection (the file lands), then with it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from stockade.executor.confine import ConfinementPolicy, Launcher, protect
from stockade.executor.paths import DEFAULT_PROTECTED_WRITES

# What a program the analysis cannot see into writes (argv: path=content pairs; a path
# ending in "/" is made as a directory). It prints what it managed.
_WRITER = (
    "import os, sys\n"
    "for arg in sys.argv[1:]:\n"
    "    path, _, text = arg.partition('=')\n"
    "    try:\n"
    "        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
    "        with open(path, 'a') as fh: fh.write(text)\n"
    "        print('WROTE', path)\n"
    "    except OSError as exc:\n"
    "        print('REFUSED', path, exc.errno)\n"
)


def _policy(ws: Path, *, protected: bool = True, **kwargs: object) -> ConfinementPolicy:
    return ConfinementPolicy(
        readable_roots=(str(ws),),
        writable_roots=(str(ws),),
        read_only_globs=DEFAULT_PROTECTED_WRITES if protected else (),
        protect_git=protected,
        **kwargs,  # type: ignore[arg-type]
    )


def _detail(outcome: object, name: str) -> str:
    for layer in outcome.layers:  # type: ignore[attr-defined]
        if layer.name == name:
            return str(layer.detail)
    raise AssertionError(f"no layer {name}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "writer.py").write_text(_WRITER)
    return path


# --- creation, by class ---------------------------------------------------------------------

# (what the command does, the protected paths it leaves without the layer)
# (what the command does, the protected paths it leaves without the layer, the ordinary
# paths it makes that must stay: a link's other name, a symlink's target, a copy's source)
CREATIONS: list[tuple[str, list[str], list[str]]] = [
    # A program writes them (the analysis sees only `python3 writer.py`).
    (
        "python3 writer.py .envrc=evil .npmrc=script-shell=/tmp/x .bashrc=evil "
        ".vscode/tasks.json={} .idea/workspace.xml=x .config/fish/config.fish=x",
        [".envrc", ".npmrc", ".bashrc", ".vscode", ".idea", ".config/fish"],
        [".config"],
    ),
    # Deep: direnv runs the .envrc of any directory a person enters; VS Code the tasks of
    # any folder opened; npm the .npmrc of the nearest package root.
    (
        "mkdir -p a/b/c && python3 writer.py a/b/.envrc=evil a/b/c/.vscode/tasks.json={} "
        "packages/p/.npmrc=x",
        ["a/b/.envrc", "a/b/c/.vscode", "packages/p/.npmrc"],
        ["a/b/c", "packages/p"],
    ),
    # Hard link, then append through the other name.
    ("touch .bashrc; ln .bashrc b2; echo evil >> b2", [".bashrc"], ["b2"]),
    # A link from an ordinary file to a protected name (the file stays, the name goes).
    ("echo evil > x; ln x .envrc", [".envrc"], ["x"]),
    # Symlinks named like protected files, in and out of the root (never followed).
    ("echo evil > y; ln -s y .zshrc; ln -s /etc/passwd .profile", [".zshrc", ".profile"], ["y"]),
    # Renames: an ordinary file or directory moved onto a protected name.
    (
        "echo evil > n; mv n .envrc; mkdir d; echo {} > d/tasks.json; mv d .vscode",
        [".envrc", ".vscode"],
        [],
    ),
    # A folded spelling the sandbox refuses too.
    ("python3 writer.py .BASHRC=evil .VSCode/tasks.json={}", [".BASHRC", ".VSCode"], []),
    # Copies and archives carry them in.
    (
        "mkdir -p tpl/.vscode && echo {} > tpl/.vscode/tasks.json && cp -r tpl/.vscode ."
        " && echo evil > tpl/x && tar cf t.tar -C tpl x && mkdir u && tar xf t.tar -C u"
        " && mv u/x u/.envrc",
        [".vscode", "tpl/.vscode", "u/.envrc"],
        ["tpl/x", "t.tar", "u"],
    ),
    # Special files and links to what is not there yet, or to a directory.
    (
        "mkfifo .bash_profile; ln -s later .zshenv; mkdir real && echo {} > real/tasks.json"
        " && ln -s real .idea",
        [".bash_profile", ".zshenv", ".idea"],
        ["real/tasks.json"],
    ),
    # Inside an existing ordinary directory tree, under an .ssh dir made later.
    (
        "mkdir -p home/u/.ssh && echo key > home/u/.ssh/authorized_keys",
        ["home/u/.ssh"],
        ["home/u"],
    ),
]


@pytest.mark.parametrize(
    ("command", "planted", "kept"), CREATIONS, ids=[c[0][:40] for c in CREATIONS]
)
async def test_protected_files_a_command_creates_are_removed(
    launcher: Launcher, tmp_path: Path, command: str, planted: list[str], kept: list[str]
) -> None:
    for name, protected in (("off", False), ("on", True)):
        ws = tmp_path / name
        ws.mkdir()
        (ws / "writer.py").write_text(_WRITER)
        (ws / "keep.txt").write_text("mine\n")
        outcome = await launcher.run(
            command + "; echo done",
            cwd=str(ws),
            policy=_policy(ws, protected=protected),
            timeout_s=60,
        )
        assert "done" in outcome.stdout, outcome.stderr
        for rel in planted:
            # Without the layer they land; with it they go.
            assert os.path.lexists(ws / rel) is not protected, (rel, outcome.stderr)
        # Nothing else goes: the ordinary files, a link's other name, a symlink's target.
        for rel in ("keep.txt", "writer.py", *kept):
            assert os.path.lexists(ws / rel), (rel, outcome.stderr)
    assert (ws / "keep.txt").read_text() == "mine\n"
    for rel in planted:
        assert str(ws / rel) in outcome.stderr, (rel, outcome.stderr)
    assert "removed" in _detail(outcome, "mount_mask")
    assert "stockade: removed protected files" in outcome.stderr
    assert Path("/etc/passwd").exists()


async def test_ordinary_commands_keep_their_files_and_existing_protected_ones(
    launcher: Launcher, ws: Path
) -> None:
    """No false removals: pre-existing protected files stay, ordinary output stays,
    names that only look alike (``.envrc.example``, ``bashrc``) are ordinary."""
    (ws / ".envrc").write_text("theirs\n")
    (ws / "deep" / ".vscode").mkdir(parents=True)
    (ws / "deep" / ".vscode" / "settings.json").write_text("{}\n")
    outcome = await launcher.run(
        "mkdir -p out && echo a > out/a.txt && echo b > .envrc.example && echo c > bashrc"
        " && cat .envrc && echo ok",
        cwd=str(ws),
        policy=_policy(ws),
        timeout_s=60,
    )
    assert outcome.stdout == "theirs\nok\n", outcome.stderr
    assert "removed" not in outcome.stderr
    for rel in ("out/a.txt", ".envrc.example", "bashrc", ".envrc", "deep/.vscode/settings.json"):
        assert (ws / rel).exists(), rel


# --- what exists cannot change ---------------------------------------------------------------


async def test_existing_protected_files_are_read_only_at_any_depth_and_through_links(
    launcher: Launcher, ws: Path
) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / ".envrc").write_text("orig\n")
    (ws / "pkg" / ".vscode").mkdir(parents=True)
    (ws / "pkg" / ".vscode" / "tasks.json").write_text("{}\n")
    (ws / "notes.txt").write_text("orig\n")
    os.link(ws / "notes.txt", ws / ".npmrc")  # a hard link made before the command
    (ws / "target.txt").write_text("orig\n")
    os.symlink("target.txt", ws / ".bashrc")  # an rc file that is a link to a file
    command = (
        "python3 writer.py sub/.envrc=evil pkg/.vscode/tasks.json=evil "
        "pkg/.vscode/extra.json=evil notes.txt=evil target.txt=evil; "
        "ln sub/.envrc sub/l2 || echo LINK-REFUSED; rm -f sub/.envrc || echo RM-REFUSED; "
        # Move the directory away and make a new one in its place: the old file keeps
        # its identity (it is theirs), the new one goes.
        "mv sub sub2 && mkdir sub && echo evil > sub/.envrc; echo done"
    )
    off = await launcher.run(
        command, cwd=str(ws), policy=_policy(ws, protected=False), timeout_s=60
    )
    assert "WROTE notes.txt" in off.stdout  # without the layer: writes through the link
    for path, text in (
        ("sub2/.envrc", "orig\n"),
        ("pkg/.vscode/tasks.json", "{}\n"),
        ("notes.txt", "orig\n"),
        ("target.txt", "orig\n"),
    ):
        (ws / path).write_text(text)
    _remove(ws / "sub")
    _remove(ws / "pkg" / ".vscode" / "extra.json")
    os.rename(ws / "sub2", ws / "sub")
    os.unlink(ws / ".npmrc")
    os.link(ws / "notes.txt", ws / ".npmrc")

    on = await launcher.run(command, cwd=str(ws), policy=_policy(ws), timeout_s=60)
    assert "done" in on.stdout, on.stderr
    for rel in (
        "sub/.envrc",
        "pkg/.vscode/tasks.json",
        "pkg/.vscode/extra.json",
        "notes.txt",
        "target.txt",
    ):
        assert f"REFUSED {rel} 30" in on.stdout, (rel, on.stdout)  # EROFS
    assert "LINK-REFUSED" in on.stdout and "RM-REFUSED" in on.stdout
    assert (ws / "sub2" / ".envrc").read_text() == "orig\n"  # theirs, moved, kept
    assert not (ws / "sub" / ".envrc").exists()  # the new one went
    assert (ws / ".npmrc").read_text() == "orig\n"
    assert (ws / "target.txt").read_text() == "orig\n"
    assert (ws / "pkg" / ".vscode" / "tasks.json").read_text() == "{}\n"


# --- a killed command ------------------------------------------------------------------------


async def test_protected_files_created_before_a_timeout_are_removed_by_the_launcher(
    launcher: Launcher, ws: Path
) -> None:
    outcome = await launcher.run(
        "mkdir -p a && echo evil > a/.envrc && echo planted && sleep 600",
        cwd=str(ws),
        policy=_policy(ws),
        timeout_s=10,  # room for the sandbox on a busy machine
    )
    assert outcome.timed_out and "planted" in outcome.stdout
    deadline = asyncio.get_running_loop().time() + 60
    while (ws / "a" / ".envrc").exists():
        assert asyncio.get_running_loop().time() < deadline, "the planted .envrc stayed"
        await asyncio.sleep(0.1)
    assert (ws / "a").is_dir()


async def test_without_a_mount_namespace_what_is_created_is_still_removed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    launcher = Launcher(disable=("mount_mask",))
    await launcher.start()
    try:
        outcome = await launcher.run(
            "mkdir -p x && echo evil > x/.envrc && touch .bashrc && echo done",
            cwd=str(ws),
            policy=_policy(ws),
            timeout_s=60,
        )
    finally:
        await launcher.close()
    assert "done" in outcome.stdout, outcome.stderr
    assert not (ws / "x" / ".envrc").exists() and not (ws / ".bashrc").exists()
    assert "still removed" in _detail(outcome, "mount_mask")


async def test_a_masked_protected_file_is_not_taken_for_a_new_one(
    launcher: Launcher, ws: Path
) -> None:
    """A file both denied for reading (masked: the command sees an empty file there) and
    protected is theirs: the clean-up must not remove it."""
    (ws / ".npmrc").write_text("//registry/:_authToken=secret\n")
    outcome = await launcher.run(
        "cat .npmrc; echo ok",
        cwd=str(ws),
        policy=_policy(ws, masked_globs=("**/.npmrc",)),
        timeout_s=60,
    )
    assert outcome.stdout == "ok\n", outcome.stderr
    assert (ws / ".npmrc").read_text() == "//registry/:_authToken=secret\n"


# --- the removal itself: no symlink on the way is followed --------------------------------


def test_removal_never_follows_a_parent_swapped_for_a_symlink(tmp_path: Path) -> None:
    """Between the walk and the removal a concurrent process swaps a parent directory for
    a symlink to a place outside the root holding the same name: nothing outside goes."""
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    (ws / "a").mkdir(parents=True)
    outside.mkdir()
    (ws / "a" / ".envrc").write_text("evil\n")
    (outside / ".envrc").write_text("someone else's\n")
    names = protect.Names.compile(DEFAULT_PROTECTED_WRITES)
    found = protect.survey([str(ws)], names, git=True)
    [entry] = [e for e in found.protected if e.path.endswith(".envrc")]
    os.rename(ws / "a", ws / "a-moved")
    os.symlink(outside, ws / "a")
    with pytest.raises(OSError):  # ELOOP/ENOTDIR on the symlink: refused, not followed
        protect.remove_beneath(str(ws), "a/.envrc", entry.identity, frozenset())
    # Even given the outside file's own identity, the symlinked parent is not crossed.
    st = os.lstat(outside / ".envrc")
    with pytest.raises(OSError):
        protect.remove_beneath(str(ws), "a/.envrc", (st.st_dev, st.st_ino), frozenset())
    assert (outside / ".envrc").read_text() == "someone else's\n"
    # The root itself reached through a symlink is refused too.
    os.symlink(ws, tmp_path / "ws-link")
    with pytest.raises(OSError):
        protect.remove_beneath(
            str(tmp_path / "ws-link"), "a-moved/.envrc", entry.identity, frozenset()
        )
    # A file replaced since the walk (another identity) is left alone.
    os.unlink(ws / "a-moved" / ".envrc")
    (ws / "a-moved" / ".envrc").write_text("new\n")
    assert not protect.remove_beneath(str(ws), "a-moved/.envrc", (0, 0), frozenset())
    assert (ws / "a-moved" / ".envrc").exists()


def test_clean_up_removes_a_new_directory_whole_without_following_links_inside(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    keep = tmp_path / "keep"
    ws.mkdir()
    keep.mkdir()
    (keep / "precious").write_text("x\n")
    names = protect.Names.compile(DEFAULT_PROTECTED_WRITES)
    before = protect.Snapshot.of(
        protect.survey([str(ws)], names, git=True), [str(ws)], DEFAULT_PROTECTED_WRITES, git=True
    )
    (ws / ".vscode").mkdir()
    os.symlink(keep, ws / ".vscode" / "link")
    (ws / ".vscode" / "tasks.json").write_text("{}")
    removed = protect.clean_up(before)
    assert removed.protected == [str(ws / ".vscode")] and not removed.failed
    assert (keep / "precious").exists()
    # The snapshot survives the launcher's state file.
    assert protect.Snapshot.from_dict(before.to_dict()) == before


def test_too_many_protected_paths_fail_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(5):
        (ws / f"p{i}").mkdir()
        (ws / f"p{i}" / ".envrc").write_text("x")
    monkeypatch.setattr(protect, "MAX_BINDS", 4)
    found = protect.survey([str(ws)], protect.Names.compile(DEFAULT_PROTECTED_WRITES), git=True)
    with pytest.raises(OSError, match="more than 4 protected paths"):
        protect.bind_targets(found, [str(ws)])


# --- a command that hides what it made from the clean-up ------------------------------------

# The clean-up runs without capabilities: a directory made unreadable, unsearchable or
# read-only by the command would keep its protected files from it.
HIDING: list[tuple[str, list[str], dict[str, int]]] = [
    ("mkdir -p a && echo evil > a/.envrc && chmod 000 a", ["a/.envrc"], {"a": 0o000}),
    ("mkdir -p b/c && echo evil > b/c/.npmrc && chmod 100 b", ["b/c/.npmrc"], {"b": 0o100}),
    ("mkdir ro && touch ro/.bashrc && chmod 555 ro", ["ro/.bashrc"], {"ro": 0o555}),
    (
        "mkdir -p .vscode/d/e && echo {} > .vscode/tasks.json && echo x > .vscode/d/e/f"
        " && chmod 000 .vscode/d/e && chmod 500 .vscode/d .vscode",
        [".vscode"],
        {},
    ),
]


@pytest.mark.parametrize(("command", "planted", "modes"), HIDING, ids=[h[0][:30] for h in HIDING])
async def test_protected_files_in_directories_made_unreadable_are_removed(
    launcher: Launcher, ws: Path, command: str, planted: list[str], modes: dict[str, int]
) -> None:
    on = await launcher.run(command + "; echo done", cwd=str(ws), policy=_policy(ws), timeout_s=60)
    assert "done" in on.stdout, on.stderr
    assert "WARNING" not in on.stderr, on.stderr
    # The directories get their modes back (look as root: the test holds capabilities).
    for rel, mode in modes.items():
        assert (ws / rel).stat().st_mode & 0o777 == mode, rel
    for rel in planted:
        assert not os.path.lexists(ws / rel), (rel, on.stderr)
    assert not [p for p in os.listdir(ws) if p.startswith(protect.QUARANTINE_PREFIX)]


async def test_a_tree_too_deep_to_remove_is_left_under_a_name_nothing_reads(
    launcher: Launcher, ws: Path
) -> None:
    depth = protect.MAX_REMOVE_DEPTH + 5
    outcome = await launcher.run(
        f"p=.vscode; for i in $(seq {depth}); do p=$p/d; done; mkdir -p $p"
        " && echo {} > .vscode/tasks.json && echo done",
        cwd=str(ws),
        policy=_policy(ws),
        timeout_s=60,
    )
    assert "done" in outcome.stdout, outcome.stderr
    assert not os.path.lexists(ws / ".vscode")
    assert "could not remove" in outcome.stderr and "levels" in outcome.stderr
    left = [p for p in os.listdir(ws) if p.startswith(protect.QUARANTINE_PREFIX)]
    assert len(left) == 1
    assert "could NOT remove" in _detail(outcome, "mount_mask")


async def test_without_a_mount_namespace_changed_protected_files_are_set_aside(
    tmp_path: Path,
) -> None:
    """Restricted pods have no mount namespace: existing protected files cannot be bound
    read-only there, so a change (append, rewrite, or an inode reused after a delete) is
    found by its ctime and the file is renamed to a name nothing reads, kept for its
    owner."""
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / ".envrc").write_text("theirs\n")
    (ws / ".npmrc").write_text("registry=x\n")
    (ws / "same").mkdir()
    (ws / "same" / ".envrc").write_text("untouched\n")
    launcher = Launcher(disable=("mount_mask",))
    await launcher.start()
    try:
        outcome = await launcher.run(
            "echo evil >> sub/.envrc; rm .npmrc; for i in 1 2 3; do echo evil > t$i; done;"
            " mv t1 .npmrc; echo done",
            cwd=str(ws),
            policy=_policy(ws),
            timeout_s=60,
        )
    finally:
        await launcher.close()
    assert "done" in outcome.stdout, outcome.stderr
    assert not (ws / "sub" / ".envrc").exists() and not (ws / ".npmrc").exists()
    [aside] = [p for p in os.listdir(ws / "sub") if p.startswith(protect.QUARANTINE_PREFIX)]
    assert aside.endswith("-.envrc")
    assert (ws / "sub" / aside).read_text() == "theirs\nevil\n"  # kept for its owner
    assert "set aside" in outcome.stderr
    assert (ws / "same" / ".envrc").read_text() == "untouched\n"
