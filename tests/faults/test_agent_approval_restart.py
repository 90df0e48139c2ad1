"""Approvals across a decision restart, end to end through the agent (#12 item 7): turns
waiting on an approval when the decision service is SIGKILLed (and, separately, stopped
with SIGTERM) re-attach once it is back; each answer then runs its call. Before, every
such call was denied at once while its approval stayed answerable."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from stockade.client.agent import AgentClient
from stockade.client.base import aio_channel
from stockade.client.decision import DecisionClient
from stockade.client.errors import ServiceError, UnavailableError
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.faults.conftest import StartStack, wait_for

SESSIONS = 4


def _script(k: int) -> str:
    return (
        "turns:\n"
        '  - text: "writing"\n'
        "    tool_calls:\n"
        f"      - {{id: w{k}, name: file_write, arguments: "
        f"{{file_path: notes/out-{k}.txt, content: 'written by {k}'}}}}\n"
        '  - text: "done"\n'
    )


async def _resolve(admin: DecisionClient, approval_id: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        try:
            await admin.resolve_approval(
                d_pb2.ResolveApprovalRequest(
                    approval_id=approval_id,
                    resolution=d_pb2.RESOLUTION_ALLOW_ONCE,
                    resolver="tester",
                )
            )
            return
        except ServiceError as err:
            if not isinstance(err, UnavailableError) or loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
async def test_turns_waiting_on_approvals_survive_a_decision_restart(
    fault_stack: StartStack, tmp_path: Path, workspace: Path, how: signal.Signals
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for k in range(SESSIONS):
        (scripts / f"write{k}.yaml").write_text(_script(k))
    stack = await fault_stack(
        env={
            "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(workspace)},
            "agent": {"STOCKADE_AGENT_SCRIPT_DIR": str(scripts)},
            # A long grace: a SIGTERM that held approval waits would hold it all.
            "decision": {"STOCKADE_DECISION_GRACE_SECONDS": "300"},
        }
    )
    requested: dict[int, str] = {}
    finished: dict[int, a_pb2.ToolCallFinished] = {}

    async def turn(k: int) -> None:
        async with aio_channel(stack.addresses["agent"]) as channel:
            request = a_pb2.RunTurnRequest(session_id=f"s{k}", message="go", script=f"write{k}")
            async for event in AgentClient(channel).run_turn(request):
                kind = event.WhichOneof("event")
                if kind == "permission_requested":
                    requested[k] = event.permission_requested.approval_id
                elif kind == "tool_call_finished":
                    finished[k] = event.tool_call_finished

    turns = [asyncio.create_task(turn(k)) for k in range(SESSIONS)]
    await wait_for(lambda: len(requested) == SESSIONS, what="every turn to ask")
    await asyncio.sleep(0.3)  # the agent's AwaitApproval calls reach the service
    await stack.stop("decision", sig=how, timeout_s=60)
    assert not finished, "a call ended while the decision service was down"
    await stack.spawn("decision")
    await stack.wait_serving("decision")
    async with aio_channel(stack.addresses["decision"]) as channel:
        admin = DecisionClient(channel, admin_token=stack.admin_token)
        for approval_id in requested.values():
            await _resolve(admin, approval_id)
    await asyncio.wait_for(asyncio.gather(*turns), 120)
    assert sorted(finished) == list(range(SESSIONS))
    assert [f.status for f in finished.values()] == [x_pb2.EXECUTION_STATUS_OK] * SESSIONS
    for k in range(SESSIONS):
        assert (workspace / "notes" / f"out-{k}.txt").read_text() == f"written by {k}"
