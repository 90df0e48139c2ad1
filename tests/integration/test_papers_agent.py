"""Remote tools end to end: the paper provider as its own process, called by the agent
through the real decision, executor and audit services (separate processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

from stockade.client.agent import AgentClient
from stockade.client.base import aio_channel
from stockade.stack import LocalStack
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

SCRIPT = """
turns:
  - text: "Looking up the papers."
    tool_calls:
      - {id: p1, name: search_papers, arguments: {query: "gravitational waves"}}
      - {id: p2, name: get_paper_metadata, arguments: {paper_id: "1906.11238"}}
      - {id: p3, name: get_paper_content, arguments: {paper_id: "1602.03837"}}
  - text: "Two landmark results."
"""


async def test_paper_tools_through_the_four_services(
    stack_factory: type[LocalStack], tmp_path: Path, workspace: Path
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "papers.yaml").write_text(SCRIPT)
    sock = Path(os.environ.get("TMPDIR", "/tmp")) / f"papers-{os.getpid()}.sock"
    papers_address = f"unix://{sock}"
    env = {**os.environ, "STOCKADE_PAPERS_LISTEN": papers_address, "OTEL_SDK_DISABLED": "true"}
    papers = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stockade.papers", env=env, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        for _ in range(1800):  # at least 90 s: a busy machine can be slow to start Python
            if sock.exists():
                break
            await asyncio.sleep(0.05)
        stack = stack_factory(
            tmp_path / "stack",
            env={
                "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(workspace)},
                "decision": {"AGENT_PERMISSIONS_DENY": "get_paper_content"},
                "agent": {
                    "STOCKADE_AGENT_SCRIPT_DIR": str(scripts),
                    "STOCKADE_AGENT_TOOL_PROVIDERS": papers_address,
                },
            },
        )
        await stack.start()
        async with aio_channel(stack.addresses["agent"]) as channel:
            events = [
                e
                async for e in AgentClient(channel).run_turn(
                    a_pb2.RunTurnRequest(session_id="sp", message="papers", script="papers")
                )
            ]
        assert await stack.stop("agent") == 0
        assert await stack.stop("audit") == 0
    finally:
        papers.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(papers.wait(), 30) == 0
        sock.unlink(missing_ok=True)
    done = {
        e.tool_call_finished.call_id: e.tool_call_finished
        for e in events
        if e.WhichOneof("event") == "tool_call_finished"
    }
    found = json.loads(done["p1"].content)["results"]
    assert found[0]["paper_id"] == "1602.03837"
    assert json.loads(done["p2"].content)["year"] == 2019
    assert done["p3"].verdict == c_pb2.VERDICT_DENY
    assert done["p3"].winning_rule.pattern == "get_paper_content"
    assert done["p1"].status == x_pb2.EXECUTION_STATUS_OK
    assert events[-1].terminated.reason == a_pb2.TERMINATION_REASON_COMPLETED
    db = tmp_path / "stack" / "state" / "audit" / "audit.db"
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT call_id, tool_name, status, verdict FROM agent_audit_log "
            "WHERE session_id='sp' ORDER BY sequence"
        ).fetchall()
    assert rows == [
        ("p1", "search_papers", "OK", "ALLOW"),
        ("p2", "get_paper_metadata", "OK", "ALLOW"),
        ("p3", "get_paper_content", "DENIED", "DENY"),
        ("", "session", "SESSION_STOP", ""),
    ]
