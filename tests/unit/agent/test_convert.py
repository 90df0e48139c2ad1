"""The agent's typed events and domain enums, mapped to and from protobuf."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from stockade.agent import events as ev
from stockade.agent.convert import (
    MAX_MESSAGE_CHARS,
    approval_answer_from_pb,
    event_to_pb,
    status_from_pb,
    status_to_pb,
    termination_to_pb,
    turn_request_from_pb,
    verdict_from_pb,
    verdict_to_pb,
)
from stockade.agent.limits import Termination
from stockade.agent.outcome import ExecutionStatus, Verdict
from stockade.errors import InvalidArgument
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

CALL = ev.CallInfo("c1", "read_file", {"file_path": "a.txt"}, "s1", "lead")

#: One example of every event class, with the oneof field it must fill.
EXAMPLES: list[tuple[ev.AgentEvent, str]] = [
    (ev.Text("hello"), "text"),
    (ev.ToolCallStarted(CALL), "tool_call_started"),
    (
        ev.ToolCallFinished(
            "c1",
            "read_file",
            ExecutionStatus.REFUSED,
            Verdict.DENY,
            "Denied: no",
            c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, pattern="read_file(.env)"),
            "no",
            12,
        ),
        "tool_call_finished",
    ),
    (
        ev.PermissionRequested(
            "ap-1",
            CALL,
            "asks",
            c_pb2.Explanation(risk=c_pb2.RISK_LEVEL_HIGH, summary="risky"),
            True,
        ),
        "permission_requested",
    ),
    (ev.PermissionResolved("ap-1", Verdict.ALLOW, "ok"), "permission_resolved"),
    (ev.SubagentStarted("sub-1", "explore", "look"), "subagent_started"),
    (ev.SubagentStopped("sub-1", Termination.MAX_STEPS, "partial"), "subagent_stopped"),
    (ev.StepComplete(2, 300), "step_complete"),
    (ev.Compaction("auto", 900, 100), "compaction"),
    (ev.FinalAnswer("done"), "final_answer"),
    (ev.Terminated(Termination.DENIAL_HALT, "limit"), "terminated"),
    (ev.Error("broken"), "error"),
    # Empty values must still select their oneof field.
    (ev.Text(""), "text"),
    (ev.FinalAnswer(""), "final_answer"),
    (ev.Error(""), "error"),
]


def test_every_stream_message_kind_has_exactly_one_event_class() -> None:
    oneof = a_pb2.RunTurnResponse.DESCRIPTOR.oneofs_by_name["event"]
    kinds = {field.name for field in oneof.fields}
    classes = set(typing.get_args(ev.AgentEvent))
    assert {kind for _, kind in EXAMPLES} == kinds
    assert {type(event) for event, _ in EXAMPLES} == classes
    assert len(classes) == len(kinds)


@pytest.mark.parametrize(("event", "kind"), EXAMPLES, ids=lambda x: getattr(x, "__name__", None))
def test_each_event_fills_its_oneof_field(event: ev.AgentEvent, kind: str) -> None:
    message = event_to_pb(ev.TurnEvent(7, "s1", "sub-1", 1_700_000_000_123_456_789, event))
    assert message.WhichOneof("event") == kind
    assert (message.sequence, message.session_id, message.agent_name) == (7, "s1", "sub-1")
    assert message.time.ToNanoseconds() == 1_700_000_000_123_456_789


def test_event_fields_reach_the_message() -> None:
    finished = event_to_pb(ev.TurnEvent(1, "s", "lead", 0, EXAMPLES[2][0])).tool_call_finished
    assert finished.status == x_pb2.EXECUTION_STATUS_REFUSED
    assert finished.verdict == c_pb2.VERDICT_DENY
    assert finished.winning_rule.pattern == "read_file(.env)"
    assert (finished.content, finished.reason, finished.elapsed_ms) == ("Denied: no", "no", 12)
    requested = event_to_pb(ev.TurnEvent(1, "s", "lead", 0, EXAMPLES[3][0])).permission_requested
    assert requested.call.tool_name == "read_file" and requested.call.session_id == "s1"
    assert dict(requested.call.arguments) == {"file_path": "a.txt"}
    assert requested.explanation.risk == c_pb2.RISK_LEVEL_HIGH and requested.always_allow_applies
    stopped = event_to_pb(ev.TurnEvent(1, "s", "lead", 0, EXAMPLES[6][0])).subagent_stopped
    assert stopped.reason == a_pb2.TERMINATION_REASON_MAX_STEPS


def test_event_classes_are_frozen() -> None:
    text = ev.Text("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        text.text = "b"  # type: ignore[misc]


@pytest.mark.parametrize("reason", list(Termination))
def test_every_termination_has_its_protobuf_reason(reason: Termination) -> None:
    assert a_pb2.TerminationReason.Name(termination_to_pb(reason)) == (
        f"TERMINATION_REASON_{reason.value}"
    )


@pytest.mark.parametrize("verdict", list(Verdict))
def test_verdicts_round_trip(verdict: Verdict) -> None:
    assert verdict_from_pb(verdict_to_pb(verdict)) is verdict
    assert c_pb2.Verdict.Name(verdict_to_pb(verdict)) == f"VERDICT_{verdict.value}"


@pytest.mark.parametrize("status", list(ExecutionStatus))
def test_statuses_round_trip(status: ExecutionStatus) -> None:
    assert status_from_pb(status_to_pb(status)) is status
    assert x_pb2.ExecutionStatus.Name(status_to_pb(status)) == f"EXECUTION_STATUS_{status.value}"


def test_unknown_protobuf_values_never_read_as_success() -> None:
    assert verdict_from_pb(99) is Verdict.UNSPECIFIED
    assert status_from_pb(99) is ExecutionStatus.ERROR


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        (a_pb2.RunTurnRequest(session_id="s1", message="   "), "message must not be empty"),
        (a_pb2.RunTurnRequest(session_id="a/b", message="hi"), "session_id"),
        (a_pb2.RunTurnRequest(session_id="x" * 129, message="hi"), "session_id"),
        (
            a_pb2.RunTurnRequest(session_id="s1", message="x" * (MAX_MESSAGE_CHARS + 1)),
            "longer than",
        ),
    ],
)
def test_bad_turn_requests_are_invalid(request_: a_pb2.RunTurnRequest, fragment: str) -> None:
    with pytest.raises(InvalidArgument, match=fragment):
        turn_request_from_pb(request_)


def test_turn_request_gets_a_session_when_none_is_given() -> None:
    request = a_pb2.RunTurnRequest(message="hi", mode=c_pb2.PERMISSION_MODE_PLAN, script="x")
    turn = turn_request_from_pb(request)
    assert turn.session_id.startswith("s-") and len(turn.session_id) == 14
    assert (turn.message, turn.script, turn.mode) == ("hi", "x", c_pb2.PERMISSION_MODE_PLAN)


def test_approval_answers_are_checked_and_forwarded_whole() -> None:
    with pytest.raises(InvalidArgument, match="approval_id"):
        approval_answer_from_pb(a_pb2.ResolveAgentApprovalRequest())
    with pytest.raises(InvalidArgument, match="resolution"):
        approval_answer_from_pb(a_pb2.ResolveAgentApprovalRequest(approval_id="ap"))
    request = a_pb2.ResolveAgentApprovalRequest(
        approval_id="ap",
        resolution=d_pb2.RESOLUTION_ALWAYS_ALLOW,
        resolver="bot",
        scope=d_pb2.GrantScope(remaining_uses=3),
    )
    forward = approval_answer_from_pb(request)
    assert (forward.approval_id, forward.resolution, forward.resolver) == (
        "ap",
        d_pb2.RESOLUTION_ALWAYS_ALLOW,
        "bot",
    )
    assert forward.scope.remaining_uses == 3
    assert not approval_answer_from_pb(
        a_pb2.ResolveAgentApprovalRequest(approval_id="ap", resolution=d_pb2.RESOLUTION_DENY)
    ).HasField("scope")
