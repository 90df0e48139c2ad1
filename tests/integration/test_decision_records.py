"""Issue #10 item 6: the audit log says who decided.

Over real decision and audit servers: a Decide made directly (no agent involved) reaches
the audit log as a decision record; an approval answered by an admin names the approval and
the resolver's authenticated identity (the token's name), never the name the caller typed;
the grant's settlement says the same. With the audit service down the records wait in the
decision service's spool and arrive once it is back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from google.protobuf import struct_pb2

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

ADMIN = (("authorization", "Bearer tok-alice"),)


@asynccontextmanager
async def decision(
    tmp_path: Path, audit_addr: str
) -> AsyncIterator[d_grpc.DecisionServiceAsyncStub]:
    (tmp_path / "p.toml").write_text('[permissions]\nask = ["search_papers(secret*)"]\n')
    settings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "dstate",
        policy_file=tmp_path / "p.toml",
        admin_tokens=["alice=tok-alice"],
        audit_addr=audit_addr,
    )
    async with DecisionApp(settings).open() as regs:
        srv = await create_server("decision", settings, regs)
        try:
            async with grpc.aio.insecure_channel(srv.address) as ch:
                yield d_grpc.DecisionServiceStub(ch)
        finally:
            await stop_server(srv)


@asynccontextmanager
async def audit(tmp_path: Path, listen: str = "127.0.0.1:0") -> AsyncIterator[str]:
    settings = AuditSettings(listen=listen, state_dir=tmp_path / "audit", grace_seconds=1)
    async with AuditApp(settings).open() as regs:
        srv = await create_server("audit", settings, regs)
        try:
            yield srv.address
        finally:
            await stop_server(srv)


def call(call_id: str, query: str) -> c_pb2.ToolCall:
    s = struct_pb2.Struct()
    s.update({"query": query})
    return c_pb2.ToolCall(
        call_id=call_id, tool_name="search_papers", arguments=s, session_id="s1",
        agent_name="backend-x",
    )  # fmt: skip


async def records(addr: str, want: int) -> list[a_pb2.AuditEvent]:
    """The DECIDED rows, once ``want`` of them arrived (polled with a generous deadline)."""
    async with grpc.aio.insecure_channel(addr) as ch:
        stub = a_grpc.AuditServiceStub(ch)
        for _ in range(600):
            resp = await stub.Query(a_pb2.QueryRequest(session_id="s1", page_size=100))
            rows = [r.event for r in resp.records if r.event.status == a_pb2.AUDIT_STATUS_DECIDED]
            if len(rows) >= want:
                return rows
            await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(rows)} decision records arrived, wanted {want}")


async def test_every_decide_and_the_resolver_reach_the_audit_log(tmp_path: Path) -> None:
    async with audit(tmp_path) as addr, decision(tmp_path, addr) as stub:
        allowed = await stub.Decide(d_pb2.DecideRequest(call=call("c1", "galaxies")))
        assert allowed.verdict == c_pb2.VERDICT_ALLOW
        asked = await stub.Decide(d_pb2.DecideRequest(call=call("c2", "secret plans")))
        assert asked.verdict == c_pb2.VERDICT_ASK
        resolved = await stub.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=asked.approval_id,
                resolution=d_pb2.RESOLUTION_ALLOW_ONCE,
                resolver="the-ceo",  # typed: not an identity
                reason="ok",
            ),
            metadata=ADMIN,
        )
        assert resolved.approval.resolver == "token:alice"
        done = await stub.AwaitApproval(d_pb2.AwaitApprovalRequest(approval_id=asked.approval_id))
        claims = json.loads(done.grant.payload)
        assert claims["settle"] == {
            "by": "approval", "approval": asked.approval_id, "resolver": "token:alice",
        }  # fmt: skip
        rows = await records(addr, 3)
    by_call = {(r.call_id, r.verdict): r for r in rows}
    first = by_call[("c1", c_pb2.VERDICT_ALLOW)]
    assert first.agent_name == "backend-x" and first.policy_version
    assert json.loads(first.output_preview)["by"] == "none"
    assert "galaxies" not in first.output_preview and not first.arguments_json  # no raw args
    ask = by_call[("c2", c_pb2.VERDICT_ASK)]
    assert ask.winning_rule.pattern == "search_papers(secret*)"
    assert json.loads(ask.output_preview)["approval"] == asked.approval_id
    answer = by_call[("c2", c_pb2.VERDICT_ALLOW)]
    settle = json.loads(answer.output_preview)
    assert settle == {
        "by": "approval", "approval": asked.approval_id, "resolver": "token:alice",
        "resolution": "allow_once",
    }  # fmt: skip
    assert "the-ceo" not in answer.output_preview


async def test_records_wait_in_the_spool_while_the_audit_service_is_down(tmp_path: Path) -> None:
    # a unix socket nobody listens on yet: the audit service comes up after the decisions
    reserved = f"unix://{tmp_path}/audit.sock"
    async with decision(tmp_path, reserved) as stub:
        for i in range(3):
            resp = await stub.Decide(d_pb2.DecideRequest(call=call(f"d{i}", "stars")))
            assert resp.verdict == c_pb2.VERDICT_ALLOW  # a Decide never waits on the audit log
        async with audit(tmp_path, listen=reserved) as addr:
            rows = await records(addr, 3)
    assert sorted(r.call_id for r in rows) == ["d0", "d1", "d2"]
