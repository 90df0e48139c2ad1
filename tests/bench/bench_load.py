"""Load (issue #12): 100 concurrent sessions through the agent, against 100 concurrent
echo calls, and each service's memory before and after 10,000 tool calls.

The four services run as processes of their own on unix sockets (as in every
deployment); sessions use the scripted provider, so the model costs nothing and the
figure is Stockade's own: each tool call crosses agent → executor (Inspect) → decision
(Decide) → executor (Execute) → audit (written ahead to the agent's spool, sent in
batches). Throughput is tool calls finished per second with ``SESSIONS`` sessions in
flight; latency is, per call, the time from its ``tool_call_started`` event to its
``tool_call_finished`` event as the client sees them. The baseline is the same number of
concurrent callers of an empty echo RPC to a server in a process of its own, measured
in the same run; ratios are reported (no target in SPEC §9 yet).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from stockade.client.agent import AgentClient
from stockade.client.audit import AuditRecorder
from stockade.client.base import aio_channel
from stockade.stack import SERVICES, LocalStack
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2 as au_pb2
from tests.bench.common import echo_caller, echo_process, figure, percentile

SESSIONS = 100
STEPS = 5
WIDTH = 2
CALLS = 10_000
CALLS_PER_SESSION = STEPS * WIDTH


def _script() -> str:
    lines = ["turns:"]
    for step in range(STEPS):
        lines += [f'  - text: "step {step}"', "    tool_calls:"]
        for k in range(WIDTH):
            n = step * WIDTH + k
            lines.append(
                f"      - {{id: c{n}, name: read_file, arguments: {{file_path: f{n}.txt}}}}"
            )
    lines.append('  - text: "done"')
    return "\n".join(lines) + "\n"


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def _sessions(address: str, total_calls: int, tag: str) -> tuple[int, float, list[float]]:
    """Run sessions, SESSIONS at a time, until ``total_calls`` calls finished: (calls,
    seconds, per-call latencies)."""
    finished = 0
    latencies: list[float] = []
    counter = 0

    async def worker(channel: Any) -> None:
        nonlocal finished, counter
        client = AgentClient(channel)
        while finished < total_calls:
            counter += 1
            request = a_pb2.RunTurnRequest(
                session_id=f"{tag}-{counter}", message="go", script="load"
            )
            started: dict[str, float] = {}
            async for event in client.run_turn(request):
                kind = event.WhichOneof("event")
                if kind == "tool_call_started":
                    started[event.tool_call_started.call.call_id] = time.perf_counter()
                elif kind == "tool_call_finished":
                    done = event.tool_call_finished
                    latencies.append(time.perf_counter() - started[done.call_id])
                    finished += 1

    async with aio_channel(address) as channel:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(channel) for _ in range(SESSIONS)))
        elapsed = time.perf_counter() - t0
    return finished, elapsed, latencies


async def _echo(address: str, calls: int) -> tuple[float, list[float]]:
    """``calls`` echo RPCs with SESSIONS in flight: (calls/s, latencies)."""
    async with aio_channel(address) as channel:
        call = echo_caller(channel)
        left = calls
        latencies: list[float] = []

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                t0 = time.perf_counter()
                await call()
                latencies.append(time.perf_counter() - t0)

        for _ in range(200):
            await call()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(SESSIONS)))
        return calls / (time.perf_counter() - t0), latencies


def _audit_event(n: int) -> au_pb2.AuditEvent:
    return au_pb2.AuditEvent(
        event_id=f"w-{n}",
        session_id="bench",
        step=n,
        tool_name="read_file",
        status=au_pb2.AUDIT_STATUS_OK,
        output_preview="line\n" * 40,
        arguments_json='{"file_path":"notes/hello.txt"}',
        agent_name="lead",
    )


async def _write_ahead_cost(base: Path) -> list[dict[str, Any]]:
    """What making each audit event durable costs the agent (issue #12 item 8): the
    write-ahead enqueue against building the event's bytes alone (what an in-memory
    queue paid), and with group fsync, SESSIONS concurrent calls each waiting for it."""
    events = [_audit_event(n) for n in range(20_000)]
    t0 = time.perf_counter()
    for event in events:
        event.SerializeToString()
    serialize = (time.perf_counter() - t0) / len(events)
    # Nothing listens at this address: the events stay in the spool, as written.
    recorder = AuditRecorder(f"unix://{base}/nobody.sock", base / "wa.spool")
    t0 = time.perf_counter()
    for event in events:
        recorder.enqueue(event)
    enqueue = (time.perf_counter() - t0) / len(events)
    await recorder.close(timeout=0)
    synced = AuditRecorder(f"unix://{base}/nobody.sock", base / "fs.spool", fsync=True)
    rounds = 50

    async def call(n: int) -> None:
        synced.enqueue(events[n])
        await synced.wait_durable()

    t0 = time.perf_counter()
    for r in range(rounds):
        await asyncio.gather(*(call(r * SESSIONS + k) for k in range(SESSIONS)))
    durable = (time.perf_counter() - t0) / (rounds * SESSIONS)
    syncs = synced.syncs
    await synced.close(timeout=0)
    return [
        figure(
            "LOAD-4a",
            "audit event written ahead to the agent's spool before the result is released "
            "(enqueue) vs serializing it alone (an in-memory queue's cost)",
            enqueue * 1e6,
            "us",
            baseline=serialize * 1e6,
            ratio=enqueue / serialize,
            target="reported",
        ),
        figure(
            "LOAD-4b",
            f"audit event made durable with group fsync ({SESSIONS} concurrent calls, "
            f"{syncs} fsyncs for {rounds * SESSIONS} events) vs write-ahead alone",
            durable * 1e6,
            "us",
            baseline=enqueue * 1e6,
            ratio=durable / enqueue,
            target="reported",
        ),
    ]


async def _run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        ws, scripts = base / "ws", base / "scripts"
        ws.mkdir()
        scripts.mkdir()
        for n in range(CALLS_PER_SESSION):
            (ws / f"f{n}.txt").write_text(f"file {n}\n" * 5)
        (scripts / "load.yaml").write_text(_script())
        stack = LocalStack(
            base / "stack",
            env={
                "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(ws)},
                "agent": {"STOCKADE_AGENT_SCRIPT_DIR": str(scripts)},
            },
        )
        try:
            await stack.start()
            agent = stack.addresses["agent"]
            await _sessions(agent, SESSIONS * CALLS_PER_SESSION, "warm")  # one round
            before = {name: _rss_mb(stack.procs[name].pid) for name in SERVICES}
            calls, seconds, agent_lat = await _sessions(agent, CALLS, "load")
            after = {name: _rss_mb(stack.procs[name].pid) for name in SERVICES}
            async with echo_process(f"unix://{stack.sock_dir}/echo-load.sock") as echo:
                echo_rate, echo_lat = await _echo(echo, CALLS)
        finally:
            await stack.close()
        durability = await _write_ahead_cost(base)
    rate = calls / seconds
    p99, echo_p99 = percentile(agent_lat, 99), percentile(echo_lat, 99)
    figures = [
        figure(
            "LOAD-1",
            f"tool calls/s through the agent with {SESSIONS} concurrent sessions (scripted "
            f"provider, read_file, four service processes) vs {SESSIONS} concurrent echo "
            f"RPCs/s",
            rate,
            "calls/s",
            baseline=echo_rate,
            ratio=rate / echo_rate,
            target="reported",
        ),
        figure(
            "LOAD-2",
            f"tool call p99 (started to finished, as the client sees it) with {SESSIONS} "
            f"concurrent sessions vs echo RPC p99 with {SESSIONS} in flight",
            p99 * 1e3,
            "ms",
            baseline=echo_p99 * 1e3,
            ratio=p99 / echo_p99,
            target="reported",
        ),
    ]
    for name in SERVICES:
        figures.append(
            figure(
                f"LOAD-3-{name}",
                f"{name} RSS after {calls} tool calls ({SESSIONS} concurrent sessions); "
                f"baseline: RSS before them (after one warm-up round); growth "
                f"{after[name] - before[name]:+.1f} MB",
                after[name],
                "MB",
                baseline=before[name],
                ratio=after[name] / before[name],
                target="reported (growth bounded)",
            )
        )
    return figures + durability


def run() -> list[dict[str, Any]]:
    """The load figures."""
    return asyncio.run(_run())
