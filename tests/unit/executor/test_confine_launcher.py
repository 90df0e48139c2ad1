"""The launcher: layers, running, streaming, timeouts, cancellation, no orphans."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from stockade.executor.confine import (
    LAYER_NAMES,
    ConfinementFailed,
    ConfinementPolicy,
    Launcher,
    Rlimits,
    probe_layers,
)
from tests.procs import pids_with, sleep_marker, until_gone, until_pids_with


def policy_for(root: Path, **kwargs: object) -> ConfinementPolicy:
    return ConfinementPolicy(
        readable_roots=(str(root),),
        writable_roots=(str(root),),
        **kwargs,  # type: ignore[arg-type]
    )


def test_probe_reports_every_layer_active_here() -> None:
    layers = probe_layers()
    assert [layer.name for layer in layers] == list(LAYER_NAMES)
    inactive = [(layer.name, layer.detail) for layer in layers if not layer.active]
    assert inactive == []


async def test_launcher_layers_and_outcome_layers_all_active(
    launcher: Launcher, tmp_path: Path
) -> None:
    assert {layer.name for layer in launcher.layers() if layer.active} == set(LAYER_NAMES)
    outcome = await launcher.run(
        "true", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=30
    )
    assert outcome.exit_code == 0
    assert {layer.name: layer.active for layer in outcome.layers} == dict.fromkeys(
        LAYER_NAMES, True
    )


async def test_network_enabled_reports_netns_inactive(launcher: Launcher, tmp_path: Path) -> None:
    outcome = await launcher.run(
        "true",
        cwd=str(tmp_path),
        policy=policy_for(tmp_path, network_enabled=True),
        timeout_s=30,
    )
    netns = next(layer for layer in outcome.layers if layer.name == "netns")
    assert not netns.active
    assert "enabled by policy" in netns.detail


async def test_stdout_stderr_exit_code_and_cwd(launcher: Launcher, tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    outcome = await launcher.run(
        "pwd; echo oops >&2; exit 3", cwd=str(sub), policy=policy_for(tmp_path), timeout_s=30
    )
    assert outcome.stdout == f"{sub}\n"
    assert outcome.stderr == "oops\n"
    assert outcome.exit_code == 3
    assert not outcome.timed_out and not outcome.cancelled


async def test_output_streams_while_running(launcher: Launcher, tmp_path: Path) -> None:
    seen: list[tuple[str, bool]] = []
    first = asyncio.Event()

    def on_output(text: str, is_stderr: bool) -> None:
        seen.append((text, is_stderr))
        if is_stderr:  # written after "one": both have arrived
            first.set()

    run = asyncio.create_task(
        launcher.run(
            "echo one; echo two >&2; read -t 30 x < <(sleep 30); echo never",
            cwd=str(tmp_path),
            policy=policy_for(tmp_path),
            timeout_s=60,
            on_output=on_output,
            cancel=(cancel := asyncio.Event()),
        )
    )
    await asyncio.wait_for(first.wait(), 30)
    # Output arrived while the command is still running.
    assert not run.done()
    cancel.set()
    outcome = await run
    assert outcome.cancelled
    assert ("one\n", False) in seen
    assert "".join(t for t, err in seen if err) == "two\n"
    assert "never" not in outcome.stdout


async def test_environment_is_clean_and_git_neutralised(
    launcher: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STOCKADE_TEST_SECRET", "s3cret")
    outcome = await launcher.run(
        "env", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=30
    )
    env = dict(line.split("=", 1) for line in outcome.stdout.splitlines())
    assert "STOCKADE_TEST_SECRET" not in env
    assert "s3cret" not in outcome.stdout
    assert env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    keys = {
        env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
        for i in range(int(env["GIT_CONFIG_COUNT"]))
    }
    assert keys["core.fsmonitor"] == "false"
    assert keys["core.hooksPath"] == "/dev/null"
    assert keys["core.pager"] == "cat"
    assert keys["core.sshCommand"] == "false"
    assert "LD_PRELOAD" not in env and "BASH_ENV" not in env


async def test_private_tmp_is_writable_and_removed(launcher: Launcher, tmp_path: Path) -> None:
    outcome = await launcher.run(
        'echo hi > "$TMPDIR/x" && cat "$TMPDIR/x" && echo "$TMPDIR"',
        cwd=str(tmp_path),
        policy=policy_for(tmp_path),
        timeout_s=30,
    )
    assert outcome.exit_code == 0, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert lines[0] == "hi"
    tmp_dir = lines[1]
    for _ in range(100):
        if not os.path.exists(tmp_dir):
            break
        await asyncio.sleep(0.05)
    assert not os.path.exists(tmp_dir)


async def test_only_standard_descriptors_reach_the_command(
    launcher: Launcher, tmp_path: Path
) -> None:
    # The status pipe would let a command forge its own exit code or layers.
    outcome = await launcher.run(
        "ls /proc/self/fd", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=30
    )
    fds = sorted(int(x) for x in outcome.stdout.split())
    assert fds[:3] == [0, 1, 2]
    assert len(fds) == 4  # the last one is ls's own directory handle


@pytest.mark.parametrize(
    "background",
    [
        "sleep {t} &",
        "setsid sleep {t} &",
        "nohup sleep {t} >/dev/null 2>&1 &",
        "( ( sleep {t} & ) & )",
        "sleep {t} & disown",
        "setsid -f bash -c 'sleep {t}' >/dev/null 2>&1",
    ],
)
async def test_timeout_kills_everything_started(
    launcher: Launcher, tmp_path: Path, background: str
) -> None:
    marker = sleep_marker()
    command = background.format(t=marker) + f"\nsleep {marker}"
    outcome = await launcher.run(
        command, cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=1.0
    )
    assert outcome.timed_out
    assert not outcome.cancelled
    assert outcome.exit_code == 137
    assert pids_with(marker) == []


@pytest.mark.parametrize("background", ["sleep {t} &", "setsid sleep {t} &", "nohup sleep {t} &"])
async def test_background_children_do_not_outlive_a_finished_command(
    launcher: Launcher, tmp_path: Path, background: str
) -> None:
    marker = sleep_marker()
    outcome = await launcher.run(
        background.format(t=marker) + " echo started",
        cwd=str(tmp_path),
        policy=policy_for(tmp_path),
        timeout_s=60,
    )
    assert outcome.exit_code == 0
    assert not outcome.timed_out
    assert "started" in outcome.stdout
    assert pids_with(marker) == []


async def test_cancel_event_kills_the_group(launcher: Launcher, tmp_path: Path) -> None:
    marker = sleep_marker()
    cancel = asyncio.Event()
    started = asyncio.Event()
    run = asyncio.create_task(
        launcher.run(
            f"setsid sleep {marker} & echo go; sleep {marker}",
            cwd=str(tmp_path),
            policy=policy_for(tmp_path),
            timeout_s=60,
            cancel=cancel,
            on_output=lambda text, _err: started.set(),
        )
    )
    await asyncio.wait_for(started.wait(), 30)
    assert await until_pids_with(marker) != []  # the check below can see them
    cancel.set()
    outcome = await run
    assert outcome.cancelled and not outcome.timed_out
    assert pids_with(marker) == []


async def test_cancelling_the_caller_kills_the_command(launcher: Launcher, tmp_path: Path) -> None:
    marker = sleep_marker()
    started = asyncio.Event()
    run = asyncio.create_task(
        launcher.run(
            f"echo go; sleep {marker}",
            cwd=str(tmp_path),
            policy=policy_for(tmp_path),
            timeout_s=60,
            on_output=lambda text, _err: started.set(),
        )
    )
    await asyncio.wait_for(started.wait(), 30)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert await until_gone(marker) == []


async def test_concurrent_commands(launcher: Launcher, tmp_path: Path) -> None:
    outcomes = await asyncio.gather(
        *(
            launcher.run(
                f"sleep 0.2; echo {i}", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=60
            )
            for i in range(6)
        )
    )
    assert [o.stdout for o in outcomes] == [f"{i}\n" for i in range(6)]


async def test_capture_cap_drops_and_says_so(tmp_path: Path) -> None:
    launcher = Launcher(capture_bytes=1000)
    await launcher.start()
    try:
        outcome = await launcher.run(
            "head -c 100000 /dev/zero | tr '\\0' a",
            cwd=str(tmp_path),
            policy=policy_for(tmp_path),
            timeout_s=30,
        )
    finally:
        await launcher.close()
    assert outcome.exit_code == 0
    assert outcome.stdout == "a" * 1000
    assert outcome.output_dropped


async def test_missing_cwd_fails_closed(launcher: Launcher, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(ConfinementFailed, match="nothing ran"):
        await launcher.run(
            f"touch {marker}",
            cwd=str(tmp_path / "missing"),
            policy=policy_for(tmp_path),
            timeout_s=30,
        )
    assert not marker.exists()


async def test_nul_in_command_is_refused(launcher: Launcher, tmp_path: Path) -> None:
    with pytest.raises(ConfinementFailed):
        await launcher.run("echo a\0b", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=5)


async def test_launcher_restarts_after_dying(launcher: Launcher, tmp_path: Path) -> None:
    old = launcher.pid
    os.kill(old, 9)
    for _ in range(200):
        if not launcher.running:
            break
        await asyncio.sleep(0.02)
    outcome = await launcher.run(
        "echo back", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=30
    )
    assert outcome.stdout == "back\n"
    assert launcher.pid != old


async def test_close_kills_running_commands(tmp_path: Path) -> None:
    marker = sleep_marker()
    launcher = Launcher()
    await launcher.start()
    started = asyncio.Event()
    run = asyncio.create_task(
        launcher.run(
            f"echo go; sleep {marker}",
            cwd=str(tmp_path),
            policy=policy_for(tmp_path),
            timeout_s=60,
            on_output=lambda text, _err: started.set(),
        )
    )
    await asyncio.wait_for(started.wait(), 30)
    await launcher.close()
    with pytest.raises(ConfinementFailed):
        await run
    assert pids_with(marker) == []


@pytest.mark.parametrize(
    "disabled", ["pid_namespace", "netns", "landlock", "mount_mask", "capabilities", "pids_cgroup"]
)
async def test_disabled_layer_is_reported_inactive(tmp_path: Path, disabled: str) -> None:
    launcher = Launcher(disable=(disabled,))
    await launcher.start()
    try:
        host = {layer.name: layer for layer in launcher.layers()}
        outcome = await launcher.run(
            "echo ok", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=30
        )
    finally:
        await launcher.close()
    assert not host[disabled].active
    assert "disabled" in host[disabled].detail
    ran = {layer.name: layer.active for layer in outcome.layers}
    assert ran[disabled] is False
    assert outcome.stdout == "ok\n"


@pytest.mark.parametrize(
    "disable", [("pid_namespace",), ("pid_namespace", "pids_cgroup", "mount_mask")]
)
async def test_without_pid_namespace_setsid_children_still_die(
    tmp_path: Path, disable: tuple[str, ...]
) -> None:
    marker = sleep_marker()
    launcher = Launcher(disable=disable)
    await launcher.start()
    try:
        outcome = await launcher.run(
            f"setsid sleep {marker} & sleep {marker}",
            cwd=str(tmp_path),
            policy=policy_for(tmp_path),
            timeout_s=1.0,
        )
        assert outcome.timed_out
        assert await until_gone(marker) == []
    finally:
        await launcher.close()


def test_rlimits_validate() -> None:
    with pytest.raises(ValueError):
        Rlimits(nproc=0)
    assert ConfinementPolicy.from_dict(policy_for(Path("/x")).to_dict()) == policy_for(Path("/x"))


async def test_a_worker_killed_while_idle_is_replaced(launcher: Launcher, tmp_path: Path) -> None:
    # Kill every idle worker behind the launcher's back (as an OOM killer might).
    for item in list(launcher._idle._queue):  # type: ignore[attr-defined]
        if item is not None:
            signal.pidfd_send_signal(item.pidfd, signal.SIGKILL)
    outcome = await launcher.run(
        "echo fine", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=30
    )
    assert outcome.stdout == "fine\n"


async def test_many_more_concurrent_commands_than_pooled_workers(tmp_path: Path) -> None:
    launcher = Launcher(pool_size=1)
    await launcher.start()
    try:
        outcomes = await asyncio.gather(
            *(
                launcher.run(
                    f"echo {i}", cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=60
                )
                for i in range(12)
            )
        )
    finally:
        await launcher.close()
    assert [o.stdout for o in outcomes] == [f"{i}\n" for i in range(12)]


@pytest.mark.parametrize(
    "disable", [("pid_namespace",), ("pid_namespace", "pids_cgroup", "mount_mask")]
)
async def test_without_pid_namespace_finished_commands_leave_nothing(
    tmp_path: Path, disable: tuple[str, ...]
) -> None:
    marker = sleep_marker()
    launcher = Launcher(disable=disable)
    await launcher.start()
    try:
        outcome = await launcher.run(
            f"setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & echo ok",
            cwd=str(tmp_path),
            policy=policy_for(tmp_path),
            timeout_s=30,
        )
    finally:
        await launcher.close()
    assert outcome.stdout == "ok\n"
    assert pids_with(marker) == []


async def test_long_commands_run_and_too_long_ones_are_refused(
    launcher: Launcher, tmp_path: Path
) -> None:
    long = "true; " * 20000 + "echo end"  # about 120 KB
    outcome = await launcher.run(long, cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=60)
    assert outcome.stdout == "end\n"
    with pytest.raises(ConfinementFailed, match="too long"):
        await launcher.run(
            "true; " * 30000, cwd=str(tmp_path), policy=policy_for(tmp_path), timeout_s=60
        )
