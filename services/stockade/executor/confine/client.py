"""The executor's side of the launcher: start it once, run confined commands through it.

The executor never forks: it creates two pipes per command, hands their write ends to
the launcher (SCM_RIGHTS over a SOCK_SEQPACKET socket), and reads the output straight
from the read ends with the event loop. Timeouts and cancellation send a kill; the
launcher kills the command's whole pid namespace, so the pipes reach EOF.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stockade.errors import StockadeError
from stockade.executor.confine.policy import NETNS, ConfinementPolicy, Layer, RunOutcome

MAX_MESSAGE = 1 << 20
# One request is one SOCK_SEQPACKET message, bounded by the socket buffer (~208 KiB by
# default, with the policy alongside); commands longer than this are refused up front.
MAX_COMMAND_BYTES = 128 * 1024
DEFAULT_CAPTURE_BYTES = 16 * 1024 * 1024
_START_TIMEOUT_S = 30.0
# After the command's exit, how long to wait for the pipes to drain (a pid namespace
# makes them close at once; this only bounds the no-namespace fallback).
_DRAIN_TIMEOUT_S = 5.0


class ConfinementFailed(StockadeError):
    """The command could not be confined as promised, so it did not run."""

    code = "INTERNAL"
    reason = "INTERNAL"


def _launcher_command() -> list[str]:
    return [sys.executable, "-m", "stockade.executor.confine.launcher"]


def _launcher_env() -> dict[str, str]:
    """The launcher's environment: what Python needs to start, nothing of the executor's
    (its workers' memory and environment must hold no secrets worth reading)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    # Keep the import path the executor itself was started with.
    for name in ("PYTHONPATH", "VIRTUAL_ENV"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def probe_layers() -> tuple[Layer, ...]:
    """The confinement layers this host allows, found by really trying them.

    Runs the launcher in probe mode (a separate process: the attempts change the
    process that makes them).
    """
    proc = subprocess.run(
        [*_launcher_command(), "--probe"],
        env=_launcher_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise ConfinementFailed(f"launcher probe failed: {proc.stderr.strip()[-500:]}")
    return tuple(Layer.from_dict(item) for item in json.loads(proc.stdout))


@dataclass
class _Worker:
    """A ready worker: its socket and a pidfd to see it end."""

    wid: int
    sock: socket.socket
    pidfd: int

    def close(self) -> None:
        self.sock.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


class Launcher:
    """One long-lived launcher process per executor."""

    def __init__(
        self,
        *,
        pool_size: int = 2,
        capture_bytes: int = DEFAULT_CAPTURE_BYTES,
        disable: tuple[str, ...] = (),
    ) -> None:
        """``pool_size`` workers are kept pre-forked; output past ``capture_bytes`` per
        stream is dropped (``RunOutcome.output_dropped``); ``disable`` names optional
        layers not to use (``pid_namespace``, ``pids_cgroup``, ``capabilities``,
        ``netns``, ``landlock``, ``mount_mask``), reported inactive."""
        self._pool_size = max(pool_size, 1)
        self._disable = disable
        self._capture_bytes = capture_bytes
        self._proc: asyncio.subprocess.Process | None = None
        self._sock: socket.socket | None = None
        self._idle: asyncio.Queue[_Worker | None] = asyncio.Queue()
        self._layers: tuple[Layer, ...] = ()
        self._hello: asyncio.Future[dict[str, Any]] | None = None
        self._start_lock = asyncio.Lock()
        self._failure = ""
        self.pid: int = 0
        """The launcher's pid (0 before start)."""

    # --- lifecycle ------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the launcher process is up."""
        return self._sock is not None and self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        """Start the launcher process and wait until it reports its layers."""
        async with self._start_lock:
            if self.running:
                return
            loop = asyncio.get_running_loop()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.setblocking(False)
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *_launcher_command(),
                    "--fd",
                    str(theirs.fileno()),
                    "--pool",
                    str(self._pool_size),
                    *(arg for layer in self._disable for arg in ("--disable", layer)),
                    pass_fds=(theirs.fileno(),),
                    env=_launcher_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            finally:
                theirs.close()
            self._sock = ours
            self._idle = asyncio.Queue()
            self._hello = loop.create_future()
            loop.add_reader(ours.fileno(), self._on_readable)
            try:
                hello = await asyncio.wait_for(asyncio.shield(self._hello), _START_TIMEOUT_S)
            except (TimeoutError, ConfinementFailed) as exc:
                await self._teardown()
                raise ConfinementFailed(f"the launcher did not start: {exc}") from exc
            self.pid = int(hello["pid"])
            self._layers = tuple(Layer.from_dict(x) for x in hello["layers"])

    async def close(self) -> None:
        """Stop the launcher; running commands are killed."""
        async with self._start_lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.send(json.dumps({"op": "shutdown"}).encode())
            await self._teardown()

    async def _teardown(self) -> None:
        proc = self._proc
        self._lost()
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()

    def layers(self) -> tuple[Layer, ...]:
        """The layers the running launcher found available on this host."""
        return self._layers

    def _layers_for(self, policy: ConfinementPolicy) -> tuple[Layer, ...]:
        if not policy.network_enabled:
            return self._layers
        return tuple(
            Layer(NETNS, False, "network enabled by policy") if x.name == NETNS else x
            for x in self._layers
        )

    # --- messages from the launcher -------------------------------------------------

    def _on_readable(self) -> None:
        assert self._sock is not None
        while self._sock is not None:
            try:
                data, fds, _, _ = socket.recv_fds(self._sock, MAX_MESSAGE, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                for fd in fds:
                    os.close(fd)
                self._lost()
                return
            message = json.loads(data)
            if message.get("ev") == "hello":
                if self._hello is not None and not self._hello.done():
                    self._hello.set_result(message)
            elif message.get("ev") == "failed":
                self._failure = str(message.get("message", "unknown failure"))
                self._idle.put_nowait(None)  # wakes a run() waiting for a worker
            elif message.get("ev") == "worker" and len(fds) == 1:
                sock = socket.socket(fileno=fds[0])
                try:
                    pidfd = os.pidfd_open(int(message["pid"]))
                except OSError:
                    sock.close()  # it died already; the launcher will fork another
                    continue
                self._idle.put_nowait(_Worker(int(message["wid"]), sock, pidfd))
            else:
                for fd in fds:
                    os.close(fd)

    def _lost(self) -> None:
        """The launcher is gone (or going): fail the waiters, drop idle workers."""
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self._hello is not None and not self._hello.done():
            self._hello.set_exception(ConfinementFailed("the launcher exited"))
        while not self._idle.empty():
            item = self._idle.get_nowait()
            if item is not None:
                item.close()
        self._idle.put_nowait(None)  # wakes a run() waiting for a worker

    def _tell(self, message: dict[str, Any]) -> None:
        """Send a small message to the launcher (best effort: if it is gone, the worker
        is gone too, killed by its parent-death signal)."""
        if self._sock is None:
            return
        self._sock.setblocking(True)
        try:
            self._sock.send(json.dumps(message).encode())
        except OSError:
            pass
        finally:
            if self._sock is not None:
                self._sock.setblocking(False)

    async def _take_worker(self) -> _Worker:
        for _ in range(10):
            if not self.running:
                await self.start()
            if self._idle.empty():
                self._tell({"op": "want"})
            item = await self._idle.get()
            if item is None:
                if self._failure:
                    failure, self._failure = self._failure, ""
                    raise ConfinementFailed(f"the launcher {failure}")
                continue  # the launcher exited: start it again
            if _has_exited(item.pidfd):
                # Died while idle (killed from outside?): replace it, take another.
                item.close()
                self._tell({"op": "took", "wid": item.wid})
                continue
            return item
        raise ConfinementFailed("no confined worker could be obtained")

    # --- running --------------------------------------------------------------------

    async def run(
        self,
        command: str,
        *,
        cwd: str,
        policy: ConfinementPolicy,
        timeout_s: float,
        cancel: asyncio.Event | None = None,
        on_output: Callable[[str, bool], None] | None = None,
    ) -> RunOutcome:
        """Run ``/bin/bash -c command`` confined by ``policy``, in ``cwd``.

        ``on_output(text, is_stderr)`` gets output as it arrives. The command is killed
        (with everything it started) when ``timeout_s`` passes or ``cancel`` is set.
        Raises :class:`ConfinementFailed` if the confinement could not be applied (then
        nothing ran).
        """
        if "\0" in command or len(command.encode()) > MAX_COMMAND_BYTES:
            raise ConfinementFailed("command contains NUL or is too long")
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        worker = await self._take_worker()
        wid = worker.wid
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
        try:
            request = {"command": command, "cwd": cwd, "policy": policy.to_dict()}
            worker.sock.setblocking(True)
            socket.send_fds(worker.sock, [json.dumps(request).encode()], [w for _, w in pipes])
        except OSError as exc:
            for r, _ in pipes:
                os.close(r)
            worker.close()
            self._tell({"op": "took", "wid": wid})
            raise ConfinementFailed(f"cannot reach the worker: {exc}") from exc
        finally:
            for _, w in pipes:
                os.close(w)
        # The replacement fork competes for CPU with the command: ask for it now only
        # if no worker is left, otherwise once this command is over.
        refill_now = self._idle.empty()
        if refill_now:
            self._tell({"op": "took", "wid": wid})
        worker.sock.close()
        streams = [
            _Stream(pipes[0][0], False, self._capture_bytes, on_output),
            _Stream(pipes[1][0], True, self._capture_bytes, on_output),
            _StatusStream(pipes[2][0]),
        ]
        for stream in streams:
            os.set_blocking(stream.fd, False)
            loop.add_reader(stream.fd, stream.on_readable)
        status = streams[2]
        assert isinstance(status, _StatusStream)
        timed_out = cancelled = False
        finished = False
        try:
            # The command's end is its reported exit code (the worker kills what it left
            # behind first), or the worker's death.
            timed_out, cancelled = await self._wait(status.ended, wid, timeout_s, cancel)
            await status.ended
            if timed_out or cancelled or "code" not in status.text():
                # Killed: return only once the worker, and with it the whole pid
                # namespace, is gone.
                await _exited(worker.pidfd)
            await _drain(streams[:2])
            finished = True
        finally:
            for stream in streams:
                stream.close(loop)
            if not finished:
                # We were cancelled ourselves: the command must not outlive the caller.
                self._tell({"op": "kill", "wid": wid})
            if not refill_now:
                self._tell({"op": "took", "wid": wid})
            worker.close()
        report: dict[str, Any] = {}
        for line in status.text().splitlines():
            with contextlib.suppress(ValueError):
                report.update(json.loads(line))
        if report.get("error"):
            raise ConfinementFailed(f"confinement failed, nothing ran: {report['error']}")
        if "layers" not in report and not (timed_out or cancelled):
            raise ConfinementFailed("the worker ended before confining the command")
        if "code" in report:
            code = int(report["code"])
        elif timed_out or cancelled:
            code = 128 + 9  # killed with its namespace, like SIGKILL
        else:
            raise ConfinementFailed("the worker ended without an exit status")
        return RunOutcome(
            exit_code=code,
            timed_out=timed_out,
            cancelled=cancelled,
            stdout=streams[0].text(),
            stderr=streams[1].text(),
            elapsed_s=time.monotonic() - started,
            # A killed worker reports nothing: then the host's layers, for this policy.
            layers=tuple(Layer(str(n), bool(a), str(d)) for n, a, d in report["layers"])
            if "layers" in report
            else self._layers_for(policy),
            output_dropped=streams[0].dropped or streams[1].dropped,
        )

    async def _wait(
        self,
        ended: asyncio.Future[None],
        wid: int,
        timeout_s: float,
        cancel: asyncio.Event | None,
    ) -> tuple[bool, bool]:
        """Wait for the end, a timeout or a cancel; returns (timed_out, cancelled)."""
        waiters: set[asyncio.Future[Any]] = {ended}
        cancel_task: asyncio.Task[bool] | None = None
        if cancel is not None:
            cancel_task = asyncio.ensure_future(cancel.wait())
            waiters.add(cancel_task)
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=max(timeout_s, 0.0), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if cancel_task is not None and not cancel_task.done():
                cancel_task.cancel()
        if ended in done:
            return False, False
        cancelled = cancel_task is not None and cancel_task in done
        self._tell({"op": "kill", "wid": wid})
        return not cancelled, cancelled


class _Stream:
    """One pipe: decode incrementally, keep up to a cap, forward chunks."""

    def __init__(
        self,
        fd: int,
        is_stderr: bool | None,
        cap: int,
        on_output: Callable[[str, bool], None] | None,
    ) -> None:
        self.fd = fd
        self.is_stderr = bool(is_stderr)
        self.cap = cap
        self.on_output = on_output
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = False
        self.eof: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False

    def on_readable(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        final = not data
        text = self.decoder.decode(data, final=final)
        if text:
            if self.kept < self.cap:
                keep = text[: self.cap - self.kept]
                self.parts.append(keep)
                self.kept += len(keep)
                self.dropped = self.dropped or len(keep) < len(text)
            else:
                self.dropped = True
            if self.on_output is not None:
                self.on_output(text, self.is_stderr)
        if final:
            asyncio.get_running_loop().remove_reader(self.fd)
            if not self.eof.done():
                self.eof.set_result(None)

    def text(self) -> str:
        return "".join(self.parts)

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.closed:
            self.closed = True
            loop.remove_reader(self.fd)
            os.close(self.fd)


class _StatusStream(_Stream):
    """The worker's status pipe: JSON lines (layers, then code or error)."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd, None, MAX_MESSAGE, None)
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_readable(self) -> None:
        super().on_readable()
        if self.ended.done():
            return
        text = self.text()
        # Each report is one small write (atomic on a pipe) ending in a newline.
        if self.eof.done() or ('"code"' in text or '"error"' in text) and text.endswith("\n"):
            self.ended.set_result(None)


def _has_exited(pidfd: int) -> bool:
    """Whether the process behind ``pidfd`` has exited (a pidfd polls readable then)."""
    ready, _, _ = select.select([pidfd], [], [], 0)
    return bool(ready)


async def _exited(pidfd: int) -> None:
    """Wait (bounded) until the process behind ``pidfd`` has exited."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(pidfd, ready)
    try:
        await asyncio.wait_for(gone, _DRAIN_TIMEOUT_S)
    except TimeoutError:
        pass
    finally:
        loop.remove_reader(pidfd)


async def _drain(streams: list[_Stream]) -> None:
    """Read the output pipes to EOF (bounded; see ``_DRAIN_TIMEOUT_S``)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(s.eof for s in streams)), _DRAIN_TIMEOUT_S)
