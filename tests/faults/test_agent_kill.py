"""SIGKILL of the agent mid-run (issue #12 item 8): no audit event is lost for a call
whose result the caller received, because each event is written ahead to the agent's
spool before the result is released; the restarted agent replays the spool, and the
audit service stores each event once."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from stockade.client.agent import AgentClient
from stockade.client.base import aio_channel
from stockade.client.errors import ServiceError
from stockade.v1 import agent_service_pb2 as a_pb2
from tests.faults.conftest import FaultStack, StartStack, all_rows, verify_chain, wait_for

STEPS = 6
WIDTH = 3
CLIENTS = 8


def _script() -> str:
    lines = ["turns:"]
    for step in range(STEPS):
        lines.append(f'  - text: "step {step}"')
        lines.append("    tool_calls:")
        for k in range(WIDTH):
            n = step * WIDTH + k
            lines.append(
                f"      - {{id: c{n}, name: read_file, arguments: {{file_path: notes/f{n}.txt}}}}"
            )
    lines.append('  - text: "done"')
    return "\n".join(lines) + "\n"


async def _start(fault_stack: StartStack, tmp_path: Path, workspace: Path) -> FaultStack:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "many.yaml").write_text(_script())
    for n in range(STEPS * WIDTH):
        (workspace / "notes" / f"f{n}.txt").write_text(f"file {n}\n")
    return await fault_stack(
        env={
            "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(workspace)},
            "agent": {"STOCKADE_AGENT_SCRIPT_DIR": str(scripts)},
        }
    )


async def test_sigkilled_agent_loses_no_event_of_a_returned_result(
    fault_stack: StartStack, tmp_path: Path, workspace: Path
) -> None:
    stack = await _start(fault_stack, tmp_path, workspace)
    received: set[tuple[str, str]] = set()
    sessions = 0
    stop = asyncio.Event()

    async def client(k: int) -> None:
        nonlocal sessions
        round_ = 0
        while not stop.is_set():
            session = f"k{k}-r{round_}"
            round_ += 1
            sessions += 1
            try:
                async with aio_channel(stack.addresses["agent"]) as channel:
                    request = a_pb2.RunTurnRequest(session_id=session, message="go", script="many")
                    async for event in AgentClient(channel).run_turn(request):
                        if event.WhichOneof("event") == "tool_call_finished":
                            received.add((session, event.tool_call_finished.call_id))
            except ServiceError:
                await asyncio.sleep(0.05)  # the agent is down: try again shortly

    clients = [asyncio.create_task(client(k)) for k in range(CLIENTS)]
    try:
        for target in (60, 180):
            await wait_for(lambda t=target: len(received) >= t, timeout_s=120, what="results")
            await stack.kill("agent")
            killed_with = len(received)
            await stack.spawn("agent")
            await stack.wait_serving("agent", timeout_s=60)
            await wait_for(
                lambda k=killed_with: len(received) >= k + 30,
                timeout_s=120,
                what="results after the restart",
            )
    finally:
        stop.set()
        for task in clients:
            with contextlib.suppress(asyncio.CancelledError, ServiceError):
                await asyncio.wait_for(task, 60)
    assert await stack.stop("agent") == 0  # a clean stop flushes the spool

    rows = [r for r in await all_rows(stack.addresses["audit"]) if r.event.call_id]
    stored = [(r.event.session_id, r.event.call_id) for r in rows]
    assert len(stored) == len(set(stored)), "an event was stored twice"
    missing = received - set(stored)
    assert not missing, f"{len(missing)} of {len(received)} returned calls have no audit row"
    # Rows beyond the received results are calls whose result was in flight at the kill.
    assert len(stored) - len(received) <= 2 * CLIENTS * WIDTH
    verdict = await verify_chain(stack.addresses["audit"])
    assert verdict.ok and verdict.rows_checked == len(await all_rows(stack.addresses["audit"]))


async def test_sigkilled_audit_service_under_agent_load_stores_every_call_once(
    fault_stack: StartStack, tmp_path: Path, workspace: Path
) -> None:
    stack = await _start(fault_stack, tmp_path, workspace)
    received: set[tuple[str, str]] = set()
    stop = asyncio.Event()

    async def client(k: int) -> None:
        round_ = 0
        while not stop.is_set():
            session = f"a{k}-r{round_}"
            round_ += 1
            async with aio_channel(stack.addresses["agent"]) as channel:
                request = a_pb2.RunTurnRequest(session_id=session, message="go", script="many")
                async for event in AgentClient(channel).run_turn(request):
                    if event.WhichOneof("event") == "tool_call_finished":
                        received.add((session, event.tool_call_finished.call_id))

    clients = [asyncio.create_task(client(k)) for k in range(CLIENTS)]
    try:
        for target in (40, 120):
            await wait_for(lambda t=target: len(received) >= t, timeout_s=120, what="results")
            await stack.kill("audit")
            down_at = len(received)
            # Calls go on while the audit service is down: their events wait in the spool.
            await wait_for(lambda d=down_at: len(received) >= d + 20, timeout_s=120, what="calls")
            await stack.spawn("audit")
            await stack.wait_serving("audit", timeout_s=60)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 120)
    assert await stack.stop("agent") == 0  # flushes what is still spooled

    rows = await all_rows(stack.addresses["audit"])
    calls = [(r.event.session_id, r.event.call_id) for r in rows if r.event.call_id]
    assert len(calls) == len(received)  # rows = calls, none twice
    assert set(calls) == received
    sessions = {session for session, _ in received}
    stops = [r for r in rows if r.event.tool_name == "session"]
    assert len(stops) == len(sessions)
    verdict = await verify_chain(stack.addresses["audit"])
    assert verdict.ok and verdict.rows_checked == len(rows)
