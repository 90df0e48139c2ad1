"""Run-time layers of issue 11 (EXE-3 rev 2, EXE-9 rev 2), with the real launcher:

* a memory cgroup per command (the limit holds across several processes, where the
  per-process address-space rlimit alone lets one call hold many GB);
* every git directory, `.git` file and bare layout in the writable roots is read-only,
  and one the command creates is removed before a person's git can read it;
* the directories of Stockade's own unix sockets are hidden from every command.

Each test first shows what the command does without the layer (or what host git does
with the result), then that the layer holds.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path

import pytest

from stockade.executor.confine import ConfinementPolicy, Launcher, Rlimits
from stockade.executor.confine.limits import MemoryCgroupRoot
from tests.hostgit import host_git


def _policy(root: Path, **kwargs: object) -> ConfinementPolicy:
    return ConfinementPolicy(
        readable_roots=(str(root),),
        writable_roots=(str(root),),
        **kwargs,  # type: ignore[arg-type]
    )


def _layer(outcome: object, name: str) -> tuple[bool, str]:
    for layer in outcome.layers:  # type: ignore[attr-defined]
        if layer.name == name:
            return layer.active, layer.detail
    raise AssertionError(f"no layer {name}")


# --- memory -------------------------------------------------------------------------------

# Four processes of 48 MiB each: every one is far below the address-space rlimit, together
# they pass a 96 MiB command limit. (Touching the pages makes them count.)
_HOG = (
    "for i in 1 2 3 4; do python3 -c 'import time; b = bytearray(48 << 20); "
    'b[::4096] = b"x" * len(b[::4096]); time.sleep(3)\' & done; wait; echo survived'
)


async def test_memory_cgroup_limits_the_whole_command(launcher: Launcher, tmp_path: Path) -> None:
    assert _layer_named(launcher, "memory_cgroup")[0]
    roomy = await launcher.run(
        _HOG,
        cwd=str(tmp_path),
        policy=_policy(tmp_path, rlimits=Rlimits(memory_bytes=1024 << 20)),
        timeout_s=60,
    )
    assert "survived" in roomy.stdout, roomy.stderr  # the processes fit in 1 GiB
    tight = await launcher.run(
        _HOG + "; cat /proc/self/cgroup",
        cwd=str(tmp_path),
        policy=_policy(tmp_path, rlimits=Rlimits(memory_bytes=96 << 20)),
        timeout_s=60,
    )
    active, detail = _layer(tight, "memory_cgroup")
    assert active and "96 MiB" in detail
    # The OOM killer ended at least one of them (SIGKILL: bash reports "Killed").
    assert "Killed" in tight.stderr or tight.exit_code != 0, (tight.stdout, tight.stderr)


def _layer_named(launcher: Launcher, name: str) -> tuple[bool, str]:
    for layer in launcher.layers():
        if layer.name == name:
            return layer.active, layer.detail
    raise AssertionError(f"no layer {name}")


def test_memory_cgroup_root_sets_and_reads_a_limit() -> None:
    root = MemoryCgroupRoot.create(f"stockade-launcher-{os.getpid()}-test")
    try:
        child = root.child("c", 64 << 20)
        from stockade.executor.confine import limits

        assert limits.memory_limit(child) == 64 << 20
        limits.set_memory(child, 128 << 20)  # raising works too (memsw ordering)
        assert limits.memory_limit(child) == 128 << 20
        limits.set_memory(child, 32 << 20)
        assert limits.memory_limit(child) == 32 << 20
    finally:
        root.remove()
    assert not os.path.exists(root.path)


async def test_memory_cgroup_disabled_is_reported_inactive(tmp_path: Path) -> None:
    launcher = Launcher(disable=("memory_cgroup",))
    await launcher.start()
    try:
        assert not _layer_named(launcher, "memory_cgroup")[0]
        outcome = await launcher.run(
            "echo ok", cwd=str(tmp_path), policy=_policy(tmp_path), timeout_s=30
        )
    finally:
        await launcher.close()
    active, detail = _layer(outcome, "memory_cgroup")
    assert not active and "disabled" in detail
    assert outcome.stdout == "ok\n"


# --- git directories read-only, new ones removed ------------------------------------------


def _payload_config(marker: Path) -> str:
    return f'[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch {marker}; false"\n'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert host_git(ws, "init", "-q", ".").returncode == 0
    (ws / "f.txt").write_text("a\n")
    return ws


async def test_existing_git_dirs_are_read_only_for_commands(
    launcher: Launcher, repo: Path, tmp_path: Path
) -> None:
    """A program the checker cannot see into (python here) rewriting .git/config would
    make the person's next `git status` run the payload; at run time it cannot."""
    marker = tmp_path / "MARK-config"
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    assert host_git(nested, "init", "-q", ".").returncode == 0
    bare = repo / "store"
    assert host_git(repo, "init", "-q", "--bare", "store").returncode == 0
    (repo / "sub").mkdir()
    (repo / "sub" / ".git").write_text("gitdir: ../store\n")
    script = (
        "import sys\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        open(p, 'w').write(sys.stdin.read() or 'x')\n"
        "        print('WROTE', p)\n"
        "    except OSError as e:\n"
        "        print('REFUSED', p, e.errno)\n"
    )
    (tmp_path / "w.py").write_text(script)
    targets = [
        repo / ".git" / "config",
        repo / ".git" / "commondir",
        repo / ".git" / "hooks" / "pre-commit",
        nested / ".git" / "config",
        bare / "config",
        repo / "sub" / ".git",
        repo / "f.txt",
    ]
    command = f"python3 {tmp_path / 'w.py'} " + " ".join(str(t) for t in targets)
    outcome = await launcher.run(
        command,
        cwd=str(repo),
        policy=ConfinementPolicy(
            readable_roots=(str(repo), str(tmp_path)),
            writable_roots=(str(repo),),
            protect_git=True,
        ),
        timeout_s=60,
    )
    lines = outcome.stdout.splitlines()
    assert f"WROTE {repo / 'f.txt'}" in lines, outcome.stdout + outcome.stderr
    for target in targets[:-1]:
        assert f"REFUSED {target} 30" in lines, (target, outcome.stdout)  # EROFS
    assert "git director" in _layer(outcome, "mount_mask")[1]
    # Without the layer the same write lands and host git runs the payload.
    (repo / ".git" / "config").write_text(_payload_config(marker))
    host_git(repo, "status")
    assert marker.exists()


async def test_git_dirs_a_command_creates_are_removed(
    launcher: Launcher, repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "MARK-new"
    config = _payload_config(marker).replace("\n", "\\n").replace('"', '\\"')
    # What a script or an approved build could do: lay out a gitdir and point at it.
    command = (
        "mkdir -p new/objects new/refs && echo 'ref: refs/heads/main' > new/HEAD && "
        f'printf "{config}" > new/config && mkdir sub && echo "gitdir: ../new" > sub/.git && '
        f'git init -q fresh && printf "{config}" > fresh/.git/config && echo done'
    )
    # First with the layer off: both plants work on the host.
    off = await launcher.run(command, cwd=str(repo), policy=_policy(repo), timeout_s=60)
    assert "done" in off.stdout, off.stderr
    host_git(repo / "sub", "status")
    assert marker.exists()
    marker.unlink()
    host_git(repo / "fresh", "status")
    assert marker.exists()
    marker.unlink()
    for leftover in ("new", "sub", "fresh"):
        subprocess.run(["rm", "-rf", str(repo / leftover)], check=True)

    on = await launcher.run(
        command, cwd=str(repo), policy=_policy(repo, protect_git=True), timeout_s=60
    )
    assert "done" in on.stdout, on.stderr
    detail = _layer(on, "git_neutralised")[1]
    assert "removed" in detail, detail
    assert not (repo / "sub" / ".git").exists()
    assert not (repo / "fresh" / ".git").exists()
    assert not (repo / "new" / "HEAD").exists()
    host_git(repo / "sub", "status")
    host_git(repo / "fresh", "status")
    host_git(repo / "new", "status")
    assert not marker.exists()
    # The repository that was there before is untouched.
    assert (repo / ".git" / "HEAD").exists()


async def test_new_git_dirs_are_removed_without_a_mount_namespace(tmp_path: Path) -> None:
    """Where the mount namespace is unavailable (restricted pods) the removal still holds."""
    repo = tmp_path / "ws"
    repo.mkdir()
    launcher = Launcher(disable=("mount_mask",))
    await launcher.start()
    try:
        outcome = await launcher.run(
            "git init -q fresh && echo done",
            cwd=str(repo),
            policy=_policy(repo, protect_git=True),
            timeout_s=60,
        )
    finally:
        await launcher.close()
    assert "done" in outcome.stdout, outcome.stderr
    assert not (repo / "fresh" / ".git").exists()
    assert "removed" in _layer(outcome, "git_neutralised")[1]


# --- Stockade's own unix sockets ------------------------------------------------------------


async def test_stockade_socket_dirs_are_hidden(launcher: Launcher, tmp_path: Path) -> None:
    sockets = tmp_path / "run"
    sockets.mkdir()
    path = sockets / "decision.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    ws = tmp_path / "ws"
    ws.mkdir()
    probe = (
        "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); "
        f's.connect("{path}"); print("CONNECTED")\'; ls -a {sockets}'
    )
    try:
        policy = ConfinementPolicy(
            readable_roots=(str(ws), str(sockets)), writable_roots=(str(ws),)
        )
        reachable = await launcher.run(probe, cwd=str(ws), policy=policy, timeout_s=60)
        assert "CONNECTED" in reachable.stdout, reachable.stderr  # without the mask
        hidden = await launcher.run(
            probe,
            cwd=str(ws),
            policy=ConfinementPolicy(
                readable_roots=(str(ws), str(sockets)),
                writable_roots=(str(ws),),
                masked_dirs=(str(sockets),),
            ),
            timeout_s=60,
        )
    finally:
        server.close()
    assert "CONNECTED" not in hidden.stdout
    assert "decision.sock" not in hidden.stdout
    assert "1 Stockade socket mask" in _layer(hidden, "mount_mask")[1]


async def test_socket_next_to_the_workspace_is_masked_alone(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A socket dir that holds the workspace cannot be hidden whole: its sockets are."""
    path = tmp_path / "executor.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("still here\n")
    probe = (
        "cat keep.txt; python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); "
        f's.connect("{path}"); print("CONNECTED")\''
    )
    try:
        outcome = await launcher.run(
            probe,
            cwd=str(ws),
            policy=ConfinementPolicy(
                readable_roots=(str(tmp_path),),
                writable_roots=(str(ws),),
                masked_dirs=(str(tmp_path),),
            ),
            timeout_s=60,
        )
    finally:
        server.close()
    assert "still here" in outcome.stdout
    assert "CONNECTED" not in outcome.stdout, outcome.stdout


def test_settings_name_the_memory_limit_and_socket_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    from stockade.executor.settings import ExecutorSettings
    from stockade.server.settings import SettingsError, load_settings

    monkeypatch.setenv("STOCKADE_EXECUTOR_MEMORY_LIMIT_MB", "512")
    monkeypatch.setenv("STOCKADE_EXECUTOR_LISTEN", "unix:///run/stockade-x/executor.sock")
    monkeypatch.setenv("STOCKADE_DECISION_LISTEN", "unix:///srv/sock/decision.sock")
    monkeypatch.setenv("STOCKADE_AGENT_AUDIT_ADDR", "unix:///var/lib/st/audit.sock")
    monkeypatch.setenv("STOCKADE_AUDIT_LISTEN", "127.0.0.1:50053")
    monkeypatch.setenv("STOCKADE_EXECUTOR_SOCKET_DIRS_EXTRA", "/opt/more")
    settings = load_settings(ExecutorSettings)
    assert settings.memory_limit_mb == 512
    assert set(settings.socket_dirs()) == {
        "/run/stockade-x",
        "/srv/sock",
        "/var/lib/st",
        "/opt/more",
    }
    monkeypatch.setenv("STOCKADE_EXECUTOR_MEMORY_LIMIT_MB", "1")
    with pytest.raises(SettingsError, match="MEMORY_LIMIT_MB"):
        load_settings(ExecutorSettings)
    monkeypatch.setenv("STOCKADE_EXECUTOR_MEMORY_LIMIT_MB", "64")
    monkeypatch.setenv("STOCKADE_EXECUTOR_SOCKET_DIRS_EXTRA", "relative/dir")
    with pytest.raises(SettingsError, match="SOCKET_DIRS_EXTRA"):
        load_settings(ExecutorSettings)


async def test_run_bash_passes_memory_limit_and_socket_dirs(tmp_path: Path) -> None:
    from stockade.executor.paths import PathSandbox, Root
    from stockade.executor.tools.run_bash import confinement_policy

    sandbox = PathSandbox([Root(str(tmp_path), True)], str(tmp_path))
    policy = confinement_policy(
        sandbox,
        network_enabled=False,
        masked_globs=(),
        rlimits=Rlimits(memory_bytes=64 << 20),
        masked_dirs=("/run/x",),
    )
    assert policy.protect_git and policy.masked_dirs == ("/run/x",)
    assert ConfinementPolicy.from_dict(policy.to_dict()) == policy


async def test_git_dirs_created_before_a_timeout_are_removed_too(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The command plants a repository and then waits to be killed at its time limit,
    so the worker never reaches its own clean-up: the launcher does it after the kill."""
    repo = tmp_path / "ws"
    repo.mkdir()
    outcome = await launcher.run(
        "git init -q planted && echo planted && sleep 600",
        cwd=str(repo),
        policy=_policy(repo, protect_git=True),
        timeout_s=10,  # room for the sandbox and `git init` on a busy machine
    )
    assert outcome.timed_out and "planted" in outcome.stdout
    deadline = asyncio.get_running_loop().time() + 60
    while (repo / "planted" / ".git").exists():
        assert asyncio.get_running_loop().time() < deadline, "the planted .git stayed"
        await asyncio.sleep(0.1)
    assert (repo / "planted").is_dir()  # only the git directory went


async def test_a_repository_inside_a_masked_folder_is_never_taken_for_a_new_one(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A folder the policy masks hides its repository from the command; after a kill the
    launcher, which sees the real folder, must still know that repository was there."""
    repo = tmp_path / "ws"
    vault = repo / "vault"
    vault.mkdir(parents=True)
    assert host_git(vault, "init", "-q", ".").returncode == 0
    (repo / "keep").mkdir()
    assert host_git(repo / "keep", "init", "-q", ".").returncode == 0
    policy = _policy(repo, protect_git=True, masked_globs=("**/vault/**",))
    quick = await launcher.run("ls vault; echo ok", cwd=str(repo), policy=policy, timeout_s=60)
    assert quick.stdout.strip() == "ok", quick.stderr  # masked: empty, and the run works
    killed = await launcher.run("sleep 600", cwd=str(repo), policy=policy, timeout_s=2)
    assert killed.timed_out
    # The killed worker left its snapshot in the launcher's private dir; the launcher
    # removes the file once it has done the clean-up. Wait for that.
    import glob as globmod

    tmp_root = os.environ.get("TMPDIR") or "/tmp"
    pattern = os.path.join(tmp_root, f"stockade-launcher-{launcher.pid}-*", "w*.git")
    deadline = asyncio.get_running_loop().time() + 60
    while any(os.path.getsize(p) for p in globmod.glob(pattern) if os.path.exists(p)):
        assert asyncio.get_running_loop().time() < deadline, "the launcher never cleaned up"
        await asyncio.sleep(0.05)
    assert (vault / ".git" / "HEAD").exists()
    assert (repo / "keep" / ".git" / "HEAD").exists()


async def test_folders_named_like_git_parts_stay_writable(
    launcher: Launcher, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    (ws / "data" / "objects").mkdir(parents=True)
    (ws / "data" / "refs").mkdir()
    outcome = await launcher.run(
        "echo x > data/objects/m.bin && echo x > data/refs/r && echo ok",
        cwd=str(ws),
        policy=_policy(ws, protect_git=True),
        timeout_s=60,
    )
    assert outcome.stdout == "ok\n", outcome.stderr
    assert (ws / "data" / "objects" / "m.bin").exists()


# A System V shared memory segment of the host, made by a process of the command's own uid
# (an embedded PostgreSQL's interlock segment, a service's cache): with the host's IPC
# namespace shared, a command could list, attach, read, write and remove it (uid checks
# pass; Landlock does not govern System V IPC).
_SHM_PROBE = (
    "python3 -c 'import ctypes,sys; l=ctypes.CDLL(None); l.shmat.restype=ctypes.c_void_p; "
    'i=l.shmget({key}, 0, 0); print("SHMID", i); '
    "p=l.shmat(i, None, 0) if i >= 0 else None; "
    'print("READ", ctypes.string_at(p, 12) if p not in (None, 2**64-1) else b"")\''
)


async def test_host_system_v_ipc_is_out_of_reach(launcher: Launcher, tmp_path: Path) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    key = 0x5E0C0000 | (os.getpid() & 0xFFFF)
    shmid = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600, owned by our uid
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    try:
        address = libc.shmat(shmid, None, 0)
        ctypes.memmove(address, b"host-secret!", 12)
        libc.shmdt(ctypes.c_void_p(address))
        # The host's own view: the segment is there and holds the bytes.
        on_host = subprocess.run(
            ["python3", "-c", _SHM_PROBE.format(key=key)[len("python3 -c '") : -1]],
            capture_output=True,
            text=True,
        )
        assert "host-secret!" in on_host.stdout, on_host.stderr
        ws = tmp_path / "ws"
        ws.mkdir()
        policy = ConfinementPolicy(readable_roots=(str(ws),), writable_roots=(str(ws),))
        outcome = await launcher.run(
            _SHM_PROBE.format(key=key), cwd=str(ws), policy=policy, timeout_s=60
        )
        assert "SHMID -1" in outcome.stdout, outcome.stdout + outcome.stderr
        assert "host-secret!" not in outcome.stdout
        assert "private IPC namespace" in _layer(outcome, "mount_mask")[1]
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


# A key in the kernel keyring of the command's uid (`@u`: shared by every process of that
# uid on the host; Kerberos tickets, fscrypt keys, tokens a service parked there). keyctl
# takes no path: neither Landlock nor the masks govern it.
_KEY_PROBE = (
    "python3 -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); "
    'k=l.syscall(250 if __import__("os").uname().machine == "x86_64" else 219, '
    '10, -4, b"user", b"{name}", 0); print("KEY", k, ctypes.get_errno()); '
    "b=ctypes.create_string_buffer(64); "
    'n=l.syscall(250 if __import__("os").uname().machine == "x86_64" else 219, 11, k, b, 64) '
    'if k > 0 else -1; print("READ", b.raw[:max(n, 0)])\''
)


async def test_kernel_keyrings_of_the_uid_are_out_of_reach(
    launcher: Launcher, tmp_path: Path
) -> None:
    import ctypes

    machine = os.uname().machine
    add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[machine]
    libc = ctypes.CDLL(None, use_errno=True)
    name = f"stockade-test-{os.getpid()}"
    secret = b"keyring-secret!"
    key = libc.syscall(add_key, b"user", name.encode(), secret, len(secret), -4)  # @u
    assert key > 0, os.strerror(ctypes.get_errno())
    try:
        # The host's own view: any process of this uid finds and reads it.
        on_host = subprocess.run(
            ["bash", "-c", _KEY_PROBE.format(name=name)], capture_output=True, text=True
        )
        assert "keyring-secret!" in on_host.stdout, on_host.stdout + on_host.stderr
        ws = tmp_path / "ws"
        ws.mkdir()
        policy = ConfinementPolicy(readable_roots=(str(ws),), writable_roots=(str(ws),))
        outcome = await launcher.run(
            _KEY_PROBE.format(name=name), cwd=str(ws), policy=policy, timeout_s=60
        )
        assert "KEY -1 1" in outcome.stdout, outcome.stdout + outcome.stderr  # EPERM
        assert "keyring-secret!" not in outcome.stdout
        assert _layer(outcome, "seccomp")[0]
        # Ordinary programs still run under the filter.
        ordinary = await launcher.run(
            "python3 -c 'print(sum(range(10)))' && git --version && ls /usr",
            cwd=str(ws),
            policy=policy,
            timeout_s=60,
        )
        assert ordinary.exit_code == 0 and "45" in ordinary.stdout, ordinary.stderr
    finally:
        libc.syscall(keyctl, 9, key, -4)  # KEYCTL_UNLINK from @u
