"""DEC-12 end to end: the decision service signs, a real executor server verifies.

Both servers run on port 0 with the same key pair (the executor holds only the public
key). Forged, tampered, expired, replayed, argument-swapped and missing grants are all
refused with PERMISSION_DENIED before anything runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import struct_pb2

from stockade.decision.app import DecisionApp
from stockade.decision.grants import GrantSigner, generate_keypair
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

TOKEN = "grant-admin"


@dataclass
class Pair:
    decision: d_grpc.DecisionServiceAsyncStub
    executor: x_grpc.ExecutorServiceAsyncStub


@asynccontextmanager
async def servers(tmp_path: Path, *, ttl: float = 60.0) -> AsyncIterator[Pair]:
    priv, pub = generate_keypair(tmp_path / "keys")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (ws / "b.txt").write_text("bravo\n")
    (tmp_path / "p.toml").write_text('[permissions]\nallow = ["read_file"]\nask = ["file_write"]\n')
    dset = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "dstate",
        policy_file=tmp_path / "p.toml",
        grant_private_key_file=priv,
        grant_ttl_s=ttl,
        admin_tokens=[TOKEN],
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
                yield Pair(d_grpc.DecisionServiceStub(dch), x_grpc.ExecutorServiceStub(xch))
        finally:
            await stop_server(xsrv)
            await stop_server(dsrv)


def call(tool: str, call_id: str, **args: Any) -> c_pb2.ToolCall:
    s = struct_pb2.Struct()
    s.update(args)
    return c_pb2.ToolCall(call_id=call_id, tool_name=tool, arguments=s, session_id="s1")


async def execute(pair: Pair, the_call: c_pb2.ToolCall, grant: d_pb2.Grant | None) -> str:
    request = x_pb2.ExecuteRequest(call=the_call, grant=grant)
    async for msg in pair.executor.Execute(request):
        if msg.HasField("result"):
            assert msg.result.status == x_pb2.EXECUTION_STATUS_OK, msg.result
            return msg.result.content
    raise AssertionError("no result")


async def refused(pair: Pair, the_call: c_pb2.ToolCall, grant: d_pb2.Grant | None) -> str:
    """Execute must fail with PERMISSION_DENIED; return the ErrorInfo reason."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await execute(pair, the_call, grant)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    detail = error_info(info.value)
    assert detail is not None
    reason: str = detail.reason
    return reason


async def allowed(pair: Pair, the_call: c_pb2.ToolCall) -> d_pb2.Grant:
    resp = await pair.decision.Decide(d_pb2.DecideRequest(call=the_call))
    assert resp.verdict == c_pb2.VERDICT_ALLOW and resp.grant.signature
    return resp.grant


async def test_a_decision_grant_runs_once_and_only_for_its_call(tmp_path: Path) -> None:
    async with servers(tmp_path) as pair:
        a = call("read_file", "c1", file_path="a.txt")
        grant = await allowed(pair, a)
        assert "alpha" in await execute(pair, a, grant)
        assert await refused(pair, a, grant) == "GRANT_REPLAYED"
        # argument swap: a grant for a.txt presented with b.txt
        grant2 = await allowed(pair, call("read_file", "c2", file_path="a.txt"))
        assert await refused(pair, call("read_file", "c2", file_path="b.txt"), grant2) == (
            "GRANT_MISMATCH"
        )
        # ... or for another call id, session or tool
        assert await refused(pair, call("read_file", "c3", file_path="a.txt"), grant2) == (
            "GRANT_MISMATCH"
        )
        # the refused attempts did not burn the grant: the exact call still runs
        assert "alpha" in await execute(pair, call("read_file", "c2", file_path="a.txt"), grant2)


async def test_forged_and_tampered_grants(tmp_path: Path) -> None:
    async with servers(tmp_path) as pair:
        a = call("read_file", "c1", file_path="a.txt")
        rogue = GrantSigner(Ed25519PrivateKey.generate())
        g = rogue.sign(session_id="s1", call_id="c1", tool_name="read_file",
                       arguments={"file_path": "a.txt"})  # fmt: skip
        forged = d_pb2.Grant(payload=g.payload, signature=g.signature, key_id=g.key_id)
        assert await refused(pair, a, forged) == "GRANT_INVALID"
        real = await allowed(pair, a)
        tampered = d_pb2.Grant(
            payload=real.payload.replace(b'"cid":"c1"', b'"cid":"c9"'), signature=real.signature
        )
        assert await refused(pair, call("read_file", "c9", file_path="a.txt"), tampered) == (
            "GRANT_INVALID"
        )
        assert await refused(pair, a, None) == "GRANT_MISSING"


async def test_expired_grant(tmp_path: Path) -> None:
    async with servers(tmp_path, ttl=0.05) as pair:
        a = call("read_file", "c1", file_path="a.txt")
        grant = await allowed(pair, a)
        await asyncio.sleep(0.2)
        assert await refused(pair, a, grant) == "GRANT_EXPIRED"


async def test_approved_ask_gets_a_grant_that_runs(tmp_path: Path) -> None:
    async with servers(tmp_path) as pair:
        w = call("file_write", "w1", file_path="new.txt", content="hi")
        asked = await pair.decision.Decide(d_pb2.DecideRequest(call=w))
        assert asked.verdict == c_pb2.VERDICT_ASK and not asked.HasField("grant")
        assert await refused(pair, w, None) == "GRANT_MISSING"
        await pair.decision.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=asked.approval_id, resolution=d_pb2.RESOLUTION_ALLOW_ONCE
            ),
            metadata=(("authorization", f"Bearer {TOKEN}"),),
        )
        answer = await pair.decision.AwaitApproval(
            d_pb2.AwaitApprovalRequest(approval_id=asked.approval_id)
        )
        assert answer.verdict == c_pb2.VERDICT_ALLOW
        await execute(pair, w, answer.grant)
        assert (tmp_path / "ws" / "new.txt").read_text() == "hi"
