"""``stockade session …`` and ``stockade approvals watch|resolve`` against a real server."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.cli import approvals as approvals_cli
from stockade.cli import session as session_cli
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import create_server, load_settings
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

TOKEN = "cli-token"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stockade")
    sub = parser.add_subparsers()
    session_cli.register(sub)
    approvals_cli.register(sub)
    return parser.parse_args(argv)


async def cli(argv: list[str]) -> int:
    args = parse(argv)
    code: int = await asyncio.to_thread(args.func, args)  # the CLI is blocking
    return code


async def test_session_and_approval_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p.toml").write_text('[permissions]\nask = ["file_write"]\n')
    settings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        policy_file=tmp_path / "p.toml",
        admin_tokens=[TOKEN],
    )
    async with DecisionApp(settings).open() as regs:
        srv = await create_server("decision", settings, regs)
        addr = ["--addr", srv.address]
        admin = [*addr, "--token", TOKEN]
        try:
            # another mode than the default needs admin rights (DEC-6 rev 2)
            create = ["session", "create", "s1", "--mode", "acceptEdits", "--json"]
            assert await cli([*create, *addr]) == 1
            assert "PERMISSION_DENIED" in capsys.readouterr().err
            assert await cli([*create, *admin]) == 0
            created = json.loads(capsys.readouterr().out)
            assert created["session"]["mode"] == "PERMISSION_MODE_ACCEPT_EDITS"
            assert await cli(["session", "mode", "s1", "plan", *addr]) == 1  # no token
            assert "PERMISSION_DENIED" in capsys.readouterr().err
            assert await cli(["session", "mode", "s1", "dontAsk", *admin]) == 0
            assert (
                await cli(
                    ["session", "add-rule", "s1", "deny", "run_bash(curl *)", "--json", *admin]
                )
                == 0
            )
            rule_id = json.loads(capsys.readouterr().out.splitlines()[-1])["rule"]["rule_id"]
            assert await cli(["session", "rules", "s1", "--policy", *addr]) == 0
            human = capsys.readouterr().out.splitlines()
            # Human form by default: a table with enums as words, not JSON.
            assert human[0] == "rules:"
            assert not any(line.lstrip().startswith("{") for line in human)
            assert any("run_bash(curl *)" in line and "deny" in line.split() for line in human)
            assert await cli(["session", "rules", "s1", "--policy", "--json", *addr]) == 0
            listed = json.loads(capsys.readouterr().out)
            assert [r["pattern"] for r in listed["rules"]] == ["file_write", "run_bash(curl *)"]
            assert await cli(["session", "remove-rule", "s1", rule_id, "--json", *admin]) == 0
            assert json.loads(capsys.readouterr().out)["removed"] is True
            assert await cli(["session", "add-rule", "s1", "deny", "run_bash(x", *admin]) == 1
            assert "INVALID_ARGUMENT" in capsys.readouterr().err
            assert await cli(["session", "mode", "s1", "default", *admin]) == 0
            capsys.readouterr()

            # an ASK shows up in the watcher; the resolver answers "always" for 2 uses
            watcher = asyncio.create_task(
                cli(["approvals", "watch", "--json", "--count", "2", "--session", "s1", *addr])
            )
            async with grpc.aio.insecure_channel(srv.address) as ch:
                stub = d_grpc.DecisionServiceStub(ch)
                args = struct_pb2.Struct()
                args.update({"file_path": "a.txt"})
                call = c_pb2.ToolCall(
                    call_id="c1", tool_name="file_write", arguments=args, session_id="s1"
                )
                asked = await stub.Decide(d_pb2.DecideRequest(call=call))
                assert asked.verdict == c_pb2.VERDICT_ASK
                # Answer only once the watcher is connected (it must see both states).
                broker = regs[0].servicer.core.broker
                for _ in range(600):
                    if broker.watcher_count:
                        break
                    await asyncio.sleep(0.05)
                assert broker.watcher_count == 1
                assert await cli(["approvals", "resolve", asked.approval_id, "deny", *addr]) == 1
                assert await cli(
                    ["approvals", "resolve", asked.approval_id, "allow", "--resolver", "bob",
                     *admin]
                ) == 0  # fmt: skip
                assert await cli(["approvals", "resolve", asked.approval_id, "deny", *admin]) == 1
                during = capsys.readouterr()
                assert "FAILED_PRECONDITION" in during.err
            assert await asyncio.wait_for(watcher, 30) == 0
            out = during.out + capsys.readouterr().out
            lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
            states = [x["state"] for x in lines if "approval_id" in x]
            assert states == ["APPROVAL_STATE_PENDING", "APPROVAL_STATE_ALLOWED"]
            assert await cli(["session", "grants", "s1", *addr]) == 0
            assert await cli(["session", "revoke", "grant-nope", "--json", *admin]) == 0
            assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {}
            assert await cli(["session", "delete", "s1", *admin]) == 0
            assert await cli(["session", "get", "s1", *addr]) == 1
            assert "NOT_FOUND" in capsys.readouterr().err
        finally:
            await srv.server.stop(None)


async def test_watch_reconnects_after_falling_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stockade.decision.store import ApprovalRecord, ApprovalState, PendingCall

    settings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        admin_tokens=[TOKEN],
        approval_watch_queue=1,
    )
    async with DecisionApp(settings).open() as regs:
        srv = await create_server("decision", settings, regs)
        try:
            core = regs[0].servicer.core
            await core.store.create_session("s1", core.default_mode)
            watcher = asyncio.create_task(
                cli(["approvals", "watch", "--json", "--count", "2", "--session", "s1",
                     "--addr", srv.address])
            )  # fmt: skip
            broker = core.broker
            for _ in range(600):
                if broker.watcher_count:
                    break
                await asyncio.sleep(0.05)
            assert broker.watcher_count == 1
            records = [
                ApprovalRecord(f"appr-{i}", "s1", PendingCall(f"c{i}", "file_write", {}), "r",
                               "low", "s", ApprovalState.PENDING, 1.0, 9e9)
                for i in range(2)
            ]  # fmt: skip
            for rec in records:
                await core.store.insert_approval(rec)
            # Two changes with no chance to read in between: over the queue of 1.
            for rec in records:
                broker._publish(rec)
            assert await asyncio.wait_for(watcher, 30) == 0
            out = capsys.readouterr()
            ids = [json.loads(x)["approval_id"] for x in out.out.splitlines() if x.startswith("{")]
            assert ids == ["appr-0", "appr-1"]  # the backlog, after the reconnect
            assert "fell behind" in out.err and "reconnecting" in out.err
        finally:
            await srv.server.stop(None)
