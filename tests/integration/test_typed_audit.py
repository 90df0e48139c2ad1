"""Issue #13 item 2: the audit row of a call holds the same typed decision the decision
service made.

Four real service processes (decision, executor, audit, agent) on unix sockets; the
decision service also sends its own DECIDED record of every Decide to the same audit
service. After one turn, for each call, the agent's row, the decision service's record and
the DecideResponse the agent received (as its ``tool_call_finished`` event reports it) carry
the same winning rule, conflicts, reason and policy version, as messages and enums; the
session's summary row carries its termination as an enum; the arguments come back typed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from google.protobuf import json_format

from stockade.client.agent import AgentClient
from stockade.client.base import aio_channel
from stockade.stack import LocalStack
from stockade.v1 import agent_service_pb2 as ag_pb2
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2 as c_pb2

SCRIPT = """
turns:
  - text: "reading"
    tool_calls:
      - {id: c1, name: read_file, arguments: {file_path: notes/hello.txt, limit: 5}}
      - {id: c2, name: read_file, arguments: {file_path: .env}}
  - text: "done"
"""


async def _rows(address: str, want: int) -> list[a_pb2.AuditEvent]:
    """Every row of session s1 once ``want`` arrived (the agent's rows and the decision
    records travel separately; poll with a generous deadline)."""
    rows: list[a_pb2.AuditEvent] = []
    async with aio_channel(address) as channel:
        stub = a_grpc.AuditServiceStub(channel)
        for _ in range(1200):
            page = await stub.Query(a_pb2.QueryRequest(session_id="s1", page_size=100))
            rows = [r.event for r in page.records]
            if len(rows) >= want:
                return rows
            await asyncio.sleep(0.05)
    raise AssertionError(f"{len(rows)} audit rows arrived, wanted {want}")


async def test_the_audit_row_holds_the_decision_service_s_typed_decision(
    stack_factory: type[LocalStack], tmp_path: Path, workspace: Path
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "typed.yaml").write_text(SCRIPT)
    stack = stack_factory(
        tmp_path / "stack",
        env={
            "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(workspace)},
            # The deny overrides the allow for .env: a conflict the row must carry.
            "decision": {
                "AGENT_PERMISSIONS_DENY": "read_file(*.env)",
                "AGENT_PERMISSIONS_ALLOW": "read_file(*)",
            },
            "agent": {"STOCKADE_AGENT_SCRIPT_DIR": str(scripts)},
        },
    )
    stack.extra_env["decision"]["STOCKADE_DECISION_AUDIT_ADDR"] = stack.addresses["audit"]
    await stack.start()
    async with aio_channel(stack.addresses["agent"]) as channel:
        events = [
            e
            async for e in AgentClient(channel).run_turn(
                ag_pb2.RunTurnRequest(session_id="s1", message="read", script="typed")
            )
        ]
    finished = {
        e.tool_call_finished.call_id: e.tool_call_finished
        for e in events
        if e.WhichOneof("event") == "tool_call_finished"
    }
    # 2 calls: the agent's row and the decision record of each; 1 session summary.
    rows = await _rows(stack.addresses["audit"], 5)

    by_kind: dict[tuple[str, bool], a_pb2.AuditEvent] = {}
    for row in rows:
        if row.call_id:
            by_kind[(row.call_id, row.status == a_pb2.AUDIT_STATUS_DECIDED)] = row
    for call_id, verdict in (("c1", c_pb2.VERDICT_ALLOW), ("c2", c_pb2.VERDICT_DENY)):
        agent_row, record = by_kind[(call_id, False)], by_kind[(call_id, True)]
        assert agent_row.verdict == record.verdict == finished[call_id].verdict == verdict
        assert agent_row.winning_rule == record.winning_rule == finished[call_id].winning_rule
        assert list(agent_row.conflicts) == list(record.conflicts)
        assert agent_row.decision_reason == record.decision_reason != ""
        assert agent_row.policy_version == record.policy_version != ""

    allowed, denied = by_kind[("c1", False)], by_kind[("c2", False)]
    assert allowed.winning_rule.pattern == "read_file(*)"
    assert allowed.winning_rule.effect == c_pb2.RULE_EFFECT_ALLOW
    assert allowed.winning_rule.source == c_pb2.RULE_SOURCE_ENV
    assert allowed.status == a_pb2.AUDIT_STATUS_OK
    assert denied.status == a_pb2.AUDIT_STATUS_DENIED
    assert (denied.winning_rule.pattern, denied.winning_rule.effect) == (
        "read_file(*.env)",
        c_pb2.RULE_EFFECT_DENY,
    )
    # The allow the deny overrode, as a message: rule, effect, source and the note.
    overridden = [c for c in denied.conflicts if c.rule.pattern == "read_file(*)"]
    assert len(overridden) == 1
    assert overridden[0].rule.effect == c_pb2.RULE_EFFECT_ALLOW and overridden[0].note
    # The arguments come back typed (whole numbers stay whole).
    assert json_format.MessageToDict(allowed.arguments) == {
        "file_path": "notes/hello.txt",
        "limit": 5.0,
    }
    assert allowed.arguments_json == '{"file_path":"notes/hello.txt","limit":5}'
    [stop] = [r for r in rows if r.status == a_pb2.AUDIT_STATUS_SESSION_STOP]
    assert stop.termination == ag_pb2.TERMINATION_REASON_COMPLETED
    # Readers that predate the typed fields still get the strings.
    assert stop.termination_reason == "COMPLETED"
    assert denied.matched_rule == "read_file(*.env)" and "read_file(*)" in denied.conflict_log
