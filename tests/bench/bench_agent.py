"""The agent's own overhead per tool call, excluding every RPC (issue 6 benchmark).

The agent core runs real turns — limits, hooks (Cancellation, Redaction, Metrics,
AuditLog), schema validation, the execution pipeline, events — against in-process
stand-ins for the decision and executor clients that answer at once, so the figure is
the time the agent itself adds to each call. It is reported both for one call per step
and for parallel batches of eight read-only calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from stockade.agent.convert import event_to_pb
from stockade.agent.core import AgentCore
from stockade.agent.limits import LimitSettings
from stockade.llm.base import Message, ModelToolCall, ModelTurn, Provider, ToolSchema
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.bench.common import figure

TURNS = 150
STEPS = 8


class _Decision:
    async def decide(self, request: d_pb2.DecideRequest) -> d_pb2.DecideResponse:
        return d_pb2.DecideResponse(
            verdict=c_pb2.VERDICT_ALLOW,
            reason="allowed",
            winning_rule=c_pb2.Rule(
                effect=c_pb2.RULE_EFFECT_ALLOW, pattern="*", source=c_pb2.RULE_SOURCE_DEFAULT
            ),
            grant=d_pb2.Grant(payload=b"g"),
        )


class _Executor:
    async def inspect(self, request: x_pb2.InspectRequest) -> d_pb2.ToolInspection:
        return d_pb2.ToolInspection(read_only=True)

    async def execute(
        self, request: x_pb2.ExecuteRequest, *, timeout_s: float
    ) -> AsyncIterator[x_pb2.ExecuteResponse]:
        yield x_pb2.ExecuteResponse(
            result=x_pb2.ExecuteResult(status=x_pb2.EXECUTION_STATUS_OK, content="line\n" * 20)
        )


class _Sink:
    def enqueue(self, event: au_pb2.AuditEvent) -> None:
        pass


class _Provider:
    """STEPS steps of ``width`` read_file calls each, then a final answer."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.step = 0

    async def complete(
        self, messages: list[Message], tools: list[ToolSchema], *, allow_tools: bool = True
    ) -> ModelTurn:
        self.step += 1
        if self.step > STEPS:
            return ModelTurn(text="done", prompt_tokens=10, completion_tokens=2)
        calls = tuple(
            ModelToolCall(f"c{self.step}-{i}", "read_file", {"file_path": f"f{self.step}-{i}"})
            for i in range(self.width)
        )
        return ModelTurn(tool_calls=calls, prompt_tokens=10, completion_tokens=5)


async def _per_call_us(width: int) -> float:
    calls = 0
    start = time.perf_counter()
    for turn in range(TURNS):
        provider = _Provider(width)

        def provider_for(_script: str, provider: _Provider = provider) -> Provider:
            return provider

        core = AgentCore(
            decision=_Decision(),  # type: ignore[arg-type]
            executor=_Executor(),  # type: ignore[arg-type]
            audit=_Sink(),
            provider_for=provider_for,
            limits=LimitSettings(max_steps=STEPS + 1, diminishing_steps=STEPS + 2),
        )
        async for event in core.run_turn(f"s{turn}", "go"):
            event_to_pb(event)  # what the servicer does with each event
        calls += STEPS * width
    return (time.perf_counter() - start) / calls * 1e6


def run() -> list[dict[str, Any]]:
    """Measure and return the figures."""
    serial = asyncio.run(_per_call_us(1))
    batched = asyncio.run(_per_call_us(8))
    return [
        figure(
            "AGENT-1a",
            "agent overhead per tool call, one call per step (no RPCs)",
            serial,
            "us",
            target="informational (PERF-2 budget: full call within 5x an echo RPC)",
        ),
        figure(
            "AGENT-1b",
            "agent overhead per tool call, parallel batches of 8 (no RPCs)",
            batched,
            "us",
            target="informational",
        ),
    ]


if __name__ == "__main__":
    for item in run():
        print(item)
