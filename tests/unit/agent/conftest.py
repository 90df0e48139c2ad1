"""A scriptable decision service and executor on real grpc.aio servers, for loop tests.

The fakes answer in the real wire format, so the agent's real clients, fail-closed rules
and pipeline run unchanged; each test scripts only what it needs (a verdict per tool, an
approval answer, a slow or failing execution).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from stockade.agent.convert import event_to_pb
from stockade.agent.core import AgentCore
from stockade.agent.hooks import Hook
from stockade.agent.limits import LimitSettings
from stockade.agent.memory import MemoryStore
from stockade.agent.registry import ToolRegistry
from stockade.agent.remote_tools import ToolProviderClient
from stockade.agent.skills import SkillLibrary
from stockade.client.decision import DecisionClient
from stockade.client.executor import ExecutorClient
from stockade.llm.base import Message, ModelTurn, ToolSchema
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2 as audit_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]


def args_of(call: c_pb2.ToolCall) -> dict[str, Any]:
    """A call's arguments as a dict."""
    value: dict[str, Any] = json_format.MessageToDict(call.arguments)
    return value


class FakeDecision(d_grpc.DecisionServiceServicer):
    """Decides by a per-tool verdict table; approvals are answered by the test."""

    def __init__(self) -> None:
        self.verdicts: dict[str, c_pb2.Verdict.ValueType] = {}
        self.halt_after: int | None = None
        self.delay_s = 0.0
        self.requests: list[d_pb2.DecideRequest] = []
        self.approvals: dict[str, asyncio.Future[int]] = {}
        self.approval_created = asyncio.Event()
        self.sessions: list[d_pb2.CreateSessionRequest] = []
        self.always_allow_applies: set[str] = set()
        """Tools whose ASK an ALWAYS_ALLOW answer can settle (the rest ask every time)."""

    async def Decide(self, request: d_pb2.DecideRequest, context: Ctx) -> d_pb2.DecideResponse:
        self.requests.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        verdict = self.verdicts.get(request.call.tool_name, c_pb2.VERDICT_ALLOW)
        if any(s.kind == d_pb2.HookSignal.KIND_BLOCK for s in request.hook_signals):
            verdict = c_pb2.VERDICT_DENY
        elif verdict == c_pb2.VERDICT_ALLOW and request.hook_signals:
            verdict = c_pb2.VERDICT_ASK
        if verdict == c_pb2.VERDICT_ASK and request.call.from_subagent:
            verdict = c_pb2.VERDICT_DENY
        effect = {
            c_pb2.VERDICT_ALLOW: c_pb2.RULE_EFFECT_ALLOW,
            c_pb2.VERDICT_ASK: c_pb2.RULE_EFFECT_ASK,
            c_pb2.VERDICT_DENY: c_pb2.RULE_EFFECT_DENY,
        }[verdict]
        response = d_pb2.DecideResponse(
            verdict=verdict,
            reason=f"fake verdict for {request.call.tool_name}",
            winning_rule=c_pb2.Rule(
                effect=effect,
                pattern=f"{request.call.tool_name}(*)",
                source=c_pb2.RULE_SOURCE_MANAGED,
            ),
            policy_version="v-test",
            explanation=c_pb2.Explanation(risk=c_pb2.RISK_LEVEL_MEDIUM, summary="does things"),
        )
        if verdict == c_pb2.VERDICT_ALLOW:
            response.grant.payload = f"grant:{request.call.call_id}".encode()
        if verdict == c_pb2.VERDICT_ASK:
            approval_id = f"ap-{request.call.call_id}"
            response.approval_id = approval_id
            response.always_allow_applies = request.call.tool_name in self.always_allow_applies
            self.approvals[approval_id] = asyncio.get_running_loop().create_future()
            self.approval_created.set()
        denials = sum(
            1 for r in self.requests if self.verdicts.get(r.call.tool_name) == c_pb2.VERDICT_DENY
        )
        if self.halt_after is not None and denials >= self.halt_after:
            response.halt = True
            response.halt_reason = f"{denials} consecutive denials"
        return response

    async def AwaitApproval(
        self, request: d_pb2.AwaitApprovalRequest, context: Ctx
    ) -> d_pb2.AwaitApprovalResponse:
        verdict = await self.approvals[request.approval_id]
        response = d_pb2.AwaitApprovalResponse(
            verdict=verdict,  # type: ignore[arg-type]
            reason="approved by test" if verdict == c_pb2.VERDICT_ALLOW else "approval timed out",
        )
        if verdict == c_pb2.VERDICT_ALLOW:
            response.grant.payload = b"grant:approved"
        return response

    async def ResolveApproval(
        self, request: d_pb2.ResolveApprovalRequest, context: Ctx
    ) -> d_pb2.ResolveApprovalResponse:
        metadata = dict(context.invocation_metadata() or ())
        if metadata.get("authorization") != "Bearer admin":
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "ResolveApproval is admin-only")
        future = self.approvals.get(request.approval_id)
        if future is None or future.done():
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "already resolved")
        assert future is not None
        allowed = request.resolution != d_pb2.RESOLUTION_DENY
        future.set_result(c_pb2.VERDICT_ALLOW if allowed else c_pb2.VERDICT_DENY)
        return d_pb2.ResolveApprovalResponse(
            note="allowed once, no session grant made"
            if request.resolution == d_pb2.RESOLUTION_ALWAYS_ALLOW
            else "",
            approval=d_pb2.Approval(
                approval_id=request.approval_id,
                state=d_pb2.APPROVAL_STATE_ALLOWED if allowed else d_pb2.APPROVAL_STATE_DENIED,
                resolver=request.resolver,
            ),
        )

    async def CreateSession(
        self, request: d_pb2.CreateSessionRequest, context: Ctx
    ) -> d_pb2.CreateSessionResponse:
        self.sessions.append(request)
        return d_pb2.CreateSessionResponse(session=d_pb2.Session(session_id=request.session_id))


ExecBehaviour = Callable[[c_pb2.ToolCall, "FakeExecutor"], Awaitable[x_pb2.ExecuteResult]]


class FakeExecutor(x_grpc.ExecutorServiceServicer):
    """Inspects nothing; executes by a per-tool behaviour (default: echo the arguments)."""

    def __init__(self) -> None:
        self.behaviours: dict[str, ExecBehaviour] = {}
        self.executed: list[x_pb2.ExecuteRequest] = []
        self.inspected: list[c_pb2.ToolCall] = []
        self.cancelled: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.finished: list[str] = []
        self.inspect_fails = False
        self.aborts: dict[str, tuple[grpc.StatusCode, str, bool]] = {}
        """Per tool: end Execute with (code, details), after one output chunk if True."""

    async def Inspect(self, request: x_pb2.InspectRequest, context: Ctx) -> x_pb2.InspectResponse:
        if self.inspect_fails:
            await context.abort(grpc.StatusCode.INTERNAL, "inspector broke")
        self.inspected.append(request.call)
        return x_pb2.InspectResponse(inspection=d_pb2.ToolInspection(read_only=True))

    async def Execute(
        self, request: x_pb2.ExecuteRequest, context: Ctx
    ) -> AsyncIterator[x_pb2.ExecuteResponse]:
        self.executed.append(request)
        abort = self.aborts.get(request.call.tool_name)
        if abort is not None:
            code, details, after_a_chunk = abort
            if after_a_chunk:
                yield x_pb2.ExecuteResponse(chunk=x_pb2.OutputChunk(data="partial"))
            await context.abort(code, details)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            behaviour = self.behaviours.get(request.call.tool_name)
            if behaviour is None:
                result = x_pb2.ExecuteResult(
                    status=x_pb2.EXECUTION_STATUS_OK,
                    content=f"{request.call.tool_name} {args_of(request.call)}",
                )
            else:
                result = await behaviour(request.call, self)
            self.finished.append(request.call.call_id)
        finally:
            self.in_flight -= 1
        yield x_pb2.ExecuteResponse(result=result)

    async def Cancel(self, request: x_pb2.CancelRequest, context: Ctx) -> x_pb2.CancelResponse:
        self.cancelled.append(request.call_id)
        return x_pb2.CancelResponse(found=True)


@dataclass
class ListProvider:
    """A provider answering a fixed list of turns (then a final text), recording requests."""

    turns: list[ModelTurn]
    requests: list[tuple[list[Message], bool]] = field(default_factory=list)
    tools: list[list[ToolSchema]] = field(default_factory=list)
    """The tools offered with each request."""
    summary: str | None = None
    block: asyncio.Event | None = None

    async def complete(
        self, messages: list[Message], tools: list[ToolSchema], *, allow_tools: bool = True
    ) -> ModelTurn:
        self.requests.append((list(messages), allow_tools))
        self.tools.append(list(tools))
        if self.block is not None:
            await self.block.wait()
        if messages and messages[0].content.startswith("Summarise the conversation"):
            if self.summary is None:
                raise RuntimeError("summariser down")
            return ModelTurn(text=self.summary)
        if not allow_tools:
            return ModelTurn(text="forced final answer")
        if self.turns:
            return self.turns.pop(0)
        return ModelTurn(text="done")


@dataclass
class Sink:
    """Collects audit events."""

    events: list[audit_pb2.AuditEvent] = field(default_factory=list)

    def enqueue(self, event: audit_pb2.AuditEvent) -> None:
        self.events.append(event)


@dataclass
class Harness:
    """One agent core wired to the fakes."""

    decision: FakeDecision
    executor: FakeExecutor
    sink: Sink
    decision_address: str
    executor_address: str
    channels: list[grpc.aio.Channel]

    def core(
        self,
        provider: Any,
        *,
        registry: ToolRegistry | None = None,
        hooks: list[Hook] | None = None,
        limits: LimitSettings | None = None,
        decision_address: str | None = None,
        decide_deadline_s: float = 2.0,
        tool_providers: dict[str, ToolProviderClient] | None = None,
        tracer: Any = None,
        skills: SkillLibrary | None = None,
        memory: MemoryStore | None = None,
        tool_timeout_s: float = 130.0,
        audit: Any = None,
    ) -> AgentCore:
        decision_ch = grpc.aio.insecure_channel(decision_address or self.decision_address)
        executor_ch = grpc.aio.insecure_channel(self.executor_address)
        self.channels += [decision_ch, executor_ch]
        return AgentCore(
            decision=DecisionClient(decision_ch, decide_deadline_s=decide_deadline_s),
            executor=ExecutorClient(executor_ch),
            audit=self.sink if audit is None else audit,
            provider_for=lambda _script: provider,
            registry=registry,
            hooks=hooks or [],
            limits=limits,
            tool_providers=tool_providers,
            tracer=tracer,
            skills=skills,
            memory=memory,
            tool_timeout_s=tool_timeout_s,
        )


async def run(
    core: AgentCore, message: str = "go", session_id: str = "s1", **kw: Any
) -> list[a_pb2.RunTurnResponse]:
    """Run a turn and collect its events."""
    return [event_to_pb(event) async for event in core.run_turn(session_id, message, **kw)]


def kinds(events: list[a_pb2.RunTurnResponse]) -> list[str]:
    """The oneof names of ``events``."""
    return [str(e.WhichOneof("event")) for e in events]


def finished(events: list[a_pb2.RunTurnResponse]) -> dict[str, a_pb2.ToolCallFinishedEvent]:
    """tool_call_finished events by call id."""
    return {
        e.tool_call_finished.call_id: e.tool_call_finished
        for e in events
        if e.WhichOneof("event") == "tool_call_finished"
    }


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    decision = FakeDecision()  # type: ignore[abstract]
    executor = FakeExecutor()  # type: ignore[abstract]
    server = grpc.aio.server()
    d_grpc.add_DecisionServiceServicer_to_server(decision, server)
    x_grpc.add_ExecutorServiceServicer_to_server(executor, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{port}"
    h = Harness(decision, executor, Sink(), address, address, [])
    yield h
    for channel in h.channels:
        await channel.close(None)
    await server.stop(None)
