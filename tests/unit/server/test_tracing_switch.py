"""With an SDK tracer provider the servers and channels are instrumented; without, not.

Runs in a subprocess so the global provider it installs stays out of this process.
"""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from grpc_health.v1 import health_pb2, health_pb2_grpc
from stockade.client.base import aio_channel
from stockade.server.app import create_server, stop_server
from stockade.server.settings import ServerSettings
from stockade.tracing import tracing_enabled

async def call() -> None:
    srv = await create_server("t", ServerSettings(listen="127.0.0.1:0"), [])
    async with aio_channel(srv.address) as ch:
        await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
    await stop_server(srv)

before = tracing_enabled()
asyncio.run(call())
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
after = tracing_enabled()
asyncio.run(call())
kinds = sorted(s.kind.name for s in exporter.get_finished_spans())
print(before, after, kinds)
"""


def test_instrumentation_is_installed_only_when_tracing() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OTEL_SDK_DISABLED"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False True ['CLIENT', 'SERVER']"
