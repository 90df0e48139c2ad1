"""DEC-16: one policy line protects a secret from every reading tool, offline and at run time.

The policy says ``deny = ["read_file(**/.env)"]`` and nothing else about reads. The
executor reads that same file (STOCKADE_EXECUTOR_POLICY_FILE), never patterns from its
caller. Every reading tool and a dozen bash forms are tried:

* offline (``stockade policy check`` with the executor's real analysis): never ALLOW for a
  command that names or can reach the file (grep/glob file tools are allowed: they skip
  and hide the file at run time);
* at run time over real servers, each call through the normal flow (Inspect, Decide, an
  authenticated approval where the decision asks, Execute): the secret never appears in
  any output.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.cli import policy as policy_cli
from stockade.decision.app import DecisionApp
from stockade.decision.grants import generate_keypair
from stockade.decision.settings import DecisionSettings
from stockade.executor.app import ExecutorApp
from stockade.executor.settings import ExecutorSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

SECRET = "hunter2-s3cr3t-value"
POLICY = '[permissions]\ndeny = ["read_file(**/.env)"]\n'
ADMIN = (("authorization", "Bearer tok"),)

# (tool, arguments, what the offline check may say)
NEVER_ALLOW = ("deny", "ask")
CALLS: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("read_file", {"file_path": ".env"}, ("deny",)),
    ("read_file", {"file_path": "./sub/../.env"}, ("deny",)),
    ("read_file", {"file_path": "sub/.env"}, ("deny",)),
    ("grep_files", {"pattern": "hunter2", "path": "."}, ("allow",)),  # skips the file
    ("grep_files", {"pattern": "hunter2", "path": ".env"}, ("deny",)),
    ("glob_files", {"pattern": "**/.env"}, ("allow",)),  # hides the file
    ("glob_files", {"pattern": "**/*"}, ("allow",)),
    ("run_bash", {"command": "cat .env"}, NEVER_ALLOW),
    ("run_bash", {"command": "head ./x/../.env"}, NEVER_ALLOW),
    ("run_bash", {"command": "cat < .env"}, NEVER_ALLOW),
    ("run_bash", {"command": "tail -n 1 sub/.env"}, NEVER_ALLOW),
    ("run_bash", {"command": "cat .e*"}, NEVER_ALLOW),
    ("run_bash", {"command": "cp .env copy.txt"}, NEVER_ALLOW),
    ("run_bash", {"command": "base64 .env"}, NEVER_ALLOW),
    ("run_bash", {"command": "awk 1 .env"}, NEVER_ALLOW),
    ("run_bash", {"command": "while read l; do echo $l; done < .env"}, NEVER_ALLOW),
    ("run_bash", {"command": "grep -r hunter2 ."}, NEVER_ALLOW),
    ("run_bash", {"command": "grep -R hunter2 sub"}, NEVER_ALLOW),
    ("run_bash", {"command": "rg hunter2"}, NEVER_ALLOW),
    ("run_bash", {"command": "find . -name '.env' -exec cat {} +"}, NEVER_ALLOW),
    ("run_bash", {"command": "tar cf - ."}, NEVER_ALLOW),
    ("run_bash", {"command": "cp -r sub copy"}, NEVER_ALLOW),
]
IDS = [f"{t}:{json.dumps(a)[:40]}" for t, a, _ in CALLS]


def workspace(base: Path) -> Path:
    ws = base / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "x").mkdir()
    (ws / ".env").write_text(f"TOKEN={SECRET}\n")
    (ws / "sub" / ".env").write_text(f"OTHER={SECRET}\n")
    (ws / "notes.txt").write_text("nothing to see\n")
    (base / "policy.toml").write_text(POLICY)
    return ws


def offline(base: Path, ws: Path, tool: str, args: dict[str, Any], mode: str = "") -> str:
    parser = argparse.ArgumentParser(prog="stockade")
    policy_cli.register(parser.add_subparsers())
    argv = ["policy", "check", "--policy", str(base / "policy.toml"), "--tool", tool,
            "--args", json.dumps(args), "--cwd", str(ws), "--json"]  # fmt: skip
    if mode:
        argv += ["--mode", mode]
    ns = parser.parse_args(argv)
    return str(ns.func(ns))


@pytest.mark.parametrize(("tool", "args", "expect"), CALLS, ids=IDS)
def test_offline_check(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tool: str,
    args: dict[str, Any],
    expect: tuple[str, ...],
) -> None:
    ws = workspace(tmp_path)
    assert offline(tmp_path, ws, tool, args) == "0"
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] in expect, out
    # bypass mode settles plain asks, never a denial
    if expect == ("deny",):
        offline(tmp_path, ws, tool, args, "bypassPermissions")
        assert json.loads(capsys.readouterr().out)["verdict"] == "deny"


@dataclass
class Stack:
    decision: d_grpc.DecisionServiceAsyncStub
    executor: x_grpc.ExecutorServiceAsyncStub


@asynccontextmanager
async def stack(base: Path, ws: Path) -> AsyncIterator[Stack]:
    priv, pub = generate_keypair(base / "keys")
    dset = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=base / "dstate",
        policy_file=base / "policy.toml",
        grant_private_key_file=priv,
        admin_tokens=["ops=tok"],
        workspace=str(ws),
    )
    # The executor gets the same policy file and no denied-read setting of its own.
    xset = load_settings(
        ExecutorSettings,
        listen="127.0.0.1:0",
        workspace=ws,
        grant_public_key_file=pub,
        policy_file=base / "policy.toml",
    )
    async with DecisionApp(dset).open() as dregs, ExecutorApp(xset).open() as xregs:
        dsrv = await create_server("decision", dset, dregs)
        xsrv = await create_server("executor", xset, xregs)
        try:
            async with (
                grpc.aio.insecure_channel(dsrv.address) as dch,
                grpc.aio.insecure_channel(xsrv.address) as xch,
            ):
                yield Stack(d_grpc.DecisionServiceStub(dch), x_grpc.ExecutorServiceStub(xch))
        finally:
            await stop_server(xsrv)
            await stop_server(dsrv)


async def through_the_flow(st: Stack, tool: str, args: dict[str, Any], cid: str) -> str:
    """Inspect, Decide, approve an ASK as an admin, Execute; what the caller gets to see."""
    s = struct_pb2.Struct()
    s.update(args)
    call = c_pb2.ToolCall(call_id=cid, tool_name=tool, arguments=s, session_id="s1")
    insp = (await st.executor.Inspect(x_pb2.InspectRequest(call=call))).inspection
    resp = await st.decision.Decide(d_pb2.DecideRequest(call=call, inspection=insp))
    grant = resp.grant
    if resp.verdict == c_pb2.VERDICT_DENY:
        return f"DENIED {resp.reason}"
    if resp.verdict == c_pb2.VERDICT_ASK:
        await st.decision.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=resp.approval_id, resolution=d_pb2.RESOLUTION_ALLOW_ONCE
            ),
            metadata=ADMIN,
        )
        done = await st.decision.AwaitApproval(
            d_pb2.AwaitApprovalRequest(approval_id=resp.approval_id)
        )
        assert done.verdict == c_pb2.VERDICT_ALLOW
        grant = done.grant
    seen = []
    async for msg in st.executor.Execute(x_pb2.ExecuteRequest(call=call, grant=grant)):
        if msg.HasField("chunk"):
            data = msg.chunk.data
            seen.append(data if isinstance(data, str) else data.decode(errors="replace"))
        else:
            seen.append(msg.result.content + msg.result.error)
    return "".join(seen)


async def test_at_run_time_the_secret_never_shows(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    async with stack(tmp_path, ws) as st:
        caps = await st.executor.GetCapabilities(x_pb2.GetCapabilitiesRequest())
        for i, (tool, args, _) in enumerate(CALLS):
            seen = await through_the_flow(st, tool, args, f"c{i}")
            assert SECRET not in seen, (tool, args, seen, caps.layers)
            if tool == "glob_files":
                assert ".env" not in seen, seen  # hidden from listings
        # what was copied carries no secret either
        for copy in (ws / "copy.txt", ws / "copy"):
            if copy.is_file():
                assert SECRET not in copy.read_text()
            elif copy.is_dir():
                for f in copy.rglob("*"):
                    assert not f.is_file() or SECRET not in f.read_text(errors="replace")


async def test_the_executor_setting_adds_to_the_policy_and_reloads(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    (ws / "key.pem").write_text(SECRET)
    (ws / "notes.txt").write_text(f"later: {SECRET}\n")
    from stockade.executor.app import build_core, build_sandbox, policy_reads
    from stockade.executor.servicer import ExecutorServicer

    xset = load_settings(
        ExecutorSettings,
        listen="127.0.0.1:0",
        workspace=ws,
        allow_ungranted=True,
        policy_file=tmp_path / "policy.toml",
        denied_read_globs=["**/*.pem"],
    )
    servicer = ExecutorServicer(
        build_core(xset, build_sandbox(xset), protected_reads=policy_reads(xset))
    )
    # both the policy's deny and the setting's are in force
    for path in (".env", "key.pem"):
        assert servicer.core.inspect("read_file", {"file_path": path}).denied
    assert not servicer.core.inspect("read_file", {"file_path": "notes.txt"}).denied
    # a policy change reaches the executor: notes.txt is now asked about
    (tmp_path / "policy.toml").write_text(
        '[permissions]\ndeny = ["read_file(**/.env)"]\nask = ["*(notes.txt)"]\n'
    )
    servicer.core.apply_protected_reads(policy_reads(xset))
    asked = servicer.core.inspect("read_file", {"file_path": "notes.txt"})
    assert asked.verdict == "ask" and asked.rules[0].bypass_immune
    # (no launcher here, so the inspector itself: run_bash is not offered)
    cat = servicer.core.inspector("run_bash", {"command": "cat notes.txt"})
    assert cat.verdict == "ask" and any(r.bypass_immune for r in cat.rules)
    # the setting cannot remove the policy's deny: an empty setting keeps it
    bare = load_settings(
        ExecutorSettings, workspace=ws, allow_ungranted=True, policy_file=tmp_path / "policy.toml"
    )
    again = ExecutorServicer(
        build_core(bare, build_sandbox(bare), protected_reads=policy_reads(bare))
    )
    assert again.core.inspect("read_file", {"file_path": ".env"}).denied
    # a bad policy file is refused with its name
    (tmp_path / "policy.toml").write_text("[permissions\n")
    with pytest.raises(Exception, match="policy.toml"):
        policy_reads(bare)
