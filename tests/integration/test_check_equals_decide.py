"""DEC-15 / DEC-3 rev 2: ``stockade policy check`` (offline) and the ``Decide`` RPC give the
same answer for the same call and facts.

One policy file, one workspace. Offline: the CLI with the executor's real analysis. Over
real servers: the executor's Inspect (the executor reads the same policy file), then
Decide in a session of the same mode. Verdict, deciding step and winning rule must agree
for every call of the table, in every mode.
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

POLICY = """
[permissions]
deny  = ["run_bash(rm *)", "read_file(**/.env)", "search_papers(secret)"]
ask   = ["file_write(**/*.md)"]
allow = ["run_bash(git status)", "run_bash(npm test)", "read_file", "file_edit"]
[tools.web_lookup]
read_only = true
"""

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("run_bash", {"command": "git status"}),
    ("run_bash", {"command": "git status; rm -rf x"}),
    ("run_bash", {"command": "npm test"}),
    ("run_bash", {"command": "npm install"}),
    ("run_bash", {"command": "ls -la"}),
    ("run_bash", {"command": "cat .env"}),
    ("run_bash", {"command": "grep -r TODO ."}),
    ("run_bash", {"command": "cat /etc/passwd"}),
    ("run_bash", {"command": "sudo ls"}),
    ("read_file", {"file_path": "notes.txt"}),
    ("read_file", {"file_path": "sub/.env"}),
    ("file_write", {"file_path": "a.txt", "content": "x"}),
    ("file_write", {"file_path": "README.md", "content": "x"}),
    ("file_edit", {"file_path": "notes.txt", "old_string": "a", "new_string": "b"}),
    ("glob_files", {"pattern": "**/*.py"}),
    ("grep_files", {"pattern": "x", "path": "."}),
    ("search_papers", {"query": "top secret"}),
    ("search_papers", {"query": "dark matter"}),
    ("web_lookup", {"url": "https://example.org"}),
    ("web_fetch", {"url": "https://example.org"}),
    ("save_note", {"content": "x"}),
]
MODES = {
    "default": c_pb2.PERMISSION_MODE_DEFAULT,
    "acceptEdits": c_pb2.PERMISSION_MODE_ACCEPT_EDITS,
    "bypassPermissions": c_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS,
    "dontAsk": c_pb2.PERMISSION_MODE_DONT_ASK,
    "plan": c_pb2.PERMISSION_MODE_PLAN,
}
VERDICT = {c_pb2.VERDICT_ALLOW: "allow", c_pb2.VERDICT_ASK: "ask", c_pb2.VERDICT_DENY: "deny"}


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


def offline(
    policy: Path, ws: Path, tool: str, args: dict[str, Any], mode: str
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stockade")
    policy_cli.register(parser.add_subparsers())
    ns = parser.parse_args(
        [
            "policy",
            "check",
            "--policy",
            str(policy),
            "--tool",
            tool,
            "--args",
            json.dumps(args),
            "--cwd",
            str(ws),
            "--mode",
            mode,
            "--json",
        ]  # fmt: skip
    )
    return ns


@pytest.mark.parametrize("mode", sorted(MODES))
async def test_policy_check_and_decide_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "notes.txt").write_text("a\n")
    (ws / "sub" / ".env").write_text("K=v\n")
    (tmp_path / "policy.toml").write_text(POLICY)
    async with stack(tmp_path, ws) as st:
        await st.decision.CreateSession(
            d_pb2.CreateSessionRequest(session_id="s", mode=MODES[mode]),
            metadata=(("authorization", "Bearer tok"),),
        )
        for i, (tool, args) in enumerate(CALLS):
            ns = offline(tmp_path / "policy.toml", ws, tool, args, mode)
            assert ns.func(ns) == 0
            want = json.loads(capsys.readouterr().out)
            s = struct_pb2.Struct()
            s.update(args)
            call = c_pb2.ToolCall(call_id=f"c{i}", tool_name=tool, arguments=s, session_id="s")
            request = d_pb2.DecideRequest(call=call)
            if tool in ("run_bash", "read_file", "file_write", "file_edit", "glob_files",
                        "grep_files"):  # fmt: skip
                insp = await st.executor.Inspect(x_pb2.InspectRequest(call=call))
                request.inspection.CopyFrom(insp.inspection)
            got = await st.decision.Decide(request)
            rule = None
            if got.winning_rule.source != c_pb2.RULE_SOURCE_DEFAULT:
                rule = got.winning_rule.pattern
            assert (VERDICT[got.verdict], rule) == (
                want["verdict"],
                want["rule"]["pattern"] if want["rule"] else None,
            ), (tool, args, mode, want, got)
