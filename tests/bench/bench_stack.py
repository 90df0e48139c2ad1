"""PERF-2 (one full tool call vs one echo RPC) and PERF-5 (idle service memory).

The four services run as separate processes on unix sockets (as in the demo and in
every deployment). The echo baseline runs the same way: a server in a process of its
own on a unix socket, so both sides pay the same hop from one process to another. (An
echo server inside the benchmark's own process shares its event loop and skips that
hop; it is measured too, and the figure's name gives the ratio against it.)
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
ROUNDS = 5


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
                        x_pb2.ExecuteRequest(call=call, grant=decided.grant), timeout_s=10
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

                # Alternating rounds, pooled, so a burst of load from elsewhere on this
                # shared machine hits both sides instead of skewing one.
                lat: dict[str, list[float]] = {"echo": [], "here": [], "full": []}
                for _ in range(ROUNDS):
                    lat["echo"] += await latencies(echo_caller(ech), N // ROUNDS, warmup=50)
                    lat["full"] += await latencies(tool_call, N // 3 // ROUNDS, warmup=20)
                    lat["here"] += await latencies(echo_caller(hch), N // ROUNDS, warmup=50)
                echo, echo_here, full = (percentile(lat[k], 50) for k in ("echo", "here", "full"))
            await recorder.close()
        finally:
            await stack.close()
    return [
        figure(
            "PERF-2",
            "full tool call (Inspect+Decide+Execute read_file+audit enqueue) p50 vs echo RPC "
            f"p50 (echo server in its own process; vs one in this process: "
            f"{full / echo_here:.2f}x)",
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
