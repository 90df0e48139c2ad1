"""Confined commands that try to escape, with real processes, files and sockets."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stockade.executor.confine import ConfinementPolicy, Launcher, Rlimits, RunOutcome
from tests.procs import pids_with, until_gone


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The workspace (the writable root); tmp_path itself holds the outside world."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    place = tmp_path / "outside"
    place.mkdir()
    (place / "secret.txt").write_text("outside-secret\n")
    return place


async def run(
    launcher: Launcher,
    ws: Path,
    command: str,
    *,
    timeout_s: float = 30,
    masked: tuple[str, ...] = (),
    readable: tuple[str, ...] = (),
    network: bool = False,
    rlimits: Rlimits | None = None,
) -> RunOutcome:
    policy = ConfinementPolicy(
        readable_roots=(str(ws), *readable),
        writable_roots=(str(ws),),
        network_enabled=network,
        masked_globs=masked,
        rlimits=rlimits or Rlimits(),
    )
    return await launcher.run(command, cwd=str(ws), policy=policy, timeout_s=timeout_s)


# --- filesystem: Landlock ---------------------------------------------------------


@pytest.mark.parametrize(
    "attempt",
    [
        "echo pwned > {out}/new.txt",
        "touch {out}/new.txt",
        "cp /etc/hostname {out}/new.txt",
        "mkdir {out}/new.txt",
        "python3 -c \"open('{out}/new.txt', 'w').write('x')\"",
        "ln -s {out} link && echo pwned > link/new.txt",
        "cd .. && echo pwned > outside/new.txt",
        "echo pwned > /proc/self/root{out}/new.txt",
        "tee {out}/new.txt </dev/null",
        "dd if=/dev/zero of={out}/new.txt bs=1 count=1",
    ],
)
async def test_writes_outside_the_roots_are_refused(
    launcher: Launcher, ws: Path, outside: Path, attempt: str
) -> None:
    outcome = await run(launcher, ws, attempt.format(out=outside))
    assert outcome.exit_code != 0
    assert not (outside / "new.txt").exists()


@pytest.mark.parametrize(
    "attempt",
    ["echo x >> {out}/secret.txt", "rm {out}/secret.txt", "mv {out}/secret.txt {ws}/"],
)
async def test_existing_files_outside_cannot_be_changed(
    launcher: Launcher, ws: Path, outside: Path, attempt: str
) -> None:
    outcome = await run(launcher, ws, attempt.format(out=outside, ws=ws))
    assert outcome.exit_code != 0
    assert (outside / "secret.txt").read_text() == "outside-secret\n"


@pytest.mark.parametrize(
    "attempt",
    [
        "cat {out}/secret.txt",
        "ln -s {out}/secret.txt l && cat l",
        "cat ../outside/secret.txt",
        "grep -r outside-secret {out}",
        "cat /proc/self/root{out}/secret.txt",
        "cat /proc/1/root{out}/secret.txt",
        "python3 -c \"print(open('{out}/secret.txt').read())\"",
        "ls /root",
    ],
)
async def test_reads_outside_the_roots_are_refused(
    launcher: Launcher, ws: Path, outside: Path, attempt: str
) -> None:
    outcome = await run(launcher, ws, attempt.format(out=outside))
    assert "outside-secret" not in outcome.stdout
    assert outcome.exit_code != 0


async def test_writes_inside_the_workspace_and_system_reads_work(
    launcher: Launcher, ws: Path
) -> None:
    outcome = await run(
        launcher,
        ws,
        "mkdir -p a/b && echo hi > a/b/f && mv a/b/f a/g && cat a/g && head -c 4 /etc/passwd"
        " && echo ok > /dev/null && python3 -c 'print(6*7)'",
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.stdout == "hi\nroot42\n"
    assert (ws / "a" / "g").read_text() == "hi\n"


async def test_read_only_root_is_readable_not_writable(
    launcher: Launcher, ws: Path, outside: Path
) -> None:
    outcome = await run(
        launcher,
        ws,
        f"cat {outside}/secret.txt; echo x > {outside}/new.txt",
        readable=(str(outside),),
    )
    assert outcome.stdout == "outside-secret\n"
    assert not (outside / "new.txt").exists()


async def test_read_only_root_nested_in_the_workspace_stays_read_only(
    launcher: Launcher, ws: Path
) -> None:
    skills = ws / "skills"
    skills.mkdir()
    (skills / "s.md").write_text("skill\n")
    policy = ConfinementPolicy(readable_roots=(str(ws), str(skills)), writable_roots=(str(ws),))
    outcome = await launcher.run(
        "echo evil > skills/s.md; echo new > skills/n.md; rm skills/s.md; echo ok > top.txt;"
        " echo done",
        cwd=str(ws),
        policy=policy,
        timeout_s=30,
    )
    assert (skills / "s.md").read_text() == "skill\n"
    assert not (skills / "n.md").exists()
    assert (ws / "top.txt").read_text() == "ok\n"
    assert outcome.stdout == "done\n"
    assert "Read-only file system" in outcome.stderr


# --- policy-denied reads: mount masking --------------------------------------------


@pytest.fixture
def secrets(ws: Path) -> Path:
    (ws / ".env").write_text("API_KEY=topsecret-1\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".env").write_text("API_KEY=topsecret-2\n")
    (ws / "vault").mkdir()
    (ws / "vault" / "key.pem").write_text("topsecret-3\n")
    (ws / "README").write_text("hello\n")
    return ws


MASKS = ("**/.env", "vault/**")


@pytest.mark.parametrize(
    "attempt",
    [
        "cat .env",
        "cat sub/.env",
        "cat sub/../.env",
        "cat ./sub/./.env",
        "grep -r topsecret .",
        "grep -rn API_KEY .",
        "find . -name .env -exec cat {} \\;",
        "find . -type f -exec cat {} +",
        "ln -s .env l && cat l",
        "ln -s sub s && cat s/.env",
        "cp .env copy && cat copy",
        "tar cf - . | tar xOf -",
        "cat vault/key.pem",
        "ls vault; cat vault/*",
        "python3 -c \"print(open('.env').read())\"",
        "cat $(pwd)/.env",
        "cat /proc/self/root$(pwd)/.env",
        "cat /proc/1/root$(pwd)/.env",
        "umount .env; cat .env",
        "rm .env; cat .env",
        "mv sub sub2 && cat sub2/.env",
        "dd if=.env 2>/dev/null",
        "while read l; do echo $l; done < .env",
        "mount --bind /dev/null .env; cat .env",
        "unshare -m sh -c 'umount .env; cat .env'",
    ],
)
async def test_masked_files_cannot_be_read_from_bash(
    launcher: Launcher, secrets: Path, attempt: str
) -> None:
    outcome = await run(launcher, secrets, attempt, masked=MASKS)
    assert "topsecret" not in outcome.stdout
    assert "topsecret" not in outcome.stderr
    # The files themselves are untouched: masking is a view, not a change.
    assert (secrets / ".env").read_text() == "API_KEY=topsecret-1\n"


async def test_unmasked_files_still_read_and_mask_is_counted(
    launcher: Launcher, secrets: Path
) -> None:
    outcome = await run(launcher, secrets, "cat README; cat .env | wc -c", masked=MASKS)
    assert outcome.stdout == "hello\n0\n"
    mask = next(layer for layer in outcome.layers if layer.name == "mount_mask")
    assert mask.active
    assert mask.detail.startswith("3 policy-denied")


async def test_masks_do_not_leak_into_the_host(launcher: Launcher, secrets: Path) -> None:
    await run(launcher, secrets, "true", masked=MASKS)
    with open("/proc/self/mountinfo") as fh:
        assert str(secrets) not in fh.read()


# --- network -----------------------------------------------------------------------


@pytest.fixture
async def listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    received: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(100))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, received
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    "attempt",
    [
        "echo hello > /dev/tcp/127.0.0.1/{port}",
        "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), 2);"
        " s.sendall(b'hello')\"",
        'python3 -c "import socket; s=socket.socket(socket.AF_INET6);'
        " s.connect(('::1', {port}))\"",
        "nsenter --net=/proc/1/ns/net bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}'",
        "unshare -n bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}'",
    ],
)
async def test_network_disabled_cannot_reach_the_host(
    launcher: Launcher, ws: Path, listener: tuple[int, list[bytes]], attempt: str
) -> None:
    port, received = listener
    outcome = await run(launcher, ws, attempt.format(port=port), timeout_s=20)
    await asyncio.sleep(0.1)
    assert outcome.exit_code != 0
    assert received == []


async def test_network_enabled_reaches_the_host(
    launcher: Launcher, ws: Path, listener: tuple[int, list[bytes]]
) -> None:
    port, received = listener
    outcome = await run(
        launcher, ws, f"echo hello > /dev/tcp/127.0.0.1/{port}", network=True, timeout_s=20
    )
    assert outcome.exit_code == 0, outcome.stderr
    for _ in range(100):
        if received:
            break
        await asyncio.sleep(0.02)
    assert received == [b"hello\n"]


async def test_no_usable_interface(launcher: Launcher, ws: Path) -> None:
    outcome = await run(launcher, ws, "ip -o link; cat /proc/net/dev | tail -n +3")
    links = outcome.stdout.strip().splitlines()
    assert len(links) == 2  # `lo` in ip's list and in /proc/net/dev, nothing else
    assert links[0].startswith("1: lo:") and "state DOWN" in links[0]
    assert links[1].split(":")[0].strip() == "lo"


async def test_abstract_unix_socket_of_the_host_is_unreachable(
    launcher: Launcher, ws: Path
) -> None:
    name = f"stockade-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(1)
    server.setblocking(False)
    try:
        outcome = await run(
            launcher,
            ws,
            'python3 -c "import socket; s=socket.socket(socket.AF_UNIX);'
            f" s.connect('\\0{name}'); s.sendall(b'x')\"",
        )
        assert outcome.exit_code != 0
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


async def test_host_unix_socket_files_are_masked(launcher: Launcher, ws: Path) -> None:
    sock_dir = Path("/run") / f"stockade-test-{uuid.uuid4().hex[:8]}"
    sock_dir.mkdir()
    path = sock_dir / "api.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.setblocking(False)
    try:
        # The pool was forked before the socket existed: run once to get a fresh worker.
        for _ in range(4):
            await run(launcher, ws, "true")
        outcome = await run(
            launcher,
            ws,
            'python3 -c "import socket; s=socket.socket(socket.AF_UNIX);'
            f" s.connect('{path}'); s.sendall(b'x')\"",
        )
        assert outcome.exit_code != 0
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
        shutil.rmtree(sock_dir)


# --- processes, privileges, limits -------------------------------------------------


async def test_no_new_privs_and_no_capabilities(launcher: Launcher, ws: Path) -> None:
    outcome = await run(
        launcher, ws, "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd|CapAmb)' /proc/self/status"
    )
    fields = dict(line.split(":\t") for line in outcome.stdout.splitlines())
    assert fields["NoNewPrivs"] == "1"
    assert fields["CapEff"] == fields["CapPrm"] == fields["CapBnd"] == fields["CapAmb"] == "0" * 16


async def test_host_processes_are_invisible_and_unkillable(launcher: Launcher, ws: Path) -> None:
    outcome = await run(
        launcher, ws, f"ls /proc | grep -E '^[0-9]+$' | sort -n; kill -9 {launcher.pid}; echo $?"
    )
    lines = outcome.stdout.split()
    assert lines[-1] != "0"
    visible = {int(x) for x in lines[:-1]}
    assert max(visible) < 20  # only the command's own namespace
    assert launcher.running
    os.kill(launcher.pid, 0)  # still alive


async def test_the_worker_is_not_readable_through_proc(launcher: Launcher, ws: Path) -> None:
    outcome = await run(launcher, ws, "cat /proc/1/environ; ls /proc/1/fd; cat /proc/1/maps")
    assert "PATH=" not in outcome.stdout
    assert "python" not in outcome.stdout
    assert outcome.exit_code != 0


async def test_pid_1_cannot_be_killed_from_inside(launcher: Launcher, ws: Path) -> None:
    outcome = await run(launcher, ws, "kill -9 1; kill -TERM 1; echo still here")
    assert outcome.stdout == "still here\n"
    assert outcome.exit_code == 0


async def test_fork_bomb_is_contained(launcher: Launcher, ws: Path) -> None:
    marker = f"bomb{uuid.uuid4().hex[:10]}"
    peak = 0
    task = asyncio.create_task(
        run(
            launcher,
            ws,
            f": {marker}; b(){{ b | b & }}; b; sleep 3",
            timeout_s=4,
            rlimits=Rlimits(nproc=64),
        )
    )
    while not task.done():
        peak = max(peak, len(pids_with(marker)))
        await asyncio.sleep(0.05)
    outcome = await task
    assert 1 < peak <= 64
    assert "Resource temporarily unavailable" in outcome.stderr
    assert await until_gone(marker) == []


async def test_fork_limit_errors_are_reported(launcher: Launcher, ws: Path) -> None:
    outcome = await run(
        launcher,
        ws,
        "for i in $(seq 1 40); do sleep 5 & done 2>&1; wait",
        timeout_s=6,
        rlimits=Rlimits(nproc=10),
    )
    assert "Resource temporarily unavailable" in outcome.stdout + outcome.stderr


async def test_file_size_limit(launcher: Launcher, ws: Path) -> None:
    outcome = await run(
        launcher,
        ws,
        "head -c 3000000 /dev/zero > big",
        rlimits=Rlimits(fsize_bytes=1_000_000),
    )
    assert outcome.exit_code != 0
    assert (ws / "big").stat().st_size <= 1_000_000


async def test_file_size_limit_efbig_in_python(launcher: Launcher, ws: Path) -> None:
    outcome = await run(
        launcher,
        ws,
        'python3 -c "import signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN);'
        " open('big', 'wb').write(b'x' * 2_000_000)\"",
        rlimits=Rlimits(fsize_bytes=1_000_000),
    )
    assert outcome.exit_code != 0
    assert "File too large" in outcome.stderr
    assert (ws / "big").stat().st_size <= 1_000_000


async def test_cpu_limit_kills_a_spinning_command(launcher: Launcher, ws: Path) -> None:
    outcome = await run(launcher, ws, "while :; do :; done", timeout_s=60, rlimits=Rlimits(cpu_s=1))
    assert not outcome.timed_out
    assert outcome.exit_code == 128 + 24  # SIGXCPU


async def test_address_space_and_open_files_limits(launcher: Launcher, ws: Path) -> None:
    outcome = await run(
        launcher,
        ws,
        'python3 -c "import resource as r; print(r.getrlimit(r.RLIMIT_NOFILE));'
        ' x = bytearray(1024**3)"',
        rlimits=Rlimits(as_bytes=512 * 1024**2, nofile=64),
    )
    assert outcome.stdout.startswith("(64, 64)")
    assert "MemoryError" in outcome.stderr
    assert outcome.exit_code != 0


async def test_limits_cannot_be_raised(launcher: Launcher, ws: Path) -> None:
    outcome = await run(launcher, ws, "ulimit -n 4096 && echo raised", rlimits=Rlimits(nofile=64))
    assert "raised" not in outcome.stdout


async def test_mount_and_namespace_tricks_fail(launcher: Launcher, ws: Path) -> None:
    outcome = await run(
        launcher,
        ws,
        "mount -t tmpfs t /mnt && echo mounted; chroot / true && echo chrooted;"
        " nsenter -t 1 -m true && echo entered",
    )
    assert "mounted" not in outcome.stdout
    assert "chrooted" not in outcome.stdout
    assert "entered" not in outcome.stdout


# --- git -----------------------------------------------------------------------------


@pytest.fixture
def planted_repo(ws: Path) -> Path:
    git = shutil.which("git")
    assert git is not None
    subprocess.run([git, "init", "-q", str(ws)], check=True)
    evil = ws / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {ws}/pwned-$(basename $0)-$$\ncat\n")
    evil.chmod(0o755)
    hooks = ws / "hooks"
    hooks.mkdir()
    for hook in ("post-checkout", "pre-commit", "post-index-change"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {ws}/pwned-hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    with open(ws / ".git" / "config", "a") as fh:
        fh.write(
            f"[core]\n\tfsmonitor = {evil}\n\tpager = {evil}\n\thooksPath = {hooks}\n"
            f"\tsshCommand = {evil}\n\teditor = {evil}\n"
            "[user]\n\tname = t\n\temail = t@example.com\n"
        )
    (ws / "file.txt").write_text("x\n")
    return ws


async def test_planted_git_config_runs_nothing(launcher: Launcher, planted_repo: Path) -> None:
    outcome = await run(
        launcher,
        planted_repo,
        "git status --short; git add file.txt; git commit -qm m; git log --oneline | cat;"
        " git -P log -1 --format=%s; git checkout -q -b other; git diff HEAD",
        timeout_s=60,
    )
    assert "?? evil.sh" in outcome.stdout or "file.txt" in outcome.stdout
    assert sorted(p.name for p in planted_repo.iterdir() if p.name.startswith("pwned")) == []


# --- persistence: protected files stay read-only --------------------------------------

PROTECTED = (".git/hooks/**", ".git/config", ".bashrc", ".ssh/**", "*.sh")


async def test_protected_files_stay_read_only_even_for_approved_commands(
    launcher: Launcher, planted_repo: Path
) -> None:
    ws = planted_repo
    (ws / ".bashrc").write_text("# rc\n")
    (ws / "sub").mkdir()
    config = (ws / ".git" / "config").read_text()
    policy = ConfinementPolicy(
        readable_roots=(str(ws),), writable_roots=(str(ws),), read_only_globs=PROTECTED
    )
    outcomes = []
    for cwd in (ws, ws / "sub"):
        outcome = await launcher.run(
            "python3 -c \"open('" + str(ws) + "/.git/hooks/pre-commit', 'w').write('x')\";"
            f" echo evil >> {ws}/.git/config; echo evil >> {ws}/.bashrc;"
            f" rm -f {ws}/.git/hooks/*; git status --short >/dev/null && echo status-ok;"
            f" git add {ws}/file.txt && git commit -qm m && echo commit-ok",
            cwd=str(cwd),
            policy=policy,
            timeout_s=60,
        )
        assert "status-ok" in outcome.stdout, outcome.stderr
        mask = next(layer for layer in outcome.layers if layer.name == "mount_mask")
        # .git/hooks, .git/config, .bashrc, and evil.sh (a wildcard glob: the walk of the
        # writable roots finds those too).
        assert "4 protected path(s)" in mask.detail
        outcomes.append(outcome)
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert (ws / ".git" / "config").read_text() == config
    assert (ws / ".bashrc").read_text() == "# rc\n"
    # The repository itself stays usable.
    assert "commit-ok" in outcomes[0].stdout, outcomes[0].stderr


async def test_nested_repository_at_the_working_directory_is_protected(
    launcher: Launcher, ws: Path
) -> None:
    git = shutil.which("git")
    assert git is not None
    inner = ws / "libs" / "inner"
    inner.mkdir(parents=True)
    subprocess.run([git, "init", "-q", str(inner)], check=True)
    policy = ConfinementPolicy(
        readable_roots=(str(ws),), writable_roots=(str(ws),), read_only_globs=PROTECTED
    )
    outcome = await launcher.run(
        "echo x > .git/hooks/post-checkout; echo ok > notes.txt",
        cwd=str(inner),
        policy=policy,
        timeout_s=30,
    )
    assert not (inner / ".git" / "hooks" / "post-checkout").exists()
    assert (inner / "notes.txt").read_text() == "ok\n"
    assert "Read-only file system" in outcome.stderr


async def test_host_secrets_in_system_dirs_read_empty(launcher: Launcher, ws: Path) -> None:
    assert Path("/etc/shadow").stat().st_size > 0
    outcome = await run(launcher, ws, "cat /etc/shadow /etc/gshadow | wc -c; head -c 4 /etc/passwd")
    assert outcome.stdout == "0\nroot"
    assert Path("/etc/shadow").stat().st_size > 0  # masked in the command's view only


@pytest.mark.parametrize(
    "attempt",
    [
        "echo x > /dev/shm/stockade-{tag}",
        "echo 1 > /proc/sys/kernel/stockade-{tag}",
        "echo x > /var/tmp/stockade-{tag}",
        "mkfifo /tmp/stockade-{tag}",
    ],
)
async def test_shared_writable_places_are_closed(
    launcher: Launcher, ws: Path, attempt: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    outcome = await run(launcher, ws, attempt.format(tag=tag))
    assert outcome.exit_code != 0
    for place in ("/dev/shm", "/var/tmp", "/tmp"):
        assert not Path(place, f"stockade-{tag}").exists()


async def test_stockade_own_configuration_under_etc_reads_empty(
    launcher: Launcher, ws: Path
) -> None:
    """The mtls overlay mounts the executor's own TLS key at /etc/stockade/tls, which
    Landlock lets commands read (/etc is a system dir) and whose mode lets the executor's
    uid read: a command printed the key the executor proves its identity with."""
    etc = Path("/etc/stockade")
    installed = etc.exists()  # an installation's own files stay; ours go in a new subdir
    tls = etc / f"tls-test-{os.getpid()}" if installed else etc / "tls"
    key = tls / "tls.key"
    key.parent.mkdir(parents=True)
    try:
        key.write_text("-----BEGIN PRIVATE KEY-----\nexecutor-identity\n")
        # The pool was forked before the directory existed: run to get fresh workers.
        for _ in range(4):
            await run(launcher, ws, "true")
        outcome = await run(launcher, ws, f"cat {key}; ls {etc}; echo END")
        assert "executor-identity" not in outcome.stdout
        assert tls.name not in outcome.stdout.replace("END", "")
        assert "executor-identity" in key.read_text()  # hidden in the command's view only
    finally:
        shutil.rmtree(tls if installed else etc)
