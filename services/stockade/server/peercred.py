"""The peer-uid check of unix-socket listeners (EXE-9 rev 2).

gRPC does not tell a servicer who is on the other end of a unix socket, so a server
that listens on ``unix://PATH`` really listens on a private socket, and this listener
owns PATH: it reads each connecting peer's uid with ``SO_PEERCRED`` (the kernel's word,
not the client's) and splices the connection to the real server when the uid is the
server's own or an allowed one. Any other peer is spliced to a refusal server that
answers every call with PERMISSION_DENIED and a message naming the rule, so the caller
sees a clear gRPC status instead of a reset connection.

The private sockets live in a 0700 directory next to PATH, so hiding PATH's directory
from commands (the executor's socket masks) hides them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
from collections.abc import Callable
from typing import Any

import grpc

log = logging.getLogger("stockade.server")

# Connections spliced at once; past it new ones are closed at once (bounded, EXE: every
# queue bounded). gRPC multiplexes calls over few connections, so this is generous.
MAX_CONNECTIONS = 1024
_CHUNK = 64 * 1024
_UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with the NUL


def peer_uid(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected unix socket."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def private_dir(public_path: str) -> str:
    """A new 0700 directory for the private sockets, next to ``public_path`` when the
    resulting socket paths fit in ``sun_path``, else in the temp directory."""
    parent = os.path.dirname(public_path) or "."
    if len(os.path.join(parent, ".stockade-xxxxxxxx", "r")) <= _UNIX_PATH_MAX:
        return tempfile.mkdtemp(prefix=".stockade-", dir=parent)
    return tempfile.mkdtemp(prefix="stockade-grpc-")


class _Refusal(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """Answers every method with PERMISSION_DENIED."""

    def __init__(self, message: str) -> None:
        self._message = message

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any]:
        message = self._message

        async def refuse(_requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, message)

        # stream-stream fits every call shape: the refusal reads nothing and only sends
        # the status, which looks the same to unary and streaming clients.
        return grpc.stream_stream_rpc_method_handler(refuse)


class PeerCheckedListener:
    """Owns a public unix socket path; splices allowed peers to ``inner`` and the others
    to a refusal server."""

    def __init__(self, public_path: str, directory: str, allowed: frozenset[int]) -> None:
        """``allowed`` holds the uids that may connect (the server's own included)."""
        self.public_path = public_path
        self.directory = directory
        self.inner_path = os.path.join(directory, "s")
        self.refusal_path = os.path.join(directory, "r")
        self.allowed = allowed
        self._server: asyncio.AbstractServer | None = None
        self._refusal: grpc.aio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.refused = 0
        """How many connections were refused (for tests and metrics)."""

    @property
    def inner_address(self) -> str:
        """Where the real gRPC server must listen."""
        return f"unix://{self.inner_path}"

    async def start(self) -> None:
        """Start the refusal server and the public listener (the real server first)."""
        uids = ", ".join(str(u) for u in sorted(self.allowed))
        self._refusal = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        self._refusal.add_generic_rpc_handlers(
            (
                _Refusal(
                    f"this unix socket only serves uid(s) {uids}: the caller's uid "
                    "(SO_PEERCRED) is not allowed (set allowed_peer_uids to add one)"
                ),
            )
        )
        self._refusal.add_insecure_port(f"unix://{self.refusal_path}")
        await self._refusal.start()
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.public_path).st_mode):
                os.unlink(self.public_path)  # a stale socket of an earlier run
            # Anything else there (a file, a directory) makes the bind fail, naming it.
        self._server = await asyncio.start_unix_server(self._accept, path=self.public_path)

    async def close(self) -> None:
        """Stop listening, end the spliced connections, remove the private directory."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        # Closing both ends of each spliced connection ends its pumps; a connection task
        # is never cancelled (asyncio's stream callback logs a cancelled one as an error).
        for writer in list(self._writers):
            writer.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._refusal is not None:
            await self._refusal.stop(0)
        if self._server is not None:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(self.public_path).st_mode):
                    os.unlink(self.public_path)
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._tasks) >= MAX_CONNECTIONS or task is None:
            writer.close()
            return
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            sock = writer.get_extra_info("socket")
            try:
                pid, uid = peer_uid(sock)
            except OSError:
                pid, uid = 0, -1
            target = self.inner_path
            if uid not in self.allowed:
                self.refused += 1
                log.warning(
                    "refused a unix-socket peer: uid %d (pid %d) is not allowed on %s",
                    uid,
                    pid,
                    self.public_path,
                )
                target = self.refusal_path
            try:
                up_reader, up_writer = await asyncio.open_unix_connection(target)
            except OSError:
                return
            self._writers.add(up_writer)
            try:
                await _splice(reader, writer, up_reader, up_writer)
            finally:
                self._writers.discard(up_writer)
        except asyncio.CancelledError:
            # The loop is being torn down (asyncio.run cancels what is left): end quietly.
            pass
        finally:
            writer.close()
            self._writers.discard(writer)
            self._tasks.discard(task)


async def _splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(_CHUNK):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                if dst.can_write_eof():
                    dst.write_eof()

    try:
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
    finally:
        up_writer.close()


def allowed_uids(
    extra: list[int] | tuple[int, ...], own: Callable[[], int] = os.geteuid
) -> frozenset[int]:
    """The server's own uid plus the configured ones."""
    return frozenset({own(), *extra})
