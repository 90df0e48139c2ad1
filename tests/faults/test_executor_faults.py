"""The executor with real decision and executor processes (#12 items 4 and 10):

- the same call id in concurrent sessions runs in each, with its own saved output;
- a CANCEL command whose caller gave up (its Execute deadline passed) is killed with its
  whole process group; a BLOCK command finishes and its result is still recorded.

Every call goes the real way: Inspect at the executor, Decide (a signed grant), Execute.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf import duration_pb2, struct_pb2

from stockade.client.base import aio_channel
from stockade.client.decision import DecisionClient
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc
from tests.faults.conftest import FaultStack, StartStack, wait_for
from tests.procs import pids_with, sleep_marker, until_gone


@dataclass
class Pair:
    stack: FaultStack
    decision: DecisionClient
    executor: x_grpc.ExecutorServiceStub
    workspace: Path

    async def request(
        self,
        session: str,
        call_id: str,
        command: str,
        interrupt: c_pb2.InterruptBehavior.ValueType = c_pb2.INTERRUPT_BEHAVIOR_CANCEL,
    ) -> x_pb2.ExecuteRequest:
        """An ExecuteRequest carrying a real grant for ``command``."""
        args = struct_pb2.Struct()
        args.update({"command": command})
        call = c_pb2.ToolCall(
            session_id=session, call_id=call_id, tool_name="run_bash", arguments=args
        )
        inspection = await self.executor.Inspect(x_pb2.InspectRequest(call=call), timeout=30)
        decision = await self.decision.decide(
            d_pb2.DecideRequest(call=call, inspection=inspection.inspection)
        )
        assert decision.verdict == c_pb2.VERDICT_ALLOW, decision.reason
        return x_pb2.ExecuteRequest(
            call=call,
            grant=decision.grant,
            interrupt_behavior=interrupt,
            timeout=duration_pb2.Duration(seconds=100),
        )


@asynccontextmanager
async def pair(fault_stack: StartStack, tmp_path: Path) -> AsyncIterator[Pair]:
    ws = tmp_path / "ws"
    (ws / "lib").mkdir(parents=True)
    stack = await fault_stack(
        ["decision", "executor"],
        env={
            "decision": {
                "STOCKADE_DECISION_ALLOW": "run_bash",
                "STOCKADE_DECISION_DEFAULT_MODE": "bypassPermissions",
                "STOCKADE_DECISION_GRANT_TTL_S": "120",
            },
            "executor": {
                "STOCKADE_EXECUTOR_WORKSPACE": str(ws),
                "STOCKADE_EXECUTOR_LIBRARY_DIR": str(ws / "lib"),
                "STOCKADE_EXECUTOR_MAX_OUTPUT_CHARS": "200",
            },
        },
    )
    async with (
        aio_channel(stack.addresses["decision"]) as dch,
        aio_channel(stack.addresses["executor"]) as xch,
    ):
        yield Pair(
            stack, DecisionClient(dch, decide_deadline_s=30), x_grpc.ExecutorServiceStub(xch), ws
        )


async def _result(stream: grpc.aio.UnaryStreamCall) -> x_pb2.ExecuteResult:  # type: ignore[type-arg]
    while (msg := await stream.read()) is not grpc.aio.EOF:
        if msg.HasField("result"):
            return msg.result  # type: ignore[no-any-return]
    raise AssertionError("no result")


async def test_same_call_id_in_concurrent_sessions(fault_stack: StartStack, tmp_path: Path) -> None:
    async with pair(fault_stack, tmp_path) as p:
        sessions = [f"session-{i}" for i in range(8)]
        requests = [
            await p.request(s, "call_1", f"for i in $(seq 300); do echo {s}; done; sleep 0.3")
            for s in sessions
        ]
        results = await asyncio.gather(
            *(_result(p.executor.Execute(r, timeout=60)) for r in requests)
        )
        assert [r.status for r in results] == [x_pb2.EXECUTION_STATUS_OK] * 8
        paths = [Path(r.persisted_path) for r in results]
        assert len(set(paths)) == 8
        for s, path in zip(sessions, paths, strict=True):
            assert path.read_text().splitlines() == [s] * 300
            assert path.parent.name == s and path.name == "call_1.txt"


async def test_a_cancel_command_whose_caller_gave_up_is_killed(
    fault_stack: StartStack, tmp_path: Path
) -> None:
    async with pair(fault_stack, tmp_path) as p:
        marker = sleep_marker()
        request = await p.request("s1", "c-timeout", f"sleep {marker} & sleep {marker}; echo no")
        # The deadline must outlast the sandbox's start-up and the check below on a busy
        # machine (3 s once left no time to see the command start).
        stream = p.executor.Execute(request, timeout=10)
        # The shell and its two sleeps (the shell's command line names the marker too).
        await wait_for(lambda: len(pids_with(marker)) >= 3, what="the command to start")
        try:
            await _result(stream)
            raise AssertionError("the Execute deadline did not pass")
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # The caller gave up: the executor kills the command and everything it started.
        assert await until_gone(marker, 60) == []


async def test_a_block_command_finishes_after_its_caller_left(
    fault_stack: StartStack, tmp_path: Path
) -> None:
    async with pair(fault_stack, tmp_path) as p:
        marker = sleep_marker()
        request = await p.request(
            "s1",
            "c-block",
            f"sleep {marker} & pid=$!; sleep 2; kill $pid; echo finished > done.txt",
            interrupt=c_pb2.INTERRUPT_BEHAVIOR_BLOCK,
        )
        stream = p.executor.Execute(request, timeout=0.5)
        try:
            await _result(stream)
            raise AssertionError("the Execute deadline did not pass")
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        await wait_for(lambda: (p.workspace / "done.txt").exists(), what="the BLOCK command")
        assert (p.workspace / "done.txt").read_text() == "finished\n"
        # `kill` returns before the signalled sleep has exited, so done.txt can appear
        # while it is still dying: wait for it to go rather than look once.
        assert await until_gone(marker, 30) == []
        log = p.stack.log_dir / "executor.log"
        await wait_for(
            lambda: "c-block" in log.read_text() and "after its caller left" in log.read_text(),
            what="the executor to record the BLOCK call's result",
        )
