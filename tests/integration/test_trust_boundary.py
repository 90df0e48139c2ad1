"""DEC-12 rev 2 over real servers: the executor enforces what the decision service saw.

A caller who reaches Decide and Execute directly (a backend, a compromised agent) sends a
missing, empty, forged or stale inspection for ASK-class calls; every grant it gets is
refused by the executor (or no grant is issued at all). The same calls, inspected honestly
and approved through the normal flow by an authenticated resolver, run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.decision.app import DecisionApp
from stockade.decision.grants import generate_keypair
from stockade.decision.settings import DecisionSettings
from stockade.executor.app import ExecutorApp
from stockade.executor.settings import ExecutorSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.server.errors import error_info
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

ADMIN = (("authorization", "Bearer tok-alice"),)

# (tool, arguments): calls the executor itself judges ASK (DEC-12 rev 2's table).
ASK_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("run_bash", {"command": 'python3 -c "print(6*7)"'}),
    ("run_bash", {"command": "npm install"}),
    ("run_bash", {"command": "cat /etc/passwd"}),  # bypass-immune ASK
    ("run_bash", {"command": "echo hi > out.txt"}),
    ("run_bash", {"command": "nice rm -f victim.txt"}),
    ("run_bash", {"command": "time -p rm -f victim.txt"}),
    ("file_write", {"file_path": "new.txt", "content": "x"}),
]


@dataclass
class Stack:
    decision: d_grpc.DecisionServiceAsyncStub
    executor: x_grpc.ExecutorServiceAsyncStub
    ws: Path


@asynccontextmanager
async def stack(tmp_path: Path, policy: str = "") -> AsyncIterator[Stack]:
    priv, pub = generate_keypair(tmp_path / "keys")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "victim.txt").write_text("v\n")
    (tmp_path / "p.toml").write_text(policy)
    dset = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "dstate",
        policy_file=tmp_path / "p.toml",
        grant_private_key_file=priv,
        admin_tokens=["alice=tok-alice"],
        workspace=str(ws),
    )
    xset = load_settings(
        ExecutorSettings, listen="127.0.0.1:0", workspace=ws, grant_public_key_file=pub
    )
    async with DecisionApp(dset).open() as dregs, ExecutorApp(xset).open() as xregs:
        dsrv = await create_server("decision", dset, dregs)
        xsrv = await create_server("executor", xset, xregs)
        try:
            async with (
                grpc.aio.insecure_channel(dsrv.address) as dch,
                grpc.aio.insecure_channel(xsrv.address) as xch,
            ):
                yield Stack(d_grpc.DecisionServiceStub(dch), x_grpc.ExecutorServiceStub(xch), ws)
        finally:
            await stop_server(xsrv)
            await stop_server(dsrv)


def make_call(tool: str, call_id: str, args: dict[str, Any], session: str = "s1") -> c_pb2.ToolCall:
    s = struct_pb2.Struct()
    s.update(args)
    return c_pb2.ToolCall(call_id=call_id, tool_name=tool, arguments=s, session_id=session)


async def run(st: Stack, call: c_pb2.ToolCall, grant: d_pb2.Grant) -> x_pb2.ExecuteResult:
    async for msg in st.executor.Execute(x_pb2.ExecuteRequest(call=call, grant=grant)):
        if msg.HasField("result"):
            return msg.result
    raise AssertionError("no result")


async def refused_reason(st: Stack, call: c_pb2.ToolCall, grant: d_pb2.Grant) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await run(st, call, grant)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value.details()
    detail = error_info(info.value)
    assert detail is not None
    return str(detail.reason)


async def inspect(st: Stack, call: c_pb2.ToolCall) -> d_pb2.ToolInspection:
    resp = await st.executor.Inspect(x_pb2.InspectRequest(call=call))
    return resp.inspection


def forged(command: str) -> d_pb2.ToolInspection:
    """What a lying caller sends: read-only, nothing to ask."""
    return d_pb2.ToolInspection(
        read_only=True,
        inside_working_dir=True,
        analysis=c_pb2.CommandAnalysis(
            verdict=c_pb2.VERDICT_ALLOW, sub_command_texts=[command], read_only=True
        ),
    )


@pytest.mark.parametrize(("tool", "args"), ASK_CALLS, ids=lambda v: str(v)[:40])
async def test_missing_empty_forged_and_stale_inspections_never_run(
    tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    async with stack(tmp_path) as st:
        # missing / empty inspection: the findings are unknown, so ASK and no grant
        for i, insp in enumerate([None, d_pb2.ToolInspection()]):
            call = make_call(tool, f"m{i}", args)
            resp = await st.decision.Decide(d_pb2.DecideRequest(call=call, inspection=insp))
            assert resp.verdict == c_pb2.VERDICT_ASK, resp
            assert not resp.grant.signature
            assert "unknown" in resp.reason
            assert await refused_reason(st, call, resp.grant) == "GRANT_MISSING"
        # forged inspection: the decision allows, the executor refuses the grant
        call = make_call(tool, "f", args)
        lie = forged(str(args.get("command", "")))
        resp = await st.decision.Decide(d_pb2.DecideRequest(call=call, inspection=lie))
        assert resp.verdict == c_pb2.VERDICT_ALLOW and resp.grant.signature
        assert await refused_reason(st, call, resp.grant) == "GRANT_FINDINGS_MISMATCH"
        # stale inspection: an honest one, but of another (harmless) call
        harmless = make_call("run_bash", "h", {"command": "echo ok"})
        stale = await inspect(st, harmless)
        call = make_call(tool, "s", args)
        resp = await st.decision.Decide(d_pb2.DecideRequest(call=call, inspection=stale))
        assert resp.verdict == c_pb2.VERDICT_ALLOW and resp.grant.signature
        assert await refused_reason(st, call, resp.grant) == "GRANT_FINDINGS_MISMATCH"
        # nothing ran
        assert (st.ws / "victim.txt").exists()
        assert not (st.ws / "out.txt").exists() and not (st.ws / "new.txt").exists()


@pytest.mark.parametrize(("tool", "args"), ASK_CALLS, ids=lambda v: str(v)[:40])
async def test_the_same_calls_approved_through_the_normal_flow_run(
    tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    async with stack(tmp_path) as st:
        call = make_call(tool, "c1", args)
        resp = await st.decision.Decide(
            d_pb2.DecideRequest(call=call, inspection=await inspect(st, call))
        )
        assert resp.verdict == c_pb2.VERDICT_ASK and resp.approval_id
        # the typed resolver name is not an identity: the token's name is
        resolved = await st.decision.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=resp.approval_id,
                resolution=d_pb2.RESOLUTION_ALLOW_ONCE,
                resolver="mallory",
            ),
            metadata=ADMIN,
        )
        assert resolved.approval.resolver == "token:alice"
        done = await st.decision.AwaitApproval(
            d_pb2.AwaitApprovalRequest(approval_id=resp.approval_id)
        )
        assert done.verdict == c_pb2.VERDICT_ALLOW and done.grant.signature
        result = await run(st, call, done.grant)
        assert result.status != x_pb2.EXECUTION_STATUS_REFUSED, result
        if tool == "file_write":
            assert (st.ws / "new.txt").read_text() == "x"
        elif "rm" in str(args["command"]):
            assert not (st.ws / "victim.txt").exists()
        elif "python3" in str(args["command"]):
            assert "42" in result.content


async def test_rules_and_modes_settle_only_what_they_may(tmp_path: Path) -> None:
    policy = '[permissions]\nallow = ["run_bash(cat /etc/passwd)", "run_bash(npm install)"]\n'
    async with stack(tmp_path, policy) as st:
        # an allow rule settles a plain ASK: the grant says so and the executor runs it
        npm = make_call("run_bash", "n1", {"command": "npm install"})
        resp = await st.decision.Decide(
            d_pb2.DecideRequest(call=npm, inspection=await inspect(st, npm))
        )
        assert resp.verdict == c_pb2.VERDICT_ALLOW and b'"by":"rule"' in resp.grant.payload
        assert (await run(st, npm, resp.grant)).status != x_pb2.EXECUTION_STATUS_REFUSED
        # ... and with no inspection at all (findings unknown), the rule still decides, but
        # the executor checks the settlement against its own findings
        npm2 = make_call("run_bash", "n2", {"command": "npm install"})
        resp = await st.decision.Decide(d_pb2.DecideRequest(call=npm2))
        assert resp.verdict == c_pb2.VERDICT_ALLOW
        assert (await run(st, npm2, resp.grant)).status != x_pb2.EXECUTION_STATUS_REFUSED
        # a bypass-immune ASK: no rule and no mode settles it, even with findings unknown
        cat = make_call("run_bash", "p1", {"command": "cat /etc/passwd"})
        resp = await st.decision.Decide(d_pb2.DecideRequest(call=cat))
        assert resp.verdict == c_pb2.VERDICT_ALLOW  # the rule, over unknown findings
        assert await refused_reason(st, cat, resp.grant) == "GRANT_ASK_UNSETTLED"
        await st.decision.CreateSession(
            d_pb2.CreateSessionRequest(
                session_id="bp", mode=c_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS
            ),
            metadata=ADMIN,
        )
        py = make_call("run_bash", "b1", {"command": 'python3 -c "print(1)"'}, "bp")
        resp = await st.decision.Decide(d_pb2.DecideRequest(call=py))
        assert resp.verdict == c_pb2.VERDICT_ALLOW and b'"by":"mode"' in resp.grant.payload
        assert (await run(st, py, resp.grant)).status == x_pb2.EXECUTION_STATUS_OK
        cat2 = make_call("run_bash", "b2", {"command": "cat /etc/passwd"}, "bp")
        resp = await st.decision.Decide(
            d_pb2.DecideRequest(call=cat2, inspection=await inspect(st, cat2))
        )
        assert resp.verdict == c_pb2.VERDICT_ASK  # immune: bypass does not settle it


async def test_findings_that_change_after_the_decision_are_refused(tmp_path: Path) -> None:
    async with stack(tmp_path, '[permissions]\nallow = ["file_write"]\n') as st:
        call = make_call("file_write", "w1", {"file_path": "later.txt", "content": "x"})
        insp = await inspect(st, call)
        resp = await st.decision.Decide(d_pb2.DecideRequest(call=call, inspection=insp))
        assert resp.verdict == c_pb2.VERDICT_ALLOW
        # between Decide and Execute the path becomes a link out of the workspace
        (st.ws / "later.txt").symlink_to(tmp_path / "outside.txt")
        result = await run(st, call, resp.grant)
        assert result.status == x_pb2.EXECUTION_STATUS_REFUSED
        assert not (tmp_path / "outside.txt").exists()


async def test_create_session_in_another_mode_needs_admin(tmp_path: Path) -> None:
    async with stack(tmp_path) as st:
        for mode in (
            c_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS,
            c_pb2.PERMISSION_MODE_ACCEPT_EDITS,
            c_pb2.PERMISSION_MODE_DONT_ASK,
            c_pb2.PERMISSION_MODE_PLAN,
        ):
            req = d_pb2.CreateSessionRequest(session_id=f"m{mode}", mode=mode)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await st.decision.CreateSession(req)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.aio.AioRpcError):
                await st.decision.CreateSession(req, metadata=(("authorization", "Bearer x"),))
            made = await st.decision.CreateSession(req, metadata=ADMIN)
            assert made.session.mode == mode
        # the default mode (explicit or unspecified) needs no rights
        plain = await st.decision.CreateSession(d_pb2.CreateSessionRequest(session_id="d1"))
        assert plain.session.mode == c_pb2.PERMISSION_MODE_DEFAULT
        explicit = d_pb2.CreateSessionRequest(session_id="d2", mode=c_pb2.PERMISSION_MODE_DEFAULT)
        assert (await st.decision.CreateSession(explicit)).session.mode == (
            c_pb2.PERMISSION_MODE_DEFAULT
        )
