"""PERF-2 (one full tool call vs one echo RPC) and PERF-5 (idle service memory).

The four services run as separate processes on unix sockets (as in the demo and in
every deployment). The echo baseline is built the same way: a server in a process of
its own on a unix socket. And it is called the way the services are: one echo RPC after
each full tool call, so the echo server has been idle about as long as each service was
before its hop (waking a process that waits costs more than answering back-to-back, and
each of the tool call's three hops pays it). The figure's name also gives the ratio to
back-to-back echoes and to an echo server inside this process, for comparison.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2

from stockade.client.audit import AuditRecorder
from stockade.client.base import aio_channel
from stockade.client.decision import DecisionClient
from stockade.client.executor import ExecutorClient
from stockade.stack import SERVICES, LocalStack
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.bench.common import (
    echo_caller,
    echo_process,
    echo_server,
    figure,
    latencies,
    percentile,
)

N = 1500


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def _run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        ws = base / "ws"
        ws.mkdir()
        (ws / "file.txt").write_text("line\n" * 50)
        stack = LocalStack(
            base / "stack", env={"executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(ws)}}
        )
        try:
            await stack.start()
            await asyncio.sleep(1.0)  # let start-up allocations settle before measuring idle RSS
            rss = {name: _rss_mb(stack.procs[name].pid) for name in SERVICES}

            # The agent's own audit client: batched, never waited on.
            recorder = AuditRecorder(stack.addresses["audit"], base / "bench.spool")
            await recorder.start()
            async with (
                echo_process(f"unix://{stack.sock_dir}/echo.sock") as there,
                echo_server(f"unix://{stack.sock_dir}/echo-here.sock") as here,
                aio_channel(there) as ech,
                aio_channel(here) as hch,
                aio_channel(stack.addresses["executor"]) as xch,
                aio_channel(stack.addresses["decision"]) as dch,
            ):
                executor, decision = ExecutorClient(xch), DecisionClient(dch)
                args = struct_pb2.Struct()
                args.update({"file_path": "file.txt"})
                counter = 0

                async def tool_call() -> None:
                    nonlocal counter
                    counter += 1
                    call = c_pb2.ToolCall(
                        call_id=f"c{counter}",
                        tool_name="read_file",
                        arguments=args,
                        session_id="bench",
                    )
                    inspection = await executor.inspect(x_pb2.InspectRequest(call=call))
                    decided = await decision.decide(
                        d_pb2.DecideRequest(call=call, inspection=inspection)
                    )
                    async for _ in executor.execute(
                        x_pb2.ExecuteRequest(call=call, grant=decided.grant), timeout=10
                    ):
                        pass
                    # The agent never waits on audit: enqueue only (sent in batches).
                    recorder.enqueue(
                        au_pb2.AuditEvent(
                            event_id=f"e{counter}-{os.getpid()}",
                            session_id="bench",
                            tool_name="read_file",
                            status=au_pb2.AUDIT_STATUS_OK,
                        )
                    )

                # Each full call is followed by one echo call, so the echo server has been
                # idle as long as each service was before its hop (about a millisecond):
                # waking a process that waits costs more than answering back-to-back, and
                # the tool call's three hops each pay that. Interleaving also lets a burst
                # of load from elsewhere on this shared machine hit both sides alike.
                # Back-to-back echoes (to a server kept busy) are measured as well and
                # named in the figure.
                echo_call, here_call = echo_caller(ech), echo_caller(hch)
                lat: dict[str, list[float]] = {"echo": [], "full": [], "busy": [], "here": []}
                await latencies(tool_call, 20, warmup=0)
                await latencies(echo_call, 50, warmup=0)
                for _ in range(N // 3):
                    lat["full"] += await latencies(tool_call, 1, warmup=0)
                    lat["echo"] += await latencies(echo_call, 1, warmup=0)
                lat["busy"] = await latencies(echo_call, N, warmup=50)
                lat["here"] = await latencies(here_call, N, warmup=50)
                echo, full, busy, here = (
                    percentile(lat[k], 50) for k in ("echo", "full", "busy", "here")
                )
            await recorder.close()
        finally:
            await stack.close()
    return [
        figure(
            "PERF-2",
            "full tool call (Inspect+Decide+Execute read_file+audit enqueue) p50 vs echo RPC "
            "p50 (echo server in its own process, one echo after each full call; vs "
            f"back-to-back echoes: {full / busy:.2f}x, vs an echo server in this process: "
            f"{full / here:.2f}x)",
            full * 1e3,
            "ms",
            baseline=echo * 1e3,
            ratio=full / echo,
            target="ratio <= 5.0",
        ),
        figure(
            "PERF-5",
            "largest idle service RSS (" + ", ".join(f"{k} {v:.0f}" for k, v in rss.items()) + ")",
            max(rss.values()),
            "MB",
            target="<= 100 MB",
        ),
    ]


def run() -> list[dict[str, Any]]:
    """Benchmark entry point."""
    return asyncio.run(_run())
