"""``stockade demo``: start the four services and run a scripted agent session.

The services run as separate processes on unix sockets with their SQLite files under a
local state directory; the transcript shows each tool call with the rule that decided
it, and ends with the session's audit trail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from importlib import resources
from pathlib import Path

from google.protobuf import json_format

from stockade.client.agent import AgentClient
from stockade.client.base import aio_channel
from stockade.stack import LocalStack, StackError
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

DEMO_POLICY_DENY = "read_file(*.env)"


class Style:
    """ANSI colours when writing to a terminal (and NO_COLOR is unset)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text


def prepare(state_dir: Path, script: Path | None) -> tuple[Path, Path]:
    """A fresh workspace and script folder under ``state_dir``."""
    if state_dir.exists():
        shutil.rmtree(state_dir)
    workspace = state_dir / "workspace"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "hello.txt").write_text(
        "Hello from the Stockade demo workspace.\nEvery tool call here was checked.\n"
    )
    (workspace / ".env").write_text("DATABASE_PASSWORD=demo-secret-do-not-read\n")
    scripts = state_dir / "scripts"
    scripts.mkdir()
    if script is not None:
        shutil.copy(script, scripts / "demo.yaml")
    else:
        text = resources.files("stockade.demo").joinpath("demo.yaml").read_text()
        (scripts / "demo.yaml").write_text(text)
    return workspace, scripts


def describe(event: a_pb2.RunTurnResponse, style: Style) -> str | None:
    """One transcript line for an event (None for events not shown)."""
    kind = event.WhichOneof("event")
    if kind == "text":
        return f"  {style('model', '36')}  {event.text.text}"
    if kind == "tool_call_started":
        call = event.tool_call_started.call
        args = json_format.MessageToDict(call.arguments)
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
        return f"  {style('call ', '33')}  {call.tool_name}({shown})"
    if kind == "tool_call_finished":
        f = event.tool_call_finished
        rule = f.winning_rule
        source = c_pb2.RuleSource.Name(rule.source).removeprefix("RULE_SOURCE_")
        if f.status == x_pb2.EXECUTION_STATUS_OK:
            first = f.content.strip().splitlines()[0] if f.content.strip() else ""
            return f"  {style('ALLOW', '32;1')}  by {rule.pattern!r} ({source}) -> {first[:70]!r}"
        return f"  {style('DENY ', '31;1')}  by {rule.pattern!r} ({source}): {f.reason}"
    if kind == "final_answer":
        return f"  {style('final', '35;1')}  {event.final_answer.text}"
    if kind == "terminated":
        t = event.terminated
        name = a_pb2.TerminationReason.Name(t.reason).removeprefix("TERMINATION_REASON_")
        return f"  {style('end  ', '2')}  {name}: {t.detail}"
    return None


async def run_demo(state_dir: Path, script: Path | None, style: Style) -> int:
    """Run the demo; returns the exit code."""
    workspace, scripts = prepare(state_dir, script)
    env = {
        "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(workspace)},
        "decision": {"AGENT_PERMISSIONS_DENY": DEMO_POLICY_DENY},
        "agent": {"STOCKADE_AGENT_SCRIPT_DIR": str(scripts)},
    }
    print(style("Stockade demo", "1"), f"- state in {state_dir}")
    stack = LocalStack(state_dir, env=env)
    try:
        print("  starting decision, executor, audit and agent ...")
        await stack.start()
        print(f"  services up on unix sockets in {stack.sock_dir}\n")
        session = "demo-session"
        async with aio_channel(stack.addresses["agent"]) as ch:
            async for event in AgentClient(ch).run_turn(
                a_pb2.RunTurnRequest(session_id=session, message="Summarise the workspace notes.")
            ):
                line = describe(event, style)
                if line:
                    print(line)
        # Stopping the agent drains its audit queue before the audit service stops.
        await stack.stop("agent")
        await stack.stop("audit")
        await print_audit(state_dir / "state" / "audit" / "audit.db", session, style)
    except StackError as exc:
        print(f"stockade demo: {exc}", file=sys.stderr)
        return 1
    finally:
        await stack.close()
    return 0


async def print_audit(db: Path, session: str, style: Style) -> None:
    """Print the session's audit rows, oldest first."""
    from stockade.audit.model import QueryFilters
    from stockade.audit.store import AuditStore

    async with await AuditStore.open(db) as store:
        rows, _ = await store.query(QueryFilters(session_id=session), page_size=100)
        result = await store.verify()
    print("\n" + style("Audit trail", "1"), f"({db})")
    print(f"  {'seq':>4}  {'tool':<10} {'status':<13} {'verdict':<7} rule")
    for row in reversed(rows):
        e = row.event
        print(
            f"  {row.sequence:>4}  {e.tool_name:<10} {e.status:<13} {e.verdict:<7} {e.matched_rule}"
        )
    verdict = (
        style("OK", "32;1")
        if result.ok
        else style(f"BROKEN at {result.first_broken_sequence}", "31;1")
    )
    print(f"  hash chain: {verdict} ({result.rows_checked} rows)")


def run(args: argparse.Namespace) -> int:
    """Handler of ``stockade demo``."""
    style = Style(sys.stdout.isatty() and "NO_COLOR" not in os.environ and not args.no_color)
    return asyncio.run(run_demo(Path(args.state_dir).resolve(), args.script, style))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo``."""
    p = sub.add_parser(
        "demo",
        help="start the four services and run a scripted agent session",
        description=(
            "Start decision, executor, audit and agent as separate processes with embedded "
            "SQLite under --state-dir, run a scripted session and print its transcript and "
            "audit trail."
        ),
    )
    p.add_argument("--state-dir", default=".stockade/demo", help="where state and logs go")
    p.add_argument("--script", type=Path, help="a custom script (YAML) for the scripted model")
    p.add_argument("--no-color", action="store_true", help="plain output")
    p.set_defaults(func=run)
