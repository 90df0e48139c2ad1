"""Executions are counted by tool and status, with their duration (X-1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from stockade.client.base import aio_channel
from stockade.executor.app import SERVICE_NAME, executor_servicer
from stockade.executor.metrics import ExecutorMetrics
from stockade.executor.settings import ExecutorSettings
from stockade.server.app import Registration, create_server, stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc


def _points(reader: InMemoryMetricReader, name: str) -> dict[tuple[str, str], float]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[tuple[str, str], float] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != name:
                    continue
                for p in metric.data.data_points:
                    key = (str(p.attributes["tool"]), str(p.attributes["status"]))
                    out[key] = getattr(p, "value", None) or getattr(p, "count", 0)
    return out


async def test_executions_are_counted_by_tool_and_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # this test has its own SDK
    (tmp_path / "a.txt").write_text("hi\n")
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    settings = ExecutorSettings(listen="127.0.0.1:0", workspace=tmp_path, allow_ungranted=True)
    async with executor_servicer(settings) as servicer:
        servicer.metrics = ExecutorMetrics(meter)
        reg = Registration(x_grpc.add_ExecutorServiceServicer_to_server, servicer, SERVICE_NAME)
        srv = await create_server("executor", settings, [reg])
        try:
            async with aio_channel(srv.address) as ch:
                stub = x_grpc.ExecutorServiceStub(ch)
                for i, path in enumerate(["a.txt", "a.txt", "/etc/passwd"]):
                    args = struct_pb2.Struct()
                    args.update({"file_path": path})
                    call = c_pb2.ToolCall(
                        call_id=f"c{i}", tool_name="read_file", arguments=args, session_id="s"
                    )
                    async for _ in stub.Execute(x_pb2.ExecuteRequest(call=call)):
                        pass
        finally:
            await stop_server(srv)
    counts = _points(reader, "stockade.executor.executions")
    assert counts == {("read_file", "ok"): 2, ("read_file", "refused"): 1}
    durations = _points(reader, "stockade.executor.duration")
    assert durations[("read_file", "ok")] == 2
