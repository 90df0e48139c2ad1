"""DecisionService: maps protobuf to ``DecisionCore`` and back, and nothing else.

Every RPC is one core method. Who may call which RPC is declared in ``ACCESS`` and
enforced before a handler runs (``stockade.server.access``): admin RPCs (DeleteSession,
AddRule, RemoveRule, SetMode, ResolveApproval, RevokeGrant) need an authorised caller, a
named bearer token or an admin mTLS identity; CreateSession needs one only for a mode
other than the configured default. Decide and the read-only RPCs do not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import grpc

from stockade.decision.convert import (
    VERDICT_TO_PB,
    approval_to_pb,
    call_from_pb,
    decide_response,
    effect_from_pb,
    grant_record_to_pb,
    grant_to_pb,
    hooks_from_pb,
    lint_finding_to_pb,
    mode_from_pb,
    resolution_from_pb,
    rule_to_pb,
    scope_from_pb,
    session_to_pb,
)
from stockade.decision.core import DecisionCore
from stockade.decision.facts import facts_from_pb
from stockade.server.access import Access, current_caller
from stockade.server.lifecycle import until_stopping
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class DecisionServicer(d_grpc.DecisionServiceServicer):
    """The decision service over gRPC."""

    ACCESS: ClassVar[Mapping[str, Access]] = {
        "Decide": Access.ANY_CALLER,
        "CreateSession": Access.ADMIN_FOR_SOME_REQUESTS,
        "GetSession": Access.ANY_CALLER,
        "DeleteSession": Access.ADMIN,
        "AddRule": Access.ADMIN,
        "RemoveRule": Access.ADMIN,
        "ListRules": Access.ANY_CALLER,
        "SetMode": Access.ADMIN,
        "WatchApprovals": Access.ANY_CALLER,
        "ResolveApproval": Access.ADMIN,
        "AwaitApproval": Access.ANY_CALLER,
        "ListGrants": Access.ANY_CALLER,
        "RevokeGrant": Access.ADMIN,
        "LintPolicy": Access.ANY_CALLER,
    }
    """Who may call each RPC (X-3, DEC-6 rev 2)."""

    def __init__(self, core: DecisionCore) -> None:
        self.core = core

    async def Decide(self, request: d_pb2.DecideRequest, context: Context) -> d_pb2.DecideResponse:
        call = request.call
        signals = request.hook_signals
        outcome = await self.core.decide(
            call_from_pb(call),
            facts_from_pb(call.tool_name, request),
            hooks_from_pb(signals) if signals else (),
        )
        return decide_response(outcome)

    async def CreateSession(
        self, request: d_pb2.CreateSessionRequest, context: Context
    ) -> d_pb2.CreateSessionResponse:
        mode = (
            None
            if request.mode == c_pb2.PERMISSION_MODE_UNSPECIFIED
            else mode_from_pb(request.mode)
        )
        rec = await self.core.create_session(
            request.session_id, mode, request.task, current_caller()
        )
        return d_pb2.CreateSessionResponse(session=session_to_pb(rec))

    async def GetSession(
        self, request: d_pb2.GetSessionRequest, context: Context
    ) -> d_pb2.GetSessionResponse:
        rec = await self.core.get_session(request.session_id)
        return d_pb2.GetSessionResponse(session=session_to_pb(rec))

    async def DeleteSession(
        self, request: d_pb2.DeleteSessionRequest, context: Context
    ) -> d_pb2.DeleteSessionResponse:
        return d_pb2.DeleteSessionResponse(
            deleted=await self.core.delete_session(request.session_id)
        )

    async def AddRule(
        self, request: d_pb2.AddRuleRequest, context: Context
    ) -> d_pb2.AddRuleResponse:
        rule = await self.core.add_rule(
            request.session_id,
            effect_from_pb(request.rule.effect),
            request.rule.pattern,
            request.rule.reason,
            request.request_id,
        )
        return d_pb2.AddRuleResponse(rule=rule_to_pb(rule))

    async def RemoveRule(
        self, request: d_pb2.RemoveRuleRequest, context: Context
    ) -> d_pb2.RemoveRuleResponse:
        removed = await self.core.remove_rule(request.session_id, request.rule_id)
        return d_pb2.RemoveRuleResponse(removed=removed)

    async def ListRules(
        self, request: d_pb2.ListRulesRequest, context: Context
    ) -> d_pb2.ListRulesResponse:
        rules, version = await self.core.list_rules(request.session_id, request.include_policy)
        return d_pb2.ListRulesResponse(rules=[rule_to_pb(r) for r in rules], policy_version=version)

    async def SetMode(
        self, request: d_pb2.SetModeRequest, context: Context
    ) -> d_pb2.SetModeResponse:
        rec = await self.core.set_mode(request.session_id, mode_from_pb(request.mode))
        return d_pb2.SetModeResponse(session=session_to_pb(rec))

    async def WatchApprovals(
        self, request: d_pb2.WatchApprovalsRequest, context: Context
    ) -> AsyncIterator[d_pb2.WatchApprovalsResponse]:
        # Headers go out at once, so a watcher knows its stream is established even while
        # nothing is pending (the console reports itself ready only then).
        await context.send_initial_metadata(())
        async for rec in until_stopping(self.core.watch_approvals(request.session_id)):
            yield d_pb2.WatchApprovalsResponse(approval=approval_to_pb(rec))

    async def ResolveApproval(
        self, request: d_pb2.ResolveApprovalRequest, context: Context
    ) -> d_pb2.ResolveApprovalResponse:
        rec, grant, note = await self.core.resolve_approval(
            request.approval_id,
            resolution_from_pb(request.resolution),
            current_caller(),
            reason=request.reason,
            typed_resolver=request.resolver,
            scope=scope_from_pb(request),
        )
        resp = d_pb2.ResolveApprovalResponse(approval=approval_to_pb(rec), note=note)
        if grant is not None:
            resp.session_grant.CopyFrom(grant_record_to_pb(grant))
        return resp

    async def AwaitApproval(
        self, request: d_pb2.AwaitApprovalRequest, context: Context
    ) -> d_pb2.AwaitApprovalResponse:
        out = await self.core.await_approval(request.approval_id)
        resp = d_pb2.AwaitApprovalResponse(
            verdict=VERDICT_TO_PB[out.verdict],
            reason=out.reason,
            approval=approval_to_pb(out.approval),
        )
        grant = grant_to_pb(out.grant)
        if grant is not None:
            resp.grant.CopyFrom(grant)
        return resp

    async def ListGrants(
        self, request: d_pb2.ListGrantsRequest, context: Context
    ) -> d_pb2.ListGrantsResponse:
        grants = await self.core.list_grants(request.session_id)
        return d_pb2.ListGrantsResponse(grants=[grant_record_to_pb(g) for g in grants])

    async def RevokeGrant(
        self, request: d_pb2.RevokeGrantRequest, context: Context
    ) -> d_pb2.RevokeGrantResponse:
        return d_pb2.RevokeGrantResponse(revoked=await self.core.revoke_grant(request.grant_id))

    async def LintPolicy(
        self, request: d_pb2.LintPolicyRequest, context: Context
    ) -> d_pb2.LintPolicyResponse:
        findings, version = self.core.lint_policy(request.policy_text, request.format)
        return d_pb2.LintPolicyResponse(
            findings=[lint_finding_to_pb(f) for f in findings], policy_version=version
        )
