"""Finding a test's commands among the machine's processes by a marker in their command
line (a sleep duration nobody else would pick)."""

from __future__ import annotations

import asyncio
import os
import uuid


def sleep_marker() -> str:
    """A sleep duration no other process picks (``sleep <marker>`` runs ~5-20 minutes):
    the command line that identifies a test's processes."""
    return f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"


def pids_with(marker: str) -> list[int]:
    """Live (not zombie) processes, in our pid namespace, whose command line holds
    ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


async def until_pids_with(marker: str, timeout_s: float = 60.0) -> list[int]:
    """The processes once they show. A single look can miss one: ``bash -c`` execs its
    last command, and while execve swaps the memory map /proc/<pid>/cmdline reads empty.
    The deadline is generous (a busy machine can take seconds to start a sandbox); a
    test that finds them returns at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (pids := pids_with(marker)) and loop.time() < deadline:
        await asyncio.sleep(0.01)
    return pids


async def until_gone(marker: str, timeout_s: float = 60.0) -> list[int]:
    """The processes still alive after waiting up to ``timeout_s`` for them to end
    (generous: a busy machine can be slow to reap a tree; gone processes return at once)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (pids := pids_with(marker)) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return pids
