"""ExecutorService: maps protobuf to the executor core and back (kept thin)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
from google.protobuf import duration_pb2, json_format

from stockade.errors import InvalidArgument, NotImplementedYet, UnknownTool
from stockade.executor.paths import PathSandbox
from stockade.executor.settings import ExecutorSettings
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

READ_LIMIT_BYTES = 2 * 1024 * 1024


def call_arguments(call: c_pb2.ToolCall) -> dict[str, Any]:
    """The call's arguments as plain JSON values."""
    return json_format.MessageToDict(call.arguments)


def _require_call(call: c_pb2.ToolCall) -> None:
    if not call.tool_name:
        raise InvalidArgument("call.tool_name is required")
    if not call.call_id:
        raise InvalidArgument("call.call_id is required")


class ExecutorServicer(x_grpc.ExecutorServiceServicer):
    """First cut: Inspect and Execute for ``read_file``; the other tools come with the
    executor issue. Execute does not verify grants yet (see README status)."""

    def __init__(self, settings: ExecutorSettings, sandbox: PathSandbox) -> None:
        self.settings = settings
        self.sandbox = sandbox

    async def Inspect(  # noqa: N802 - generated name
        self, request: x_pb2.InspectRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.InspectResponse:
        _require_call(request.call)
        args = call_arguments(request.call)
        if request.call.tool_name != "read_file":
            raise UnknownTool(f"the executor has no tool {request.call.tool_name!r}")
        decision = self.sandbox.check(str(args.get("file_path", "")))
        rules = []
        if not decision.allowed:
            rules.append(
                c_pb2.Rule(
                    effect=c_pb2.RULE_EFFECT_DENY,
                    pattern=f"read_file({args.get('file_path', '')})",
                    source=c_pb2.RULE_SOURCE_TOOL,
                    reason=decision.reason,
                    bypass_immune=True,
                )
            )
        risk = c_pb2.RISK_LEVEL_LOW if decision.allowed else c_pb2.RISK_LEVEL_HIGH
        return x_pb2.InspectResponse(
            inspection=d_pb2.ToolInspection(
                tool_rules=rules,
                inside_working_dir=decision.allowed and self.sandbox.inside_cwd(decision.resolved),
                read_only=True,
                explanation=c_pb2.Explanation(
                    risk=risk, summary=f"Reads {decision.resolved or args.get('file_path')}."
                ),
            )
        )

    async def Execute(  # noqa: N802
        self, request: x_pb2.ExecuteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[x_pb2.ExecuteResponse]:
        _require_call(request.call)
        if request.call.tool_name != "read_file":
            raise UnknownTool(f"the executor has no tool {request.call.tool_name!r}")
        start = time.monotonic()
        result = self._read_file(call_arguments(request.call))
        result.elapsed.CopyFrom(duration_pb2.Duration(nanos=int((time.monotonic() - start) * 1e9)))
        yield x_pb2.ExecuteResponse(result=result)

    def _read_file(self, args: Mapping[str, Any]) -> x_pb2.ExecuteResult:
        path = args.get("file_path")
        if not isinstance(path, str) or not path:
            raise InvalidArgument("read_file needs a file_path string")
        decision = self.sandbox.check(path)
        if not decision.allowed:
            return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_REFUSED, error=decision.reason)
        fd = self.sandbox.open(path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            data = f.read(READ_LIMIT_BYTES)
        text = data.decode("utf-8", errors="replace")
        return x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content=text)

    async def Cancel(  # noqa: N802
        self, request: x_pb2.CancelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.CancelResponse:
        raise NotImplementedYet("ExecutorService.Cancel is not built yet (see README status)")

    async def GetCapabilities(  # noqa: N802
        self, request: x_pb2.GetCapabilitiesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.GetCapabilitiesResponse:
        return x_pb2.GetCapabilitiesResponse(
            layers=[
                x_pb2.ConfinementLayer(
                    name="path_sandbox", active=True, detail="roots enforced on every path"
                ),
                x_pb2.ConfinementLayer(
                    name="process_confinement",
                    active=False,
                    detail="not built yet: no commands are run by this executor",
                ),
            ],
            network_enabled=self.settings.network_enabled,
            roots=[x_pb2.AllowedRoot(path=r.path, writable=r.writable) for r in self.sandbox.roots],
            tools=["read_file"],
        )
