"""Unix-socket servers check the peer's uid with SO_PEERCRED (EXE-9 rev 2).

A real gRPC server on a unix socket in a temp dir; a client in a child process that
drops to uid ``nobody`` (setuid after importing grpc as root) gets PERMISSION_DENIED with a
message naming the rule, while the server's own uid is served. File permissions are
opened wide on purpose, so the uid check is the only thing that stops nobody.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade.server.app import create_server, stop_server
from stockade.server.settings import ServerSettings

NOBODY = 65534

_CLIENT = """
import os, sys
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
uid = int(sys.argv[2])
if uid != os.geteuid():
    os.setgid(uid)
    os.setuid(uid)
with grpc.insecure_channel(sys.argv[1]) as channel:
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=30)
        print("STATUS", reply.status)
    except grpc.RpcError as exc:
        print("ERROR", exc.code().name, exc.details())
"""


@pytest.fixture
async def socket_dir() -> AsyncIterator[Path]:
    # Not pytest's tmp_path (0700 root): nobody must be able to reach the socket, so
    # that only the uid check can refuse it.
    directory = Path(tempfile.mkdtemp(prefix="stockade-peer-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        subprocess.run(["rm", "-rf", str(directory)], check=False)


async def _client(address: str, uid: int) -> str:
    """Run the client in a child process (the server's loop keeps serving meanwhile)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CLIENT,
        address,
        str(uid),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return out.decode()


async def _serve(socket_dir: Path, **settings: object) -> object:
    listen = f"unix://{socket_dir}/svc.sock"
    running = await create_server("peer-test", ServerSettings(listen=listen, **settings), [])
    os.chmod(socket_dir / "svc.sock", 0o777)
    return running


async def test_other_uid_is_refused_and_own_uid_served(socket_dir: Path) -> None:
    running = await _serve(socket_dir)
    try:
        address = f"unix://{socket_dir}/svc.sock"
        assert stat.S_ISSOCK(os.stat(socket_dir / "svc.sock").st_mode)
        own = await _client(address, os.geteuid())
        other = await _client(address, NOBODY)
        # The private sockets sit in a 0700 dir next to the public one.
        private = [p for p in socket_dir.iterdir() if p.name.startswith(".stockade-")]
        assert len(private) == 1 and stat.S_IMODE(private[0].stat().st_mode) == 0o700
    finally:
        await stop_server(running)  # type: ignore[arg-type]
    assert "STATUS 1" in own, own  # SERVING
    assert "ERROR PERMISSION_DENIED" in other, other
    assert "SO_PEERCRED" in other and "allowed_peer_uids" in other
    assert running.peer_listener is not None and running.peer_listener.refused >= 1  # type: ignore[attr-defined]
    assert not (socket_dir / "svc.sock").exists()


async def test_allowed_peer_uids_admits_another_uid(socket_dir: Path) -> None:
    running = await _serve(socket_dir, allowed_peer_uids=[NOBODY])
    try:
        other = await _client(f"unix://{socket_dir}/svc.sock", NOBODY)
    finally:
        await stop_server(running)  # type: ignore[arg-type]
    assert "STATUS 1" in other, other


async def test_in_process_client_still_works_over_the_check(socket_dir: Path) -> None:
    running = await _serve(socket_dir)
    try:
        async with grpc.aio.insecure_channel(f"unix://{socket_dir}/svc.sock") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for _ in range(20):
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=30)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await stop_server(running)  # type: ignore[arg-type]


def test_allowed_peer_uids_setting_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    from stockade.server.settings import SettingsError, load_settings

    monkeypatch.setenv("STOCKADE_ALLOWED_PEER_UIDS", "1000, 65534")
    assert load_settings(ServerSettings).allowed_peer_uids == [1000, 65534]
    monkeypatch.setenv("STOCKADE_ALLOWED_PEER_UIDS", "-3")
    with pytest.raises(SettingsError, match="ALLOWED_PEER_UIDS"):
        load_settings(ServerSettings)


async def test_a_regular_file_at_the_socket_path_is_not_deleted(socket_dir: Path) -> None:
    (socket_dir / "svc.sock").write_text("not a socket\n")
    with pytest.raises(OSError):
        await create_server("peer-test", ServerSettings(listen=f"unix://{socket_dir}/svc.sock"), [])
    assert (socket_dir / "svc.sock").read_text() == "not a socket\n"
    # Nothing is left behind: no private directory of the failed start.
    assert [p.name for p in socket_dir.iterdir()] == ["svc.sock"]


async def test_a_stale_socket_is_replaced(socket_dir: Path) -> None:
    import socket as socketmod

    stale = socketmod.socket(socketmod.AF_UNIX)
    stale.bind(str(socket_dir / "svc.sock"))
    stale.close()  # the path stays, nobody listens: what a crashed server leaves
    running = await _serve(socket_dir)
    try:
        assert "STATUS 1" in await _client(f"unix://{socket_dir}/svc.sock", os.geteuid())
    finally:
        await stop_server(running)  # type: ignore[arg-type]
