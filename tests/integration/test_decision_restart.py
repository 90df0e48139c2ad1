"""DEC-6/DEC-7 with a real process: state survives a restart; SIGHUP reloads, keeping last good."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

TOKEN = "restart-token"
ADMIN = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # unix socket paths must stay under ~100 bytes; pytest's tmp_path can be longer.
    d = Path(tempfile.mkdtemp(prefix="dec", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Proc:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.sock = f"unix://{base}/d.sock"
        self.proc: asyncio.subprocess.Process | None = None

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("STOCKADE_", "AGENT_PERMISSION", "AGENT_DENIAL"))
        }
        env.update(
            STOCKADE_DECISION_LISTEN=self.sock,
            STOCKADE_DECISION_STATE_DIR=str(self.base / "state"),
            STOCKADE_DECISION_POLICY_FILE=str(self.base / "policy.toml"),
            STOCKADE_DECISION_ADMIN_TOKENS=TOKEN,
            STOCKADE_DECISION_POLICY_POLL_S="3600",  # only SIGHUP reloads in this test
            OTEL_SDK_DISABLED="true",
        )
        return env

    async def start(self) -> None:
        with open(self.base / "log.txt", "ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "stockade.decision",
                env=self.env(),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
            )
        for _ in range(1800):  # at least 90 s: a busy machine can be slow to start Python
            try:
                async with grpc.aio.insecure_channel(self.sock) as ch:
                    resp = await health_pb2_grpc.HealthStub(ch).Check(
                        health_pb2.HealthCheckRequest(service="stockade.v1.DecisionService"),
                        timeout=0.5,
                    )
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            assert self.proc.returncode is None, (self.base / "log.txt").read_text()
            await asyncio.sleep(0.05)
        raise AssertionError("decision service did not become healthy")

    async def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 30)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)


@pytest.fixture
async def proc(short_dir: Path) -> AsyncIterator[Proc]:
    (short_dir / "policy.toml").write_text(
        '[permissions]\nask = ["file_write"]\ndeny = ["run_bash(rm *)"]\n'
        "[limits]\napproval_timeout_seconds = 600\n"
    )
    p = Proc(short_dir)
    await p.start()
    yield p
    if p.proc is not None and p.proc.returncode is None:
        p.proc.kill()
        await p.proc.wait()


def call(tool: str, call_id: str, **args: str) -> c_pb2.ToolCall:
    s = struct_pb2.Struct()
    s.update(args)
    return c_pb2.ToolCall(call_id=call_id, tool_name=tool, arguments=s, session_id="s1")


def bash_ask(call_id: str) -> d_pb2.DecideRequest:
    ask = c_pb2.Rule(
        effect=c_pb2.RULE_EFFECT_ASK, pattern="run_bash", source=c_pb2.RULE_SOURCE_TOOL
    )
    return d_pb2.DecideRequest(
        call=call("run_bash", call_id, command="make build"),
        inspection=d_pb2.ToolInspection(tool_rules=[ask]),
    )


async def test_state_survives_a_restart(proc: Proc) -> None:
    async with grpc.aio.insecure_channel(proc.sock) as ch:
        stub = d_grpc.DecisionServiceStub(ch)
        await stub.CreateSession(
            d_pb2.CreateSessionRequest(session_id="s1", mode=c_pb2.PERMISSION_MODE_DEFAULT)
        )
        await stub.SetMode(
            d_pb2.SetModeRequest(session_id="s1", mode=c_pb2.PERMISSION_MODE_ACCEPT_EDITS),
            metadata=ADMIN,
        )
        rule = await stub.AddRule(
            d_pb2.AddRuleRequest(
                session_id="s1",
                rule=c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, pattern="read_file(*.key)"),
            ),
            metadata=ADMIN,
        )
        denied = await stub.Decide(d_pb2.DecideRequest(call=call("run_bash", "c0", command="rm x")))
        assert denied.verdict == c_pb2.VERDICT_DENY
        # A tool-level ASK (P6) is what an ALWAYS_ALLOW grant settles; explicit ASK rules
        # (P5) keep asking by DEC-3.2.
        first = await stub.Decide(bash_ask("c1"))
        second = await stub.Decide(
            d_pb2.DecideRequest(call=call("file_write", "c2", file_path="b"))
        )
        assert first.verdict == second.verdict == c_pb2.VERDICT_ASK
        granted = await stub.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=first.approval_id, resolution=d_pb2.RESOLUTION_ALWAYS_ALLOW
            ),
            metadata=ADMIN,
        )
    assert await proc.stop() == 0
    await proc.start()
    async with grpc.aio.insecure_channel(proc.sock) as ch:
        stub = d_grpc.DecisionServiceStub(ch)
        session = (await stub.GetSession(d_pb2.GetSessionRequest(session_id="s1"))).session
        assert session.mode == c_pb2.PERMISSION_MODE_ACCEPT_EDITS
        assert session.total_denials == 1
        rules = await stub.ListRules(d_pb2.ListRulesRequest(session_id="s1"))
        assert [r.rule_id for r in rules.rules] == [rule.rule.rule_id]
        grants = await stub.ListGrants(d_pb2.ListGrantsRequest(session_id="s1"))
        assert [g.grant_id for g in grants.grants] == [granted.session_grant.grant_id]
        again = await stub.Decide(bash_ask("c3"))
        assert again.verdict == c_pb2.VERDICT_ALLOW
        assert again.winning_rule.rule_id == granted.session_grant.grant_id
        # the approval left pending before the restart is still pending and answerable
        watch: Any = stub.WatchApprovals(d_pb2.WatchApprovalsRequest(session_id="s1"))
        pending = await watch.read()
        assert pending.approval.approval_id == second.approval_id
        assert pending.approval.state == d_pb2.APPROVAL_STATE_PENDING
        watch.cancel()
        waiter = asyncio.ensure_future(
            stub.AwaitApproval(d_pb2.AwaitApprovalRequest(approval_id=second.approval_id))
        )
        await stub.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=second.approval_id, resolution=d_pb2.RESOLUTION_ALLOW_ONCE
            ),
            metadata=ADMIN,
        )
        out = await waiter
        assert out.verdict == c_pb2.VERDICT_ALLOW and out.grant.signature


async def test_sighup_reloads_and_a_bad_file_keeps_the_last_good_policy(proc: Proc) -> None:
    pfile = proc.base / "policy.toml"
    async with grpc.aio.insecure_channel(proc.sock) as ch:
        stub = d_grpc.DecisionServiceStub(ch)

        async def state() -> tuple[str, int]:
            listed = await stub.ListRules(d_pb2.ListRulesRequest(include_policy=True))
            # (with the executor's findings: without them read_file is an ASK, DEC-12 rev 2)
            resp = await stub.Decide(
                d_pb2.DecideRequest(
                    call=call("read_file", "c", file_path="x.md"),
                    inspection=d_pb2.ToolInspection(read_only=True, inside_working_dir=True),
                )
            )
            return listed.policy_version, resp.verdict

        v1, verdict = await state()
        assert verdict == c_pb2.VERDICT_ALLOW
        pfile.write_text('[permissions]\ndeny = ["read_file(*.md"]\n')
        proc.signal(signal.SIGHUP)
        await asyncio.sleep(0.3)
        assert await state() == (v1, c_pb2.VERDICT_ALLOW)
        pfile.write_text('[permissions]\ndeny = ["read_file(*.md)"]\n')
        proc.signal(signal.SIGHUP)
        for _ in range(100):
            v2, verdict = await state()
            if v2 != v1:
                break
            await asyncio.sleep(0.05)
        assert v2 != v1 and verdict == c_pb2.VERDICT_DENY
    log = (proc.base / "log.txt").read_text()
    assert "read_file(*.md" in log and "keeping version" in log
