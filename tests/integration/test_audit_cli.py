"""``stockade audit query|tail|verify|metrics`` against a real audit service."""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.cli import audit as audit_cli
from stockade.server.app import create_server, stop_server
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2


@dataclass
class Served:
    address: str
    stub: a_grpc.AuditServiceStub
    db: Path


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    settings = AuditSettings(listen="127.0.0.1:0", state_dir=tmp_path / "audit", grace_seconds=1)
    async with AuditApp(settings).open() as registrations:
        running = await create_server("audit", settings, registrations)
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = a_grpc.AuditServiceStub(channel)
            events = [
                a_pb2.AuditEvent(
                    event_id=f"e{n}",
                    session_id="s1" if n % 2 else "s2",
                    step=n,
                    tool_name="run_bash" if n == 3 else "read_file",
                    status=a_pb2.AUDIT_STATUS_DENIED if n == 3 else a_pb2.AUDIT_STATUS_OK,
                    elapsed_ms=n,
                    agent_name="lead",
                    verdict=common_pb2.VERDICT_DENY if n == 3 else common_pb2.VERDICT_ALLOW,
                    matched_rule="run_bash(rm *)" if n == 3 else "read_file(*)",
                    rule_source=common_pb2.RULE_SOURCE_MANAGED,
                )
                for n in range(1, 7)
            ]
            await stub.Record(a_pb2.RecordRequest(event=events[0]))
            for ev in events[1:]:
                await stub.Record(a_pb2.RecordRequest(event=ev))
            try:
                yield Served(running.address, stub, Path(settings.db_path))
            finally:
                await stop_server(running)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stockade")
    audit_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


async def run(*argv: str) -> int:
    # The CLI is blocking; run it off the loop that serves the in-process server.
    args = parse(*argv)
    code: int = await asyncio.to_thread(args.func, args)
    return code


async def test_query_table_newest_first(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run("audit", "query", "--addr", served.address, "--session", "s1") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["SEQ", "TIME", "SESSION", "STEP"]
    assert [line.split()[0] for line in lines[1:]] == ["5", "3", "1"]
    denied = next(line for line in lines if line.startswith("3 "))
    assert "DENIED" in denied and "run_bash(rm *) [MANAGED]" in denied


async def test_query_json_with_filters_and_limit(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run("audit", "query", "--addr", served.address, "--json", "--limit", "4") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["sequence"] for r in rows] == ["6", "5", "4", "3"]
    assert (
        await run("audit", "query", "--addr", served.address, "--json", "--status", "DENIED") == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [r["event"]["event_id"] for r in rows] == ["e3"]
    assert rows[0]["event"]["verdict"] == "VERDICT_DENY"
    assert await run("audit", "query", "--addr", served.address, "--tool", "nothing") == 0
    assert capsys.readouterr().out == "no rows\n"


async def test_query_time_window(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run("audit", "query", "--addr", served.address, "--since", "1h", "--json") == 0
    assert len(json.loads(capsys.readouterr().out)) == 6
    argv = ("audit", "query", "--addr", served.address, "--until", "2000-01-01T00:00:00Z")
    assert await run(*argv) == 0
    assert capsys.readouterr().out == "no rows\n"


async def test_tail_prints_new_rows(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("audit", "tail", "--addr", served.address, "--session", "s9", "--json")
    args.count = 3
    tail = asyncio.create_task(asyncio.to_thread(args.func, args))
    # The tail starts at the head whenever it subscribes, so keep writing until it has
    # printed three rows of its session; rows of other sessions must never show.
    n = 0
    while not tail.done() and n < 2000:
        n += 1
        for session in ("other", "s9"):
            event = a_pb2.AuditEvent(
                event_id=f"{session}-{n}",
                session_id=session,
                tool_name="glob_files",
                status=a_pb2.AUDIT_STATUS_OK,
            )
            await served.stub.Record(a_pb2.RecordRequest(event=event))
        await asyncio.sleep(0.01)
    assert await asyncio.wait_for(tail, 20) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ids = [r["event"]["event_id"] for r in rows]
    assert len(ids) == 3 and all(i.startswith("s9-") for i in ids)
    numbers = [int(i[3:]) for i in ids]
    assert numbers == list(range(numbers[0], numbers[0] + 3))


async def test_verify_ok_then_broken(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run("audit", "verify", "--addr", served.address) == 0
    assert capsys.readouterr().out.startswith("ok: 6 rows")
    with sqlite3.connect(served.db) as db:
        db.execute("UPDATE agent_audit_log SET matched_rule = '*' WHERE sequence = 3")
    assert await run("audit", "verify", "--addr", served.address) == 1
    out = capsys.readouterr().out
    assert "BROKEN at sequence 3" in out
    assert "chain 'sqlite': row_edited at row 3, position 3" in out
    assert await run("audit", "verify", "--addr", served.address, "--json") == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["firstBrokenSequence"] == "3"
    assert answer["chains"][0]["reason"] == "CHAIN_BREAK_REASON_ROW_EDITED"
    # The offline check answers in the same fields.
    assert await run("audit", "verify", "--db", str(served.db), "--json") == 1
    assert json.loads(capsys.readouterr().out)["chains"][0]["firstBrokenPosition"] == "3"


async def test_metrics(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run("audit", "metrics", "--addr", served.address, "--session", "s1") == 0
    out = capsys.readouterr().out
    assert out.startswith("session s1: 3 calls, 0 errors, 1 denials")
    assert "run_bash: 1 calls" in out


async def test_unreachable_service_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"unix://{tmp_path}/nothing.sock"
    assert await run("audit", "verify", "--addr", address) == 1
    assert capsys.readouterr().err.startswith("error: UNAVAILABLE")


@pytest.mark.parametrize(
    "argv",
    [
        ("audit", "query", "--limit", "0"),
        ("audit", "query", "--since", "yesterday-ish"),
        ("audit", "query", "--status", "MAYBE"),
        ("audit", "metrics"),
        ("audit",),
    ],
)
def test_usage_errors_exit_2(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse(*argv)
    assert caught.value.code == 2


async def test_tail_table_lines(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("audit", "tail", "--addr", served.address, "--session", "s7", "--count", "1")
    tail = asyncio.create_task(asyncio.to_thread(args.func, args))
    n = 0
    while not tail.done() and n < 2000:
        n += 1
        event = a_pb2.AuditEvent(
            event_id=f"s7-{n}",
            session_id="s7",
            tool_name="run_bash",
            status=a_pb2.AUDIT_STATUS_DENIED,
            verdict=common_pb2.VERDICT_DENY,
            matched_rule="run_bash(sudo *)",
            rule_source=common_pb2.RULE_SOURCE_SESSION,
        )
        await served.stub.Record(a_pb2.RecordRequest(event=event))
        await asyncio.sleep(0.01)
    assert await asyncio.wait_for(tail, 20) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert "s7" in line and "run_bash" in line and "DENIED" in line and "DENY" in line
    assert line.endswith("run_bash(sudo *) [SESSION]")


def test_address_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOCKADE_AUDIT_ADDR", "unix:///run/stockade/audit.sock")
    assert parse("audit", "verify").addr == "unix:///run/stockade/audit.sock"
    monkeypatch.delenv("STOCKADE_AUDIT_ADDR")
    assert parse("audit", "verify").addr == "127.0.0.1:50053"


async def test_verify_offline_on_a_database_file(
    served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run("audit", "verify", "--db", str(served.db)) == 0
    assert capsys.readouterr().out.startswith("ok: 6 rows")
    with sqlite3.connect(served.db) as db:
        db.execute("DELETE FROM agent_audit_log WHERE sequence = 2")
    assert await run("audit", "verify", "--db", str(served.db), "--json") == 1
    result = json.loads(capsys.readouterr().out)
    assert (result["ok"], result["firstBrokenSequence"]) == (False, "3")
    assert await run("audit", "verify", "--db", str(tmp_path / "missing.db")) == 1
    assert "no audit database" in capsys.readouterr().err


async def test_tail_after_a_sequence(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("audit", "tail", "--addr", served.address, "--after", "3", "--count", "3", "--json")
    assert await run(*argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["sequence"] for r in rows] == ["4", "5", "6"]


async def test_verify_counts_refused_stand_ins_and_cut_values(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    from stockade.client.audit import refused_stand_in

    bad = a_pb2.AuditEvent(event_id="bad", session_id="s" * 300, tool_name="x", status=1)
    stand_in = refused_stand_in(bad, bad.SerializeToString(), "session_id is too long")
    await served.stub.Record(a_pb2.RecordRequest(event=stand_in))
    big = a_pb2.AuditEvent(
        event_id="big", session_id="s1", tool_name="x", status=1, arguments_json="[" * 100
    )
    big.arguments_json += "]" * 100
    await served.stub.Record(a_pb2.RecordRequest(event=big))
    assert await run("audit", "verify", "--addr", served.address) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: 8 rows")
    assert "note: 1 stand-in rows of refused events" in out and "1 rows with a value cut" in out
    assert await run("audit", "verify", "--db", str(served.db), "--json") == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["refusedRows"], found["cutRows"]) == ("1", "1")
