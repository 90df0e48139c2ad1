"""Run the four services in this one process with an in-memory span exporter, drive one
RunTurn over real gRPC (unix sockets) and print the finished spans as JSON lines.

Used by test_tracing.py in a subprocess, so the global tracer provider it installs does
not leak into other tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stockade.agent.app import AgentApp
from stockade.agent.settings import AgentSettings
from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.client.agent import AgentClient
from stockade.client.base import aio_channel
from stockade.decision.app import DecisionApp
from stockade.decision.grants import generate_keypair
from stockade.decision.settings import DecisionSettings
from stockade.executor.app import ExecutorApp
from stockade.executor.settings import ExecutorSettings
from stockade.server.app import run_apps
from stockade.server.telemetry import setup_telemetry
from stockade.v1 import agent_service_pb2 as a_pb2

SCRIPT = """
turns:
  - text: "reading"
    tool_calls:
      - {id: c1, name: read_file, arguments: {file_path: notes.txt}}
  - text: "done"
"""


async def main(base: Path) -> None:
    ws = base / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("traced\n")
    (base / "scripts").mkdir()
    (base / "scripts" / "t.yaml").write_text(SCRIPT)
    sock = Path(tempfile.mkdtemp(prefix="stk-tr-", dir="/tmp"))
    addr = {n: f"unix://{sock}/{n}.sock" for n in ("decision", "executor", "audit", "agent")}
    private, public = generate_keypair(base / "keys")
    apps = [
        DecisionApp(
            DecisionSettings(
                listen=addr["decision"], state_dir=base / "d", grant_private_key_file=private
            )
        ),
        ExecutorApp(
            ExecutorSettings(listen=addr["executor"], workspace=ws, grant_public_key_file=public)
        ),
        AuditApp(AuditSettings(listen=addr["audit"], state_dir=base / "a")),
        AgentApp(
            AgentSettings(
                listen=addr["agent"],
                decision_addr=addr["decision"],
                executor_addr=addr["executor"],
                audit_addr=addr["audit"],
                script_dir=base / "scripts",
                spool_dir=base / "spool",
            )
        ),
    ]
    stop = asyncio.Event()
    ready = asyncio.Event()
    runner = asyncio.create_task(run_apps(apps, stop=stop, on_ready=lambda _: ready.set()))
    await ready.wait()
    async with aio_channel(addr["agent"]) as ch:
        async for _ in AgentClient(ch).run_turn(
            a_pb2.RunTurnRequest(session_id="trace-s", message="go", script="t")
        ):
            pass
    stop.set()
    await runner


if __name__ == "__main__":
    os.environ.pop("OTEL_SDK_DISABLED", None)
    os.environ["OTEL_TRACES_EXPORTER"] = "none"
    os.environ["OTEL_METRICS_EXPORTER"] = "none"
    exporter = InMemorySpanExporter()
    telemetry = setup_telemetry("all", extra_span_processors=[SimpleSpanProcessor(exporter)])
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
    telemetry.shutdown()
    for span in exporter.get_finished_spans():
        ctx = span.get_span_context()
        assert ctx is not None
        print(
            json.dumps(
                {
                    "name": span.name,
                    "kind": span.kind.name,
                    "trace_id": format(ctx.trace_id, "032x"),
                    "span_id": format(ctx.span_id, "016x"),
                    "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
                    "attributes": {k: str(v) for k, v in (span.attributes or {}).items()},
                }
            )
        )
    sys.stdout.flush()
