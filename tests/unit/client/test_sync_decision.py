"""The sync facade of the decision client, against grpc_testing's in-process channel."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import grpc_testing

from stockade.client.decision import SyncDecisionClient
from stockade.client.errors import NotFoundError, ServiceError
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

SERVICE = d_pb2.DESCRIPTOR.services_by_name["DecisionService"]
DECIDE = SERVICE.methods_by_name["Decide"]


def _call_in_thread(fn):  # type: ignore[no-untyped-def]
    pool = ThreadPoolExecutor(max_workers=1)
    return pool, pool.submit(fn)


def _request() -> d_pb2.DecideRequest:
    return d_pb2.DecideRequest(call=c_pb2.ToolCall(call_id="c1", tool_name="read_file"))


def test_decide_passes_the_answer_through() -> None:
    channel = grpc_testing.channel([SERVICE], grpc_testing.strict_real_time())
    client = SyncDecisionClient(channel)
    pool, future = _call_in_thread(lambda: client.decide(_request()))
    _, request, rpc = channel.take_unary_unary(DECIDE)
    assert request.call.call_id == "c1"
    rpc.terminate(
        d_pb2.DecideResponse(verdict=c_pb2.VERDICT_ALLOW, reason="allowed by read_file"),
        (),
        grpc.StatusCode.OK,
        "",
    )
    response = future.result(timeout=5)
    pool.shutdown()
    assert response.verdict == c_pb2.VERDICT_ALLOW
    assert response.reason == "allowed by read_file"


def test_decide_fails_closed_on_error() -> None:
    channel = grpc_testing.channel([SERVICE], grpc_testing.strict_real_time())
    client = SyncDecisionClient(channel)
    pool, future = _call_in_thread(lambda: client.decide(_request()))
    _, _, rpc = channel.take_unary_unary(DECIDE)
    rpc.terminate(d_pb2.DecideResponse(), (), grpc.StatusCode.UNAVAILABLE, "connection refused")
    response = future.result(timeout=5)
    pool.shutdown()
    assert response.verdict == c_pb2.VERDICT_DENY
    assert "fail closed" in response.reason and "UNAVAILABLE" in response.reason
    assert response.winning_rule.effect == c_pb2.RULE_EFFECT_DENY


def test_decide_fails_closed_on_missing_verdict() -> None:
    channel = grpc_testing.channel([SERVICE], grpc_testing.strict_real_time())
    client = SyncDecisionClient(channel)
    pool, future = _call_in_thread(lambda: client.decide(_request()))
    _, _, rpc = channel.take_unary_unary(DECIDE)
    rpc.terminate(d_pb2.DecideResponse(), (), grpc.StatusCode.OK, "")
    response = future.result(timeout=5)
    pool.shutdown()
    assert response.verdict == c_pb2.VERDICT_DENY
    assert "no verdict" in response.reason


def test_get_session_raises_errors() -> None:
    channel = grpc_testing.channel([SERVICE], grpc_testing.strict_real_time())
    client = SyncDecisionClient(channel)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            client.get_session("nope")
        except ServiceError as err:
            errors.append(err)

    t = threading.Thread(target=run)
    t.start()
    _, request, rpc = channel.take_unary_unary(SERVICE.methods_by_name["GetSession"])
    assert request.session_id == "nope"
    rpc.terminate(d_pb2.GetSessionResponse(), (), grpc.StatusCode.NOT_FOUND, "no session nope")
    t.join(5)
    assert len(errors) == 1
    # The typed error, not grpc's: the status code's name and the server's message.
    error = errors[0]
    assert isinstance(error, NotFoundError)
    assert (error.service, error.code, error.details) == (
        "decision",
        "NOT_FOUND",
        "no session nope",
    )
    assert str(error) == "decision service NOT_FOUND: no session nope"
