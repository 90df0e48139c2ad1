"""Sync facades of the executor and agent clients, against grpc_testing channels."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import grpc_testing

from stockade.client.agent import SyncAgentClient
from stockade.client.executor import SyncExecutorClient
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

X = x_pb2.DESCRIPTOR.services_by_name["ExecutorService"]
A = a_pb2.DESCRIPTOR.services_by_name["AgentService"]


def test_inspect_returns_the_inspection() -> None:
    channel = grpc_testing.channel([X], grpc_testing.strict_real_time())
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(
            SyncExecutorClient(channel).inspect,
            x_pb2.InspectRequest(call=c_pb2.ToolCall(call_id="c", tool_name="read_file")),
        )
        _, request, rpc = channel.take_unary_unary(X.methods_by_name["Inspect"])
        assert request.call.tool_name == "read_file"
        rule = c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, reason="outside the roots")
        rpc.terminate(
            x_pb2.InspectResponse(inspection=d_pb2.ToolInspection(tool_rules=[rule])),
            (),
            grpc.StatusCode.OK,
            "",
        )
        inspection = future.result(timeout=5)
    assert inspection.tool_rules[0].reason == "outside the roots"


def test_run_turn_yields_the_streamed_events() -> None:
    channel = grpc_testing.channel([A], grpc_testing.strict_real_time())
    got: list[a_pb2.RunTurnResponse] = []

    def consume() -> None:
        got.extend(
            SyncAgentClient(channel).run_turn(a_pb2.RunTurnRequest(session_id="s", message="hi"))
        )

    t = threading.Thread(target=consume)
    t.start()
    _, request, rpc = channel.take_unary_stream(A.methods_by_name["RunTurn"])
    assert request.message == "hi"
    rpc.send_response(a_pb2.RunTurnResponse(sequence=1, text=a_pb2.TextEvent(text="hello")))
    rpc.send_response(
        a_pb2.RunTurnResponse(
            sequence=2,
            terminated=a_pb2.TerminatedEvent(reason=a_pb2.TERMINATION_REASON_COMPLETED),
        )
    )
    rpc.terminate((), grpc.StatusCode.OK, "")
    t.join(5)
    assert [e.WhichOneof("event") for e in got] == ["text", "terminated"]
