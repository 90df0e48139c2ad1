"""Clients for the decision service, with the fail-closed rule built in.

``decide`` and ``await_approval`` never raise: if the service cannot be reached, errors or
answers after the deadline, the result is a DENY whose reason says why (SPEC §0 "fail
closed", ``stockade.client.base``). The other methods raise a
``stockade.client.errors.ServiceError`` on failure. Every method takes ``timeout=`` and
``metadata=``.
"""

from __future__ import annotations

import asyncio
import random

import grpc

from stockade.client.base import (
    DEFAULT_DEADLINE_S,
    FAIL_CLOSED,
    CallOptions,
    Metadata,
    call_options,
    deadline_s,
    fail_closed_reason,
    failure_text,
    renamed_timeout,
    service_errors,
    with_retries,
)
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

DECIDE_DEADLINE_S = 2.0
REATTACH_FIRST_DELAY_S = 0.1
"""First pause before an approval wait re-attaches after UNAVAILABLE (then doubled)."""
REATTACH_MAX_DELAY_S = 2.0
"""Longest pause between re-attach attempts."""
_REATTACH_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
"""Ends of an AwaitApproval that leave the stored approval pending: the service is down or
stopping (UNAVAILABLE), or it stopped with the wait received and not yet started, which
the server cancels (CANCELLED; a wait this client cancels raises CancelledError instead).
Waiting again is idempotent, so the client re-attaches rather than denying."""


def fail_closed(reason: str) -> d_pb2.DecideResponse:
    """The DENY a caller must act on when no decision could be obtained."""
    return d_pb2.DecideResponse(
        verdict=c_pb2.VERDICT_DENY,
        reason=f"{FAIL_CLOSED}: {reason}",
        winning_rule=c_pb2.Rule(
            effect=c_pb2.RULE_EFFECT_DENY,
            pattern="*",
            source=c_pb2.RULE_SOURCE_DEFAULT,
            reason="the decision service could not decide",
        ),
        explanation=c_pb2.Explanation(risk=c_pb2.RISK_LEVEL_HIGH, summary=reason),
    )


def _describe(err: grpc.RpcError) -> str:
    return failure_text("decision", err)


class DecisionClient:
    """Async client for DecisionService."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        decide_deadline_s: float = DECIDE_DEADLINE_S,
        admin_token: str = "",
    ) -> None:
        self._stub = d_grpc.DecisionServiceStub(channel)
        self._decide_deadline = decide_deadline_s
        self._metadata = (("authorization", f"Bearer {admin_token}"),) if admin_token else ()

    @property
    def stub(self) -> d_grpc.DecisionServiceStub:
        """The raw stub, for RPCs without a wrapper."""
        return self._stub

    def _options(
        self, timeout: float | None, metadata: Metadata | None, default_s: float
    ) -> CallOptions:
        return call_options(timeout, metadata, default_s=default_s, own=self._metadata)

    async def decide(
        self,
        request: d_pb2.DecideRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.DecideResponse:
        """Decide a call; any failure to decide is a DENY (fail closed)."""
        options = self._options(timeout, metadata, self._decide_deadline)
        try:
            response: d_pb2.DecideResponse = await self._stub.Decide(request, **options)
        except grpc.aio.AioRpcError as err:
            return fail_closed(_describe(err))
        if response.verdict == c_pb2.VERDICT_UNSPECIFIED:
            return fail_closed("the decision service returned no verdict")
        return response

    async def create_session(
        self,
        session_id: str = "",
        mode: int = c_pb2.PERMISSION_MODE_UNSPECIFIED,
        task: str = "",
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.Session:
        """Create (or fetch, if it exists) a session; a mode other than the default needs
        the admin token this client was given."""
        req = d_pb2.CreateSessionRequest(session_id=session_id, mode=mode, task=task)  # type: ignore[arg-type]
        options = self._options(timeout, metadata, DEFAULT_DEADLINE_S)
        with service_errors("decision"):
            resp: d_pb2.CreateSessionResponse = await with_retries(
                lambda: self._stub.CreateSession(req, **options)
            )
        return resp.session

    async def await_approval(
        self,
        approval_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        timeout_s: float | None = None,
    ) -> d_pb2.AwaitApprovalResponse:
        """Wait for an approval's answer within ``timeout`` seconds (required; ``timeout_s``
        is its deprecated name); a failure to get one is a DENY.

        The approval is stored, so a wait cut off by a restart of the decision service
        (UNAVAILABLE: killed, or told to stop and ending its waits; CANCELLED: stopped
        before the wait had started) re-attaches with
        backoff until the answer comes or the time is spent, rather than denying a call
        whose approval is still open.
        """
        budget = renamed_timeout("await_approval", timeout, "timeout_s", timeout_s)
        if budget is None:
            raise TypeError("await_approval needs timeout= (how long to wait for the answer)")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_s(budget, DEFAULT_DEADLINE_S)
        request = d_pb2.AwaitApprovalRequest(approval_id=approval_id)
        delay = REATTACH_FIRST_DELAY_S
        attempts = 0
        while True:
            attempts += 1
            try:
                resp: d_pb2.AwaitApprovalResponse = await self._stub.AwaitApproval(
                    request,
                    **self._options(max(0.001, deadline - loop.time()), metadata, budget),
                )
                return resp
            except grpc.aio.AioRpcError as err:
                left = deadline - loop.time()
                if err.code() not in _REATTACH_CODES or left <= delay:
                    return d_pb2.AwaitApprovalResponse(
                        verdict=c_pb2.VERDICT_DENY,
                        reason=fail_closed_reason("decision", err, attempts=attempts),
                    )
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, REATTACH_MAX_DELAY_S)

    async def resolve_approval(
        self,
        request: d_pb2.ResolveApprovalRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.ResolveApprovalResponse:
        """Answer an approval (raises ``ServiceError`` on failure: the resolver must know
        it did not count; ``FailedPreconditionError`` when another resolver answered first).

        ``metadata`` may carry the credentials of the person or service the caller acts
        for (the agent forwards its caller's ``authorization``): they replace this
        client's own admin token for the call."""
        with service_errors("decision"):
            resp: d_pb2.ResolveApprovalResponse = await self._stub.ResolveApproval(
                request, **self._options(timeout, metadata, DEFAULT_DEADLINE_S)
            )
        return resp


class SyncDecisionClient:
    """Blocking facade over DecisionService for callers without an event loop."""

    def __init__(self, channel: grpc.Channel, *, decide_deadline_s: float = DECIDE_DEADLINE_S):
        self._stub = d_grpc.DecisionServiceStub(channel)
        self._decide_deadline = decide_deadline_s

    def decide(
        self,
        request: d_pb2.DecideRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.DecideResponse:
        """Decide a call; any failure to decide is a DENY (fail closed)."""
        options = call_options(timeout, metadata, default_s=self._decide_deadline)
        try:
            response: d_pb2.DecideResponse = self._stub.Decide(request, **options)
        except grpc.RpcError as err:
            return fail_closed(_describe(err))
        if response.verdict == c_pb2.VERDICT_UNSPECIFIED:
            return fail_closed("the decision service returned no verdict")
        return response

    def get_session(
        self,
        session_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.Session:
        """Fetch a session (raises ``ServiceError`` on failure, ``NotFoundError`` for an
        unknown session)."""
        with service_errors("decision"):
            resp: d_pb2.GetSessionResponse = self._stub.GetSession(
                d_pb2.GetSessionRequest(session_id=session_id),
                **call_options(timeout, metadata, default_s=DEFAULT_DEADLINE_S),
            )
        return resp.session
