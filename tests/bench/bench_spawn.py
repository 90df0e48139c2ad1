"""PERF-4b/4c: confined spawn vs a bare ``subprocess`` spawn of the same command.

Both sides run ``/bin/bash -c true`` from this (asyncio) process and collect stdout and
stderr through pipes: the bare side with ``asyncio.create_subprocess_exec`` (vfork/exec,
no confinement), the confined side through ``Launcher.run`` (pre-forked worker in its own
pid/mount namespaces, empty network namespace, pids cgroup, rlimits, no_new_privs,
Landlock, capabilities dropped). Pairs are interleaved so load from other processes hits
both sides alike, and calls are spaced a few milliseconds apart, as tool calls are: the
figure is the latency of one call, with the launcher's pool refilled in between.

PERF-4c repeats the measurement with this process holding 300 MB of touched memory:
the executor never forks, so the confined cost must not grow (SPEC PERF-4, PERF-5).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from typing import Any

from stockade.executor.confine import ConfinementPolicy, Launcher
from tests.bench.common import figure, percentile

COMMAND = "true"
PAIRS = 150
GAP_S = 0.01
BALLAST_MB = 300


async def _bare(cwd: str) -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "/bin/bash",
        "-c",
        COMMAND,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    await proc.communicate()
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError("bare spawn failed")
    return elapsed


async def _confined(launcher: Launcher, cwd: str, policy: ConfinementPolicy) -> float:
    start = time.perf_counter()
    outcome = await launcher.run(COMMAND, cwd=cwd, policy=policy, timeout_s=30)
    elapsed = time.perf_counter() - start
    if outcome.exit_code != 0:
        raise RuntimeError(f"confined spawn failed: {outcome.stderr}")
    return elapsed


async def _pairs(
    launcher: Launcher, cwd: str, policy: ConfinementPolicy, n: int, gap_s: float
) -> tuple[float, float]:
    bare: list[float] = []
    confined: list[float] = []
    for i in range(n):
        # Alternate which side goes first, so neither always follows the other's noise.
        if i % 2:
            confined.append(await _confined(launcher, cwd, policy))
            await asyncio.sleep(gap_s)
            bare.append(await _bare(cwd))
        else:
            bare.append(await _bare(cwd))
            await asyncio.sleep(gap_s)
            confined.append(await _confined(launcher, cwd, policy))
        await asyncio.sleep(gap_s)
    return percentile(confined, 50) * 1e3, percentile(bare, 50) * 1e3


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def _main() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="stockade-bench-spawn-") as ws:
        policy = ConfinementPolicy(readable_roots=(ws,), writable_roots=(ws,))
        launcher = Launcher()
        await launcher.start()
        try:
            inactive = [layer.name for layer in launcher.layers() if not layer.active]
            await _pairs(launcher, ws, policy, 10, GAP_S)  # warm up both paths
            small_c, small_b = await _pairs(launcher, ws, policy, PAIRS, GAP_S)
            rss_before = _rss_mb()
            ballast = bytearray(BALLAST_MB * 1024 * 1024)
            for offset in range(0, len(ballast), 4096):  # touch every page: real RSS
                ballast[offset] = 1
            rss_after = _rss_mb()
            big_c, big_b = await _pairs(launcher, ws, policy, PAIRS, GAP_S)
            back_c, back_b = await _pairs(launcher, ws, policy, 40, 0.0)
            del ballast
        finally:
            await launcher.close()
    note = f" (inactive layers: {', '.join(inactive)})" if inactive else ""
    print(
        f"  spawn p50: {small_c:.2f} ms confined vs {small_b:.2f} ms bare at {rss_before:.0f} MB"
        f" RSS; {big_c:.2f} vs {big_b:.2f} ms at {rss_after:.0f} MB; back-to-back without"
        f" gaps at {rss_after:.0f} MB: {back_c:.2f} vs {back_b:.2f} ms{note}"
    )
    return [
        figure(
            "PERF-4b",
            "confined spawn p50 vs bare subprocess spawn (bash -c true)" + note,
            small_c,
            "ms",
            baseline=small_b,
            ratio=small_c / small_b,
            target="<= 1.5x",
        ),
        figure(
            "PERF-4c",
            f"same with the executor holding {BALLAST_MB} MB" + note,
            big_c,
            "ms",
            baseline=big_b,
            ratio=big_c / big_b,
            target=f"<= 1.5x, flat vs PERF-4b ({small_c / small_b:.2f}) within noise",
        ),
    ]


def run() -> list[dict[str, Any]]:
    """The PERF-4b and PERF-4c figures."""
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    return asyncio.run(_main())
