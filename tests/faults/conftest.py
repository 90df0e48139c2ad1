"""The fault suite's shared helpers: real service processes, signals, small filesystems.

Every scenario in ``tests/faults`` runs the real services as subprocesses
(``stockade.stack.LocalStack``, unix sockets in temporary folders) and hurts them for
real: SIGKILL and restart, SIGSTOP/SIGCONT, SIGTERM drain, a tmpfs of a few hundred KB
that fills up. The helpers here are the one copy the scenarios share:

- ``fault_stack``: start a subset of the services (``await fault_stack(["audit"])``) and
  get a ``FaultStack`` with ``kill``/``restart``/``paused``/``rss_kb`` on top of
  ``LocalStack``; everything started is stopped after the test.
- ``small_fs``: mount a tmpfs of a given size (we run as root) that is unmounted after the
  test; ``fill`` takes its free space, ``FilledDisk.release`` gives it back.
- ``wait_for``: poll a condition with a generous deadline (never sleep-and-hope).
- ``all_rows`` / ``verify_chain``: read the audit log back through the real client.

Process helpers that look for a test's commands by marker live in ``tests/procs.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from stockade.client.audit import AuditClient
from stockade.stack import SERVICES, LocalStack
from stockade.v1 import audit_service_pb2 as a_pb2


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    timeout_s: float = 60.0,
    interval_s: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll ``condition`` (sync or async) until true; fail naming ``what`` after
    ``timeout_s`` (generous: the machine is shared, the deadline is only a backstop)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = condition()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


def rss_kb(pid: int) -> int:
    """Resident set size of a live process in KiB (from /proc)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise ProcessLookupError(pid)


class FaultStack(LocalStack):
    """``LocalStack`` plus the faults the scenarios inject."""

    def pid(self, name: str) -> int:
        """The pid of a running service."""
        proc = self.procs.get(name)
        if proc is None or proc.returncode is not None:
            raise AssertionError(f"{name} is not running")
        return proc.pid

    def rss_kb(self, name: str) -> int:
        """The service's resident memory in KiB."""
        return rss_kb(self.pid(name))

    async def kill(self, name: str) -> None:
        """SIGKILL the service and wait until it is gone."""
        await self.stop(name, sig=signal.SIGKILL)

    async def restart(
        self, name: str, *, sig: int = signal.SIGKILL, timeout_s: float = 60.0
    ) -> None:
        """Stop the service with ``sig`` (SIGKILL by default), start it again and wait
        until it is SERVING."""
        await self.stop(name, sig=sig, timeout_s=timeout_s)
        await self.spawn(name)
        await self.wait_serving(name, timeout_s=timeout_s)

    @contextlib.asynccontextmanager
    async def paused(self, name: str) -> AsyncIterator[None]:
        """SIGSTOP the service for the body of the ``async with``; SIGCONT after."""
        pid = self.pid(name)
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


StartStack = Callable[..., Awaitable[FaultStack]]


@pytest.fixture
async def fault_stack(tmp_path: Path) -> AsyncIterator[StartStack]:
    """``await fault_stack(names, env=..., common_env=..., base=...)``: a started
    ``FaultStack`` (services in ``names``, default all four); closed after the test."""
    made: list[FaultStack] = []

    async def start(
        names: Sequence[str] = SERVICES,
        *,
        env: Mapping[str, Mapping[str, str]] | None = None,
        common_env: Mapping[str, str] | None = None,
        base: Path | None = None,
    ) -> FaultStack:
        stack = FaultStack(base or tmp_path / f"stack{len(made)}", env=env, common_env=common_env)
        made.append(stack)
        await stack.start(list(names), timeout_s=60.0)
        return stack

    yield start
    for stack in made:
        # A paused process cannot drain: let it run before the SIGTERM.
        for proc in stack.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
        await stack.close()


class FilledDisk:
    """A filler file holding a filesystem's free space; ``release`` frees it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def release(self) -> None:
        """Delete the filler so writes succeed again."""
        self.path.unlink(missing_ok=True)


def fill(mount: Path, *, leave_bytes: int = 0) -> FilledDisk:
    """Fill the filesystem at ``mount`` up to ``leave_bytes`` of free space."""
    filler = mount / ".filler"
    stats = os.statvfs(mount)
    free = stats.f_bavail * stats.f_frsize - leave_bytes
    with open(filler, "ab") as fh:
        chunk = b"\0" * 65536
        while free > 0:
            try:
                fh.write(chunk[: min(len(chunk), free)])
                fh.flush()
            except OSError:
                break
            free -= len(chunk)
    return FilledDisk(filler)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``small_fs(size_kb)``: a freshly mounted tmpfs of that size (a real filesystem
    that really fills up: ENOSPC, SQLITE_FULL); unmounted after the test."""
    mounts: list[Path] = []

    def mount(size_kb: int) -> Path:
        where = tmp_path / f"fs{len(mounts)}"
        where.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0755", "tmpfs", str(where)],
            check=True,
            capture_output=True,
        )
        mounts.append(where)
        return where

    yield mount
    for where in reversed(mounts):
        # Lazy: a killed service may still hold a file open for a moment.
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


async def all_rows(address: str, **filters: Any) -> list[a_pb2.AuditRecord]:
    """Every stored audit row matching ``filters`` (QueryRequest fields), oldest first."""
    async with AuditClient(address, deadline_s=30.0) as client:
        request = a_pb2.QueryRequest(page_size=1000, **filters)
        rows = [r async for r in client.query_all(request)]
    return sorted(rows, key=lambda r: r.sequence)


async def verify_chain(address: str) -> a_pb2.VerifyLogResponse:
    """The audit service's VerifyLog answer."""
    async with AuditClient(address) as client:
        return await client.verify()
