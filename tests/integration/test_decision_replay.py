"""``stockade policy replay`` (DEC-14) against a real audit service holding recorded calls."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import grpc
import pytest

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.cli import policy as policy_cli
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import audit_service_pb2_grpc as au_grpc
from stockade.v1 import common_pb2 as c_pb2

M, S = c_pb2.RULE_SOURCE_MANAGED, c_pb2.RULE_SOURCE_SESSION
RECORDED = [
    # call id, tool, arguments, verdict, rule, rule source
    ("c1", "run_bash", {"command": "git status"}, c_pb2.VERDICT_ALLOW, "run_bash(git *)", M),
    ("c2", "run_bash", {"command": "git push --force"}, c_pb2.VERDICT_ALLOW, "run_bash(git *)", M),
    ("c3", "read_file", {"file_path": "notes.txt"}, c_pb2.VERDICT_ALLOW, "*", M),
    ("c4", "read_file", {"file_path": ".env"}, c_pb2.VERDICT_DENY, "read_file(**/.env)", M),
    # Decided by state the audit trail does not keep: the plan mode, a session deny rule.
    ("c5", "read_file", {"file_path": "notes.txt"}, c_pb2.VERDICT_DENY, "mode:plan",
     c_pb2.RULE_SOURCE_MODE),
    ("c6", "run_bash", {"command": "git status"}, c_pb2.VERDICT_DENY, "run_bash(git *)", S),
]  # fmt: skip


def event(
    i: int, call_id: str, tool: str, args: dict[str, str], verdict: int, rule: str, source: int
) -> object:
    return au_pb2.AuditEvent(
        event_id=f"e{i}",
        session_id="s1",
        step=i,
        tool_name=tool,
        status=au_pb2.AUDIT_STATUS_OK
        if verdict == c_pb2.VERDICT_ALLOW
        else au_pb2.AUDIT_STATUS_DENIED,
        agent_name="lead",
        call_id=call_id,
        verdict=verdict,  # type: ignore[arg-type]
        matched_rule=rule,
        rule_source=source,  # type: ignore[arg-type]
        arguments_json=json.dumps(args),
    )


async def test_replay_lists_the_calls_a_candidate_policy_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("n")
    settings = load_settings(AuditSettings, listen="127.0.0.1:0", state_dir=tmp_path / "audit")
    candidate = tmp_path / "new.toml"
    candidate.write_text(
        '[permissions]\ndeny = ["run_bash(git push *)", "read_file(**/.env)"]\n'
        'allow = ["run_bash(git status)", "read_file"]\n'
    )
    async with AuditApp(settings).open() as regs:
        srv = await create_server("audit", settings, regs)
        try:
            async with grpc.aio.insecure_channel(srv.address) as ch:
                stub = au_grpc.AuditServiceStub(ch)
                for i, rec in enumerate(RECORDED):
                    await stub.Record(au_pb2.RecordRequest(event=event(i, *rec)))  # type: ignore[arg-type]
                await stub.Record(
                    au_pb2.RecordRequest(
                        event=au_pb2.AuditEvent(
                            event_id="stop",
                            session_id="s1",
                            tool_name="session",
                            status=au_pb2.AUDIT_STATUS_SESSION_STOP,
                        )  # fmt: skip
                    )
                )
            parser = argparse.ArgumentParser()
            policy_cli.register(parser.add_subparsers())
            args = parser.parse_args(
                ["policy", "replay", "--policy", str(candidate), "--addr", srv.address,
                 "--root", str(ws), "--cwd", str(ws), "--json"]
            )  # fmt: skip
            code = await asyncio.to_thread(args.func, args)
        finally:
            await stop_server(srv)
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["replayed"] == 6 and out["skipped"] == 0
    assert [
        (c["call_id"], c["old_verdict"], c["new_verdict"], c["new_rule"]) for c in out["changes"]
    ] == [
        ("c2", "allow", "deny", "run_bash(git push *)"),
        ("c5", "deny", "allow", "read_file"),
        ("c6", "deny", "allow", "run_bash(git status)"),
    ]
    uncertain = {c["call_id"]: c["uncertain"] for c in out["changes"]}
    assert uncertain["c2"] is None  # the candidate policy alone makes this change
    assert "mode" in uncertain["c5"] and "session rule" in uncertain["c6"]
    assert "session rules" in out["note"] and "uncertain" in out["note"]


def test_replay_without_an_audit_service_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    candidate = tmp_path / "new.toml"
    candidate.write_text("[permissions]\n")
    parser = argparse.ArgumentParser()
    policy_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        ["policy", "replay", "--policy", str(candidate), "--addr", f"unix://{tmp_path}/none.sock"]
    )
    assert args.func(args) == 1
    assert "cannot read the audit trail" in capsys.readouterr().err
