"""DecisionService: maps protobuf to the decision core and back (kept thin).

First cut (foundation): rules from environment variables, DENY > ASK > ALLOW by effect,
tool-level DENY/ASK from the executor's inspection, default ALLOW. Sessions, approvals,
grants and the full precedence pipeline come with the decision issue; their RPCs answer
UNIMPLEMENTED with a message until then.
"""

from __future__ import annotations

import fnmatch
import hashlib
from typing import Any

import grpc
from google.protobuf import json_format

from stockade.decision.settings import DecisionSettings
from stockade.errors import InvalidArgument, NotImplementedYet
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

CONTENT_FIELDS = ("command", "file_path", "path", "pattern", "url")


def _matches(pattern: str, tool: str, args: dict[str, Any]) -> bool:
    name, _, rest = pattern.partition("(")
    if name not in ("*", tool):
        return False
    if not rest:
        return True
    content = rest[:-1] if rest.endswith(")") else rest
    values = [str(args[f]) for f in CONTENT_FIELDS if f in args]
    glob = content if "*" in content else f"*{content}*"
    return any(fnmatch.fnmatchcase(v, glob) for v in values)


class DecisionServicer(d_grpc.DecisionServiceServicer):
    """First-cut Decide over environment rules."""

    def __init__(self, settings: DecisionSettings) -> None:
        self.settings = settings
        self.rules = (
            [(c_pb2.RULE_EFFECT_DENY, p) for p in settings.deny]
            + [(c_pb2.RULE_EFFECT_ASK, p) for p in settings.ask]
            + [(c_pb2.RULE_EFFECT_ALLOW, p) for p in settings.allow]
        )
        self.version = hashlib.sha256(repr(self.rules).encode()).hexdigest()[:16]

    async def Decide(  # noqa: N802 - generated name
        self, request: d_pb2.DecideRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> d_pb2.DecideResponse:
        call = request.call
        if not call.tool_name:
            raise InvalidArgument("call.tool_name is required")
        args = json_format.MessageToDict(call.arguments)
        candidates = [
            c_pb2.Rule(effect=e, pattern=p, source=c_pb2.RULE_SOURCE_ENV)
            for e, p in self.rules
            if _matches(p, call.tool_name, args)
        ] + list(request.inspection.tool_rules)
        order = {c_pb2.RULE_EFFECT_DENY: 0, c_pb2.RULE_EFFECT_ASK: 1, c_pb2.RULE_EFFECT_ALLOW: 2}
        candidates.sort(key=lambda r: order.get(r.effect, 3))
        if candidates:
            winner, others = candidates[0], candidates[1:]
        else:
            winner = c_pb2.Rule(
                effect=c_pb2.RULE_EFFECT_ALLOW, pattern="*", source=c_pb2.RULE_SOURCE_DEFAULT
            )
            others = []
        verdict = {
            c_pb2.RULE_EFFECT_DENY: c_pb2.VERDICT_DENY,
            c_pb2.RULE_EFFECT_ASK: c_pb2.VERDICT_ASK,
            c_pb2.RULE_EFFECT_ALLOW: c_pb2.VERDICT_ALLOW,
        }[winner.effect]
        return d_pb2.DecideResponse(
            verdict=verdict,
            reason=winner.reason
            or f"{c_pb2.RuleEffect.Name(winner.effect)[12:]} by {winner.pattern}",
            winning_rule=winner,
            conflicts=[d_pb2.Conflict(rule=r, note="overridden") for r in others],
            policy_version=self.version,
            explanation=request.inspection.explanation,
            mode=c_pb2.PERMISSION_MODE_DEFAULT,
        )


def _unimplemented(rpc: str) -> Any:
    async def handler(self: DecisionServicer, request: Any, context: Any) -> Any:
        raise NotImplementedYet(f"DecisionService.{rpc} is not built yet (see README status table)")

    return handler


for _rpc in (
    "CreateSession GetSession DeleteSession AddRule RemoveRule ListRules SetMode "
    "WatchApprovals ResolveApproval AwaitApproval ListGrants RevokeGrant LintPolicy"
).split():
    setattr(DecisionServicer, _rpc, _unimplemented(_rpc))
