"""One tool call is one trace across agent, executor, decision and audit (X-1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def _spans() -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, str(HERE / "_trace_run.py")],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _subtree(spans: list[dict[str, Any]], root_id: str) -> list[dict[str, Any]]:
    children: dict[str | None, list[dict[str, Any]]] = {}
    for s in spans:
        children.setdefault(s["parent_id"], []).append(s)
    out, todo = [], [root_id]
    while todo:
        sid = todo.pop()
        for child in children.get(sid, []):
            out.append(child)
            todo.append(child["span_id"])
    return out


def test_one_tool_call_is_one_trace_tree() -> None:
    spans = _spans()
    tool = [s for s in spans if s["name"] == "tool_call read_file"]
    assert len(tool) == 1
    call = tool[0]
    assert call["attributes"]["stockade.call_id"] == "c1"
    below = _subtree(spans, call["span_id"])
    server_side = {
        (s["attributes"].get("rpc.service"), s["attributes"].get("rpc.method"))
        for s in below
        if s["kind"] == "SERVER"
    }
    assert ("stockade.v1.ExecutorService", "Inspect") in server_side
    assert ("stockade.v1.DecisionService", "Decide") in server_side
    assert ("stockade.v1.ExecutorService", "Execute") in server_side
    # Audit events travel in batches; the audit service parents one receipt span per
    # event on the call's span, so the audit hop is in the call's tree too.
    receipts = [s for s in below if s["name"] == "audit.receive"]
    assert len(receipts) == 1 and receipts[0]["parent_id"] == call["span_id"]
    assert receipts[0]["attributes"]["stockade.call_id"] == "c1"
    # Every span of the call shares the trace id, and its parent is in the trace.
    trace_ids = {s["trace_id"] for s in [call, *below]}
    assert trace_ids == {call["trace_id"]}
    in_trace = {s["span_id"] for s in spans if s["trace_id"] == call["trace_id"]}
    for s in below:
        assert s["parent_id"] in in_trace


def test_the_turn_is_rooted_at_the_callers_span() -> None:
    spans = _spans()
    roots = [s for s in spans if s["name"] == "/stockade.v1.AgentService/RunTurn"]
    client = [r for r in roots if r["kind"] == "CLIENT"]
    assert len(client) == 1 and client[0]["parent_id"] is None
    below = _subtree(spans, client[0]["span_id"])
    assert any(s["name"] == "tool_call read_file" for s in below)
