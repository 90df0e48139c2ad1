"""Graceful shutdown: SIGTERM lets in-flight calls finish and health turns NOT_SERVING."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

HERE = Path(__file__).parent


async def _start(sock: Path, grace: float, started: Path) -> asyncio.subprocess.Process:
    env = dict(os.environ)
    env.update(
        STOCKADE_LISTEN=f"unix://{sock}",
        STOCKADE_GRACE_SECONDS=str(grace),
        SLOW_SERVER_STARTED=str(started),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "_slow_server.py"),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    for _ in range(1800):  # at least 90 s: a busy machine can be slow to start Python
        if sock.exists():
            return proc
        await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("server did not start")


async def _in_flight(started: Path) -> None:
    """Until the server has entered the slow call."""
    for _ in range(400):
        if started.exists():
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the call never reached the server")


async def test_sigterm_drains_in_flight_call_and_reports_not_serving(tmp_path: Path) -> None:
    sock = Path(f"/tmp/stk-life-{os.getpid()}.sock")
    started = tmp_path / "started"
    proc = await _start(sock, grace=10, started=started)
    try:
        async with grpc.aio.insecure_channel(f"unix://{sock}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            check = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert check.status == health_pb2.HealthCheckResponse.SERVING
            named = await health.Check(
                health_pb2.HealthCheckRequest(service="stockade.test.Slow"), timeout=5
            )
            assert named.status == health_pb2.HealthCheckResponse.SERVING
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
            first = await watch.read()
            assert first.status == health_pb2.HealthCheckResponse.SERVING

            slow = asyncio.ensure_future(
                ch.unary_unary("/stockade.test.Slow/Sleep")(b"1.5", timeout=20)
            )
            await _in_flight(started)
            proc.send_signal(signal.SIGTERM)
            update = await asyncio.wait_for(watch.read(), 10)
            assert update.status == health_pb2.HealthCheckResponse.NOT_SERVING
            assert await slow == b"finished"
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
        sock.unlink(missing_ok=True)


async def test_calls_after_the_grace_are_cancelled(tmp_path: Path) -> None:
    sock = Path(f"/tmp/stk-life2-{os.getpid()}.sock")
    started = tmp_path / "started"
    proc = await _start(sock, grace=0.3, started=started)
    try:
        async with grpc.aio.insecure_channel(f"unix://{sock}") as ch:
            slow = asyncio.ensure_future(
                ch.unary_unary("/stockade.test.Slow/Sleep")(b"30", timeout=60)
            )
            await _in_flight(started)
            proc.send_signal(signal.SIGTERM)
            try:
                await slow
                raise AssertionError("a call longer than the grace must not finish")
            except grpc.aio.AioRpcError as err:
                assert err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
        sock.unlink(missing_ok=True)
