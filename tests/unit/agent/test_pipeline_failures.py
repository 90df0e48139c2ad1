"""How a failed Execute ends a call, read from the clients' typed errors (the pipeline no
longer sees gRPC): over real gRPC servers, each failure the executor can answer with.

- refused by the executor (PERMISSION_DENIED) → REFUSED, the outcome known (nothing ran);
- the stream broke after the call began (UNAVAILABLE, CANCELLED, UNKNOWN after a chunk)
  → outcome unknown: the tool may have run, and the audit row says UNKNOWN;
- the same codes before anything arrived, or any other code → ERROR, outcome known;
- the deadline passed (test_audit_reliability) → outcome unknown.
"""

from __future__ import annotations

import grpc
import pytest

from stockade.llm.base import ModelToolCall, ModelTurn
from stockade.v1 import audit_service_pb2 as audit_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.unit.agent.conftest import Harness, ListProvider, finished, run

CASES = [
    # code, after a chunk, status, unknown
    (grpc.StatusCode.PERMISSION_DENIED, False, x_pb2.EXECUTION_STATUS_REFUSED, False),
    (grpc.StatusCode.UNAUTHENTICATED, False, x_pb2.EXECUTION_STATUS_REFUSED, False),
    (grpc.StatusCode.UNAVAILABLE, True, x_pb2.EXECUTION_STATUS_ERROR, True),
    (grpc.StatusCode.CANCELLED, True, x_pb2.EXECUTION_STATUS_ERROR, True),
    (grpc.StatusCode.UNKNOWN, True, x_pb2.EXECUTION_STATUS_ERROR, True),
    (grpc.StatusCode.UNAVAILABLE, False, x_pb2.EXECUTION_STATUS_ERROR, False),
    (grpc.StatusCode.INVALID_ARGUMENT, False, x_pb2.EXECUTION_STATUS_ERROR, False),
    (grpc.StatusCode.INTERNAL, True, x_pb2.EXECUTION_STATUS_ERROR, False),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, False, x_pb2.EXECUTION_STATUS_ERROR, False),
]


@pytest.mark.parametrize(
    ("code", "after_a_chunk", "status", "unknown"),
    CASES,
    ids=[f"{c.name}-{'mid' if a else 'before'}" for c, a, _, _ in CASES],
)
async def test_a_failed_execute_ends_the_call_as_the_failure_says(
    harness: Harness,
    code: grpc.StatusCode,
    after_a_chunk: bool,
    status: x_pb2.ExecutionStatus.ValueType,
    unknown: bool,
) -> None:
    harness.executor.aborts["read_file"] = (code, "the executor says no", after_a_chunk)
    call = ModelToolCall("c1", "read_file", {"file_path": "a"})
    events = await run(harness.core(ListProvider([ModelTurn(tool_calls=[call])])))
    done = finished(events)["c1"]
    assert done.status == status
    assert f"executor {code.name}: the executor says no" in done.content
    assert ("outcome unknown" in done.content) is unknown
    assert ("the tool may have run" in done.reason) is unknown
    (row,) = [e for e in harness.sink.events if e.call_id == "c1"]
    if unknown:
        assert row.status == audit_pb2.AUDIT_STATUS_UNKNOWN
    else:
        assert row.status != audit_pb2.AUDIT_STATUS_UNKNOWN
        assert row.status != audit_pb2.AUDIT_STATUS_OK
