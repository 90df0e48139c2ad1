"""One tool call through four separate service processes (the foundation slice)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade.client.agent import AgentClient
from stockade.client.base import aio_channel
from stockade.client.errors import InvalidArgumentError
from stockade.stack import SERVICES, LocalStack
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

SCRIPT = """
turns:
  - text: "reading"
    tool_calls:
      - {id: c1, name: read_file, arguments: {file_path: notes/hello.txt}}
      - {id: c2, name: read_file, arguments: {file_path: .env}}
  - text: "done"
"""

FULL_NAMES = {
    "decision": "stockade.v1.DecisionService",
    "executor": "stockade.v1.ExecutorService",
    "audit": "stockade.v1.AuditService",
    "agent": "stockade.v1.AgentService",
}


async def _start(stack_factory: type[LocalStack], tmp_path: Path, workspace: Path) -> LocalStack:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "slice.yaml").write_text(SCRIPT)
    stack = stack_factory(
        tmp_path / "stack",
        env={
            "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(workspace)},
            "decision": {"AGENT_PERMISSIONS_DENY": "read_file(*.env)"},
            "agent": {"STOCKADE_AGENT_SCRIPT_DIR": str(scripts)},
        },
    )
    await stack.start()
    return stack


async def test_run_turn_reads_a_file_through_four_processes(
    stack_factory: type[LocalStack], tmp_path: Path, workspace: Path
) -> None:
    stack = await _start(stack_factory, tmp_path, workspace)
    pids = {stack.procs[n].pid for n in SERVICES}
    assert len(pids) == 4, "each service runs in its own process"

    async with aio_channel(stack.addresses["agent"]) as ch:
        events = [
            e
            async for e in AgentClient(ch).run_turn(
                a_pb2.RunTurnRequest(session_id="s1", message="read", script="slice")
            )
        ]
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds == [
        "text",
        "tool_call_started",
        "tool_call_finished",
        "tool_call_started",
        "tool_call_finished",
        "step_complete",
        "text",
        "final_answer",
        "terminated",
    ]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    ok = events[2].tool_call_finished
    assert ok.call_id == "c1" and ok.status == x_pb2.EXECUTION_STATUS_OK
    assert ok.verdict == c_pb2.VERDICT_ALLOW
    assert "hello from the workspace" in ok.content
    denied = events[4].tool_call_finished
    assert denied.call_id == "c2" and denied.verdict == c_pb2.VERDICT_DENY
    assert denied.winning_rule.pattern == "read_file(*.env)"
    assert "do-not-read" not in denied.content
    assert events[-1].terminated.reason == a_pb2.TERMINATION_REASON_COMPLETED

    # Stopping the agent flushes its audit events; then read the audit service's SQLite.
    assert await stack.stop("agent") == 0
    assert await stack.stop("audit") == 0
    db = tmp_path / "stack" / "state" / "audit" / "audit.db"
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT tool_name, status, verdict, matched_rule, call_id, output_preview "
            "FROM agent_audit_log WHERE session_id='s1' ORDER BY sequence"
        ).fetchall()
    by_call = {r[4]: r for r in rows if r[0] == "read_file"}
    assert by_call["c1"][1:4] == ("OK", "ALLOW", "*")
    assert "hello from the workspace" in by_call["c1"][5]
    assert by_call["c2"][1:4] == ("DENIED", "DENY", "read_file(*.env)")
    assert rows[-1][0:2] == ("session", "SESSION_STOP")


async def test_every_service_reports_serving(
    stack_factory: type[LocalStack], tmp_path: Path, workspace: Path
) -> None:
    stack = await _start(stack_factory, tmp_path, workspace)
    for name in SERVICES:
        async with grpc.aio.insecure_channel(stack.addresses[name]) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            for service in ("", FULL_NAMES[name]):
                resp = await health.Check(health_pb2.HealthCheckRequest(service=service))
                assert resp.status == health_pb2.HealthCheckResponse.SERVING, (name, service)


async def test_sigterm_stops_each_service_cleanly(
    stack_factory: type[LocalStack], tmp_path: Path, workspace: Path
) -> None:
    stack = await _start(stack_factory, tmp_path, workspace)
    for name in reversed(SERVICES):
        assert await stack.stop(name, timeout_s=15) == 0, stack.log_tail(name)


async def test_bad_run_turn_input_is_invalid_argument(
    stack_factory: type[LocalStack], tmp_path: Path, workspace: Path
) -> None:
    stack = await _start(stack_factory, tmp_path, workspace)
    async with aio_channel(stack.addresses["agent"]) as ch:
        client = AgentClient(ch)
        for request, fragment in [
            (a_pb2.RunTurnRequest(session_id="bad id!", message="x"), "session_id"),
            (a_pb2.RunTurnRequest(session_id="ok", message="   "), "message"),
            (a_pb2.RunTurnRequest(session_id="ok", message="x", script="../etc/passwd"), "script"),
        ]:
            try:
                async for _ in client.run_turn(request):
                    pass
                raise AssertionError(f"{request} was accepted")
            except InvalidArgumentError as err:
                assert err.code == "INVALID_ARGUMENT"
                assert fragment in err.details
