"""Protobuf ↔ domain for the executor: the only place that knows both sides.

The servicer calls these to turn requests into the core's arguments and the core's
results into messages; the core never sees a protobuf message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import duration_pb2, json_format

from stockade.errors import InvalidArgument
from stockade.executor.confine.policy import Layer
from stockade.executor.core import CallSpec, Capabilities, Interrupt
from stockade.executor.inspect import Inspection
from stockade.executor.tools.base import Chunk, Status, ToolResult
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

__all__ = [
    "call_arguments",
    "call_spec",
    "capabilities_to_proto",
    "chunk_to_proto",
    "inspection_to_proto",
    "interrupt_from_proto",
    "layers_to_proto",
    "require_call",
    "result_to_proto",
    "timeout_from_proto",
]

_STATUS = {
    Status.OK: x_pb2.EXECUTION_STATUS_OK,
    Status.ERROR: x_pb2.EXECUTION_STATUS_ERROR,
    Status.TIMEOUT: x_pb2.EXECUTION_STATUS_TIMEOUT,
    Status.CANCELLED: x_pb2.EXECUTION_STATUS_CANCELLED,
    Status.REFUSED: x_pb2.EXECUTION_STATUS_REFUSED,
}
_RISK = {
    "low": c_pb2.RISK_LEVEL_LOW,
    "medium": c_pb2.RISK_LEVEL_MEDIUM,
    "high": c_pb2.RISK_LEVEL_HIGH,
}
_VERDICT = {"allow": c_pb2.VERDICT_ALLOW, "ask": c_pb2.VERDICT_ASK, "deny": c_pb2.VERDICT_DENY}


def call_arguments(call: c_pb2.ToolCall) -> dict[str, Any]:
    """The call's arguments as plain JSON values."""
    return json_format.MessageToDict(call.arguments)


def require_call(call: c_pb2.ToolCall) -> None:
    """Refuse a call without a tool name or call id (INVALID_ARGUMENT)."""
    if not call.tool_name:
        raise InvalidArgument("call.tool_name is required")
    if not call.call_id:
        raise InvalidArgument("call.call_id is required")


def call_spec(call: c_pb2.ToolCall) -> CallSpec:
    """The core's view of a (checked) ToolCall."""
    require_call(call)
    return CallSpec(call.session_id, call.call_id, call.tool_name, call_arguments(call))


def interrupt_from_proto(value: int) -> Interrupt:
    """CANCEL only when asked for; anything else finishes (BLOCK, the safe default)."""
    return Interrupt.CANCEL if value == c_pb2.INTERRUPT_BEHAVIOR_CANCEL else Interrupt.BLOCK


def timeout_from_proto(request: x_pb2.ExecuteRequest) -> float | None:
    """The requested time limit in seconds, None when unset."""
    return request.timeout.ToNanoseconds() / 1e9 if request.HasField("timeout") else None


def inspection_to_proto(inspection: Inspection, call: c_pb2.ToolCall) -> d_pb2.ToolInspection:
    """The core's Inspection as the ToolInspection message Decide takes."""
    args = call_arguments(call)
    content = next(
        (str(args[k]) for k in ("command", "file_path", "path", "pattern") if k in args), ""
    )
    rules = [
        c_pb2.Rule(
            effect=c_pb2.RULE_EFFECT_DENY if rule.effect == "deny" else c_pb2.RULE_EFFECT_ASK,
            pattern=f"{inspection.tool_name}({content})",
            source=c_pb2.RULE_SOURCE_TOOL,
            reason=rule.reason,
            bypass_immune=rule.bypass_immune,
        )
        for rule in inspection.rules
    ]
    message = d_pb2.ToolInspection(
        tool_rules=rules,
        inside_working_dir=inspection.inside_working_dir,
        read_only=inspection.read_only,
        explanation=c_pb2.Explanation(risk=_RISK[inspection.risk], summary=inspection.explanation),
    )
    analysis = inspection.analysis
    if analysis is not None:
        message.analysis.CopyFrom(
            c_pb2.CommandAnalysis(
                verdict=_VERDICT[analysis.verdict],
                reasons=list(analysis.reasons),
                sub_commands=[c.name for c in analysis.commands],
                sub_command_texts=[c.text for c in analysis.commands],
                paths_read=list(analysis.paths_read),
                paths_written=list(analysis.paths_written),
                needs_network=analysis.needs_network,
                read_only=analysis.read_only,
            )
        )
    return message


def layers_to_proto(layers: Iterable[Layer]) -> list[x_pb2.ConfinementLayer]:
    """Confinement layers as messages."""
    return [
        x_pb2.ConfinementLayer(name=layer.name, active=layer.active, detail=layer.detail)
        for layer in layers
    ]


def _seconds(value: float) -> duration_pb2.Duration:
    message = duration_pb2.Duration()
    message.FromNanoseconds(int(value * 1e9))
    return message


def chunk_to_proto(chunk: Chunk) -> x_pb2.ExecuteResponse:
    """An output chunk as a stream message."""
    stream = x_pb2.OUTPUT_STREAM_STDERR if chunk.stderr else x_pb2.OUTPUT_STREAM_STDOUT
    return x_pb2.ExecuteResponse(chunk=x_pb2.OutputChunk(stream=stream, data=chunk.data))


def result_to_proto(
    result: ToolResult, elapsed_s: float, layers: list[x_pb2.ConfinementLayer]
) -> x_pb2.ExecuteResponse:
    """The final result as a stream message (with the layers in force)."""
    return x_pb2.ExecuteResponse(
        result=x_pb2.ExecuteResult(
            status=_STATUS[result.status],
            content=result.content,
            truncated=result.truncated,
            persisted_path=result.persisted_path,
            exit_code=result.exit_code,
            elapsed=_seconds(elapsed_s),
            layers=layers,
            error=result.error,
        )
    )


def capabilities_to_proto(
    caps: Capabilities, layers: list[x_pb2.ConfinementLayer]
) -> x_pb2.GetCapabilitiesResponse:
    """What this executor offers, as GetCapabilities answers it."""
    return x_pb2.GetCapabilitiesResponse(
        layers=layers,
        network_enabled=caps.network_enabled,
        roots=[x_pb2.AllowedRoot(path=r.path, writable=r.writable) for r in caps.roots],
        tools=list(caps.tools),
    )
