"""Every typed client method, with positional arguments that reach the server: the
tables the client tests call each method from."""

from __future__ import annotations

from typing import Any

from stockade.v1 import agent_service_pb2 as ag_pb2
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

CLIENT_CALLS: dict[str, dict[str, tuple[Any, ...]]] = {
    # client class → method → positional arguments
    "DecisionClient": {
        "decide": (d_pb2.DecideRequest(),),
        "create_session": ("s1",),
        "await_approval": ("appr-1",),
        "resolve_approval": (d_pb2.ResolveApprovalRequest(approval_id="appr-1"),),
    },
    "SyncDecisionClient": {"decide": (d_pb2.DecideRequest(),), "get_session": ("s1",)},
    "ExecutorClient": {
        "inspect": (x_pb2.InspectRequest(),),
        "execute": (x_pb2.ExecuteRequest(),),
        "cancel": ("s1", "c1"),
        "capabilities": (),
    },
    "SyncExecutorClient": {"inspect": (x_pb2.InspectRequest(),), "capabilities": ()},
    "AgentClient": {"run_turn": (ag_pb2.RunTurnRequest(),), "cancel": ("s1",)},
    "SyncAgentClient": {"run_turn": (ag_pb2.RunTurnRequest(),), "cancel": ("s1",)},
    "AuditClient": {
        "record": (au_pb2.AuditEvent(),),
        "query": (au_pb2.QueryRequest(),),
        "query_all": (au_pb2.QueryRequest(),),
        "tail": (),
        "session_metrics": ("s1",),
        "verify": (),
    },
    "SyncAuditClient": {
        "query": (au_pb2.QueryRequest(),),
        "query_all": (au_pb2.QueryRequest(),),
        "tail": (),
        "session_metrics": ("s1",),
        "verify": (),
    },
}
