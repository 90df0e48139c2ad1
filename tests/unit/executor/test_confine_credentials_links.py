"""Run-time reach of credentials and hard links (#11), with the real launcher, Landlock,
mount namespaces and the file tools:

* **credential files when the home directory is a root** (an agent started in ``~``):
  the analysis and the file tools refuse ``~/.ssh/id_rsa`` and the rest of the
  credential list, and now every command's mount namespace masks them too, so a path
  the analysis cannot see (built by ``printf`` at run time, a program, ``find -exec``)
  reads nothing;
* **hard links to denied files** under other names (made before the sandbox existed,
  nested, or by an earlier command before the policy denied the file): a mask covers a
  path, not an inode, and the sandbox judged the path, not the file. Now the other names
  are masked at run time, and the file tools refuse them.

Each test first shows the leak without the layer (the secret is printed), then that the
layer holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from stockade.errors import PathRefused
from stockade.executor.confine import ConfinementPolicy, Launcher, Rlimits
from stockade.executor.paths import PathSandbox, Root
from stockade.executor.readstate import ReadState
from stockade.executor.tools import file_tools
from stockade.executor.tools.base import ExecContext, ToolLimits, ToolResult
from stockade.executor.tools.run_bash import confinement_policy

SECRET = "hunter2-secret"


def _detail(outcome: object) -> str:
    for layer in outcome.layers:  # type: ignore[attr-defined]
        if layer.name == "mount_mask":
            return str(layer.detail)
    raise AssertionError("no mount_mask layer")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    for rel in (".ssh/id_rsa", ".aws/credentials", ".netrc", ".config/gh/hosts.yml"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(f"{SECRET} {rel}\n")
    (home / "proj").mkdir()
    (home / "proj" / "main.py").write_text("print('hi')\n")
    monkeypatch.setenv("HOME", str(home))
    yield home


# Ways to read a credential file that the analysis cannot see (or an approved program).
CREDENTIAL_READS = [
    # The path is built at run time.
    'p=$(printf \'%s/.s%s/id_%s\' "$ROOT" sh rsa); cat "$p"',
    'cat "$ROOT/$(echo LnNzaA== | base64 -d)/id_rsa"',
    # Relative, from inside the directory.
    "cd .ssh && cat id_*",
    # A program.
    "python3 -c \"import os; print(open(os.path.join('.aws', 'credentials')).read())\"",
    # Recursive readers.
    "grep -r hunter2 . 2>/dev/null",
    "find . -name '.netrc' -exec cat {} +",
    "tar cf - .config 2>/dev/null | tar xOf -",
    # Copy first, then read the copy.
    "cp .netrc /tmp/n 2>/dev/null; cp .netrc $TMPDIR/n; cat $TMPDIR/n",
]


@pytest.mark.parametrize("command", CREDENTIAL_READS)
async def test_credentials_in_a_home_root_are_masked_for_commands(
    launcher: Launcher, home: Path, command: str
) -> None:
    sandbox = PathSandbox([Root(str(home), True)], str(home))
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    assert policy.masked_credentials  # the analysis's own list, ~ = this home
    bare = ConfinementPolicy(readable_roots=(str(home),), writable_roots=(str(home),))
    line = f"ROOT={home}; {command}; echo done"
    leak = await launcher.run(line, cwd=str(home), policy=bare, timeout_s=60)
    assert SECRET in leak.stdout, (leak.stdout, leak.stderr)  # without the masks
    held = await launcher.run(line, cwd=str(home), policy=policy, timeout_s=60)
    assert "done" in held.stdout, held.stderr
    assert SECRET not in held.stdout + held.stderr
    assert "credential path(s)" in _detail(held)
    assert "0 credential" not in _detail(held)
    # The files themselves are untouched on the host.
    assert SECRET in (home / ".ssh" / "id_rsa").read_text()


async def test_ordinary_files_of_a_home_root_stay_readable(launcher: Launcher, home: Path) -> None:
    sandbox = PathSandbox([Root(str(home), True)], str(home))
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    outcome = await launcher.run(
        "cat proj/main.py && ls -a .ssh | wc -l", cwd=str(home), policy=policy, timeout_s=60
    )
    assert outcome.stdout.splitlines()[0] == "print('hi')", outcome.stderr
    assert outcome.stdout.splitlines()[1].strip() == "2"  # . and ..: the directory is empty


async def test_a_credential_dir_that_is_a_symlink_is_masked_where_it_points(
    launcher: Launcher, home: Path
) -> None:
    keys = home / "keys"
    (home / ".ssh").rename(keys)
    (home / ".ssh").symlink_to(keys)
    sandbox = PathSandbox([Root(str(home), True)], str(home))
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    outcome = await launcher.run(
        "cat keys/id_rsa .ssh/id_rsa; echo done", cwd=str(home), policy=policy, timeout_s=60
    )
    assert "done" in outcome.stdout and SECRET not in outcome.stdout


def test_no_credential_masks_when_the_home_is_not_in_a_root(tmp_path: Path, home: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    assert policy.masked_credentials == ()


# --- hard links to denied files ---------------------------------------------------------------

DENIED = ("**/.env", "**/secrets/**")


@pytest.fixture
def linked(tmp_path: Path) -> Path:
    """A workspace whose denied files have other names, made before any sandbox."""
    ws = tmp_path / "ws"
    (ws / "secrets").mkdir(parents=True)
    (ws / "a" / "b" / "c").mkdir(parents=True)
    (ws / ".env").write_text(f"{SECRET} env\n")
    (ws / "secrets" / "key").write_text(f"{SECRET} key\n")
    os.link(ws / ".env", ws / "notes.txt")
    os.link(ws / ".env", ws / "a" / "b" / "c" / "deep.cfg")
    os.link(ws / "secrets" / "key", ws / "a" / "key.bak")
    (ws / "plain.txt").write_text("ordinary\n")
    os.link(ws / "plain.txt", ws / "plain-link.txt")  # links of ordinary files stay readable
    return ws


LINK_NAMES = ["notes.txt", "a/b/c/deep.cfg", "a/key.bak"]


async def test_hard_links_of_denied_files_are_masked_for_commands(
    launcher: Launcher, linked: Path
) -> None:
    reads = "cat " + " ".join(LINK_NAMES) + "; grep -r hunter2 . ; cat plain-link.txt; echo done"
    policy = ConfinementPolicy(
        readable_roots=(str(linked),), writable_roots=(str(linked),), masked_globs=DENIED
    )
    plain = ConfinementPolicy(readable_roots=(str(linked),), writable_roots=(str(linked),))
    leak = await launcher.run(reads, cwd=str(linked), policy=plain, timeout_s=60)
    assert SECRET in leak.stdout  # without the masks
    held = await launcher.run(reads, cwd=str(linked), policy=policy, timeout_s=60)
    assert "done" in held.stdout, held.stderr
    assert SECRET not in held.stdout
    assert "ordinary" in held.stdout
    assert "3 hard link(s)" in _detail(held)
    # A new link to a masked file cannot be made either (the mask is another mount).
    made = await launcher.run(
        "ln .env again 2>&1 || echo REFUSED; ln secrets/key k2 2>&1 || echo REFUSED",
        cwd=str(linked),
        policy=policy,
        timeout_s=60,
    )
    assert made.stdout.count("REFUSED") == 2, made.stdout
    assert not (linked / "again").exists() and not (linked / "k2").exists()


async def test_a_link_made_before_the_policy_denied_the_file_is_masked_after(
    launcher: Launcher, tmp_path: Path
) -> None:
    """An earlier approved command links the file while nothing denies it; then the policy
    denies `.env` (a reload): the link is masked from then on."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text(f"{SECRET}\n")
    before = ConfinementPolicy(readable_roots=(str(ws),), writable_roots=(str(ws),))
    first = await launcher.run(
        "ln .env kept && echo linked", cwd=str(ws), policy=before, timeout_s=60
    )
    assert "linked" in first.stdout, first.stderr
    after = ConfinementPolicy(
        readable_roots=(str(ws),), writable_roots=(str(ws),), masked_globs=("**/.env",)
    )
    second = await launcher.run("cat kept; echo done", cwd=str(ws), policy=after, timeout_s=60)
    assert second.stdout == "done\n", second.stderr


def _ctx(sb: PathSandbox, cwd: Path) -> ExecContext:
    return ExecContext(
        session_id="s",
        call_id="c",
        working_dir=str(cwd),
        sandbox=sb,
        read_state=ReadState(),
        limits=ToolLimits(library_dir=None, max_output_chars=100_000, max_file_write_bytes=1 << 20),
    )


async def _run(tool: str, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
    items = [item async for item in file_tools()[tool].run(args, ctx)]
    result = items[-1]
    assert isinstance(result, ToolResult)
    return result


async def test_file_tools_refuse_hard_links_of_denied_files(linked: Path) -> None:
    sandbox = PathSandbox([Root(str(linked), True)], str(linked), denied_read_globs=DENIED)
    ctx = _ctx(sandbox, linked)
    for rel in LINK_NAMES:
        # The path alone is ordinary; the check sees the file's links (session 7: the bash
        # analysis judges with it, so `cat` of the link is refused like read_file).
        decision = sandbox.check(rel)
        assert not decision.allowed and "hard link" in decision.reason, rel
        result = await _run("read_file", {"file_path": rel}, ctx)
        assert SECRET not in result.content, rel
        assert "hard link" in result.content, result.content
        with pytest.raises(PathRefused, match="hard link"):
            sandbox.open(rel, os.O_RDONLY)
    # The same in a copy for another working directory (one lookup shared).
    deeper = sandbox.with_cwd(str(linked / "a"))
    with pytest.raises(PathRefused, match="hard link"):
        deeper.open("key.bak", os.O_RDONLY)
    grep = await _run("grep_files", {"pattern": "hunter2|ordinary", "path": str(linked)}, ctx)
    assert SECRET not in grep.content
    assert "ordinary" in grep.content  # other files with several links stay readable
    ok = await _run("read_file", {"file_path": "plain-link.txt"}, ctx)
    assert "ordinary" in ok.content


async def test_a_hard_link_made_after_the_first_lookup_is_seen_after_the_ttl(
    linked: Path,
) -> None:
    sandbox = PathSandbox([Root(str(linked), True)], str(linked), denied_read_globs=DENIED)
    os.close(sandbox.open("plain-link.txt", os.O_RDONLY))  # the lookup is made (and kept)
    (linked / "late.env").write_text(f"{SECRET}\n")
    os.link(linked / "late.env", linked / "later.txt")
    # late.env is not denied (only `.env` is); make a denied one now and link it.
    (linked / "x").mkdir()
    (linked / "x" / ".env").write_text(f"{SECRET}\n")
    os.link(linked / "x" / ".env", linked / "x-link")
    sandbox._linked.ttl_s = 0.0  # as if the 2 s had passed
    with pytest.raises(PathRefused, match="hard link"):
        sandbox.open("x-link", os.O_RDONLY)
    os.close(sandbox.open("later.txt", os.O_RDONLY))  # not a denied file's name


def test_too_large_a_tree_refuses_reading_linked_files(
    linked: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stockade.executor.confine import masks

    monkeypatch.setattr(masks, "MAX_ENTRIES", 3)
    sandbox = PathSandbox([Root(str(linked), True)], str(linked), denied_read_globs=DENIED)
    # Fail closed: a file with several links cannot be told apart from a denied one.
    with pytest.raises(PathRefused, match="could not all be found"):
        sandbox.open("plain-link.txt", os.O_RDONLY)
    # A file with one link needs no lookup.
    os.close(sandbox.open("a/b", os.O_RDONLY | os.O_DIRECTORY))


async def test_writing_through_a_hard_link_of_a_protected_file_leaves_it_alone(
    tmp_path: Path,
) -> None:
    """file_write and file_edit replace a file by a rename, so a name shared with a
    protected file (``.bashrc`` linked as ``b``) gets a new inode: ``.bashrc`` keeps its
    content."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".bashrc").write_text("# rc\n")
    os.link(ws / ".bashrc", ws / "b")
    ctx = _ctx(PathSandbox([Root(str(ws), True)], str(ws)), ws)
    read = await _run("read_file", {"file_path": "b"}, ctx)
    assert "# rc" in read.content
    await _run("file_edit", {"file_path": "b", "old_string": "# rc", "new_string": "evil"}, ctx)
    await _run("file_write", {"file_path": "b", "content": "evil2\n"}, ctx)
    assert (ws / "b").read_text() == "evil2\n"
    assert (ws / ".bashrc").read_text() == "# rc\n"


def test_system_masks_cover_the_analysis_credential_list_under_etc() -> None:
    """One list: every credential path of the bash analysis under a system directory a
    command may read (/etc) is masked in every command's mount namespace."""
    from stockade.executor.bash.lists import CREDENTIAL_PATHS
    from stockade.executor.confine import masks, worker

    readable = [d for d in worker.SYSTEM_READ_DIRS if d != "/proc"]  # private /proc
    for path in CREDENTIAL_PATHS:
        if not any(masks.within(path, d) for d in readable):
            continue
        base = path[:-3] if path.endswith("/**") else path
        if base == "/etc/ssh/ssh_host_*":
            continue  # expanded by find_sensitive (below)
        assert base in masks.SENSITIVE_SYSTEM_FILES, path


async def test_system_credentials_are_masked_for_commands(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The command runs as uid 0 without capabilities: it still owns /etc/shadow."""
    shadow = Path("/etc/shadow")
    assert shadow.exists() and shadow.stat().st_size > 0
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = ConfinementPolicy(readable_roots=(str(ws),), writable_roots=(str(ws),))
    outcome = await launcher.run(
        "p=$(printf '/e%sc/sh%sow' t ad); wc -c < \"$p\"",
        cwd=str(ws),
        policy=policy,
        timeout_s=60,
    )
    assert outcome.stdout.split()[0] == "0", outcome.stderr


async def test_a_home_reached_through_a_symlink_is_masked_by_its_real_path(
    launcher: Launcher, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME=/home/u where /home is a symlink: the roots are canonical, the list is not."""
    link = home.parent / "home-link"
    link.symlink_to(home)
    monkeypatch.setenv("HOME", str(link))
    sandbox = PathSandbox([Root(str(home), True)], str(home))
    assert not sandbox.check(str(home / ".ssh" / "id_rsa")).allowed
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    outcome = await launcher.run(
        "cat .ssh/id_rsa .netrc; echo done", cwd=str(home), policy=policy, timeout_s=60
    )
    assert outcome.stdout == "done\n", outcome.stderr


async def test_home_protected_paths_hold_for_a_home_reached_through_a_symlink(
    launcher: Launcher, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~/` entries of the protected list (`~/.local/bin/**`: a command there shadows the
    person's `git`) are expanded with the home as resolved too."""
    link = home.parent / "home-link"
    link.symlink_to(home)
    monkeypatch.setenv("HOME", str(link))
    sandbox = PathSandbox([Root(str(home), True)], str(home))
    assert not sandbox.check(str(home / ".local" / "bin" / "git"), write=True).allowed
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    outcome = await launcher.run(
        "mkdir -p .local/bin && printf '#!/bin/sh\\n' > .local/bin/git && echo done",
        cwd=str(home),
        policy=policy,
        timeout_s=60,
    )
    assert "done" in outcome.stdout, outcome.stderr
    assert not (home / ".local" / "bin" / "git").exists(), outcome.stderr
