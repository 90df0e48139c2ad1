"""Helpers shared by the benchmarks: percentiles, figures, and the echo-RPC baseline.

SPEC §9: every target is a ratio against a baseline measured side by side in the same
run, because this 2-core machine's absolute speed varies. The baseline for RPC figures
is an empty echo RPC (bytes in, same bytes out) on a ``grpc.aio`` server with the same
transport and the same interceptors as the real services.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc

from stockade.server.app import Registration, create_server, stop_server
from stockade.server.settings import ServerSettings

ECHO_METHOD = "/stockade.bench.Echo/Echo"


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0..100) of ``values``."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def figure(
    id: str,
    name: str,
    value: float,
    unit: str,
    *,
    baseline: float | None = None,
    ratio: float | None = None,
    target: str,
) -> dict[str, Any]:
    """One entry of bench-results.json."""
    return {
        "id": id,
        "name": name,
        "value": round(value, 3),
        "unit": unit,
        "baseline": None if baseline is None else round(baseline, 3),
        "ratio": None if ratio is None else round(ratio, 3),
        "target": target,
    }


async def _echo(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    return request


def _add_echo(servicer: object, server: grpc.aio.Server) -> None:
    handler = grpc.method_handlers_generic_handler(
        "stockade.bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(_echo)}
    )
    server.add_generic_rpc_handlers((handler,))


@asynccontextmanager
async def echo_server(listen: str = "127.0.0.1:0") -> AsyncIterator[str]:
    """An echo server built with the same plumbing as the services; yields its address."""
    srv = await create_server(
        "echo",
        ServerSettings(listen=listen, grace_seconds=0),
        [Registration(_add_echo, None, "stockade.bench.Echo")],
    )
    try:
        yield srv.address
    finally:
        await stop_server(srv)


@asynccontextmanager
async def echo_process(listen: str) -> AsyncIterator[str]:
    """The same echo server in a process of its own (``tests.bench.echo``); yields its
    address. The baseline for RPCs that go from one process to another."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bench.echo",
        listen,
        stdout=asyncio.subprocess.PIPE,
        env={"OTEL_SDK_DISABLED": "true", **os.environ},  # as LocalStack starts the services
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if not line:
            raise RuntimeError(f"the echo server exited with {await proc.wait()}")
        yield line.decode().strip()
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def latencies(
    call: Callable[[], Awaitable[object]], n: int, warmup: int = 200
) -> list[float]:
    """Wall time in seconds of ``n`` sequential calls (after ``warmup`` unmeasured ones)."""
    for _ in range(warmup):
        await call()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        out.append(time.perf_counter() - t0)
    return out


async def throughput(
    call: Callable[[], Awaitable[object]], *, in_flight: int, seconds: float
) -> float:
    """Calls per second with ``in_flight`` concurrent callers for ``seconds``."""
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await call()
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return done / (time.perf_counter() - t0)


def echo_caller(
    channel: grpc.aio.Channel, payload: bytes = b"x" * 64
) -> Callable[[], Awaitable[object]]:
    """A zero-argument coroutine factory calling Echo on ``channel``."""
    stub = channel.unary_unary(ECHO_METHOD, request_serializer=None, response_deserializer=None)

    def call() -> Awaitable[object]:
        return stub(payload)

    return call


def median(values: list[float]) -> float:
    """The median."""
    return statistics.median(values)
