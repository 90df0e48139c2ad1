"""Server interceptors shared by every service.

``ContextInterceptor`` checks each request (``stockade.server.requests``: bytes that do
not parse, enum values out of range, over-long identifiers → INVALID_ARGUMENT), gives each
call a request id (from ``x-request-id`` metadata or a
new one) in a context variable, applies each RPC's declared access (the caller's mTLS
identity, admin rights: ``stockade.server.access``), and maps exceptions to statuses: a
``StockadeError``
becomes its canonical code with ``google.rpc.ErrorInfo``; anything else becomes INTERNAL
with the request id and no internals, while the traceback goes to the server log. So
servicers hold no error or logging boilerplate.
"""

from __future__ import annotations

import contextvars
import inspect
import itertools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from stockade.errors import InvalidArgument, NotAuthorized, StockadeError
from stockade.server.access import ADMIN_KINDS, Access, AdminAuth, caller_var, peer_identity
from stockade.server.errors import status_for
from stockade.server.requests import Malformed, check_request, guard_deserializer

log = logging.getLogger("stockade.server")

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
"""The current call's request id (empty outside a call)."""

REQUEST_ID_KEY = "x-request-id"
_ID_PREFIX = os.urandom(4).hex()
_ID_COUNTER = itertools.count(1)


def _request_id(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY and isinstance(value, str) and 0 < len(value) <= 128:
            return value
    # A correlation id, not a secret: a per-process random prefix and a counter are unique
    # enough and cost far less than uuid4 on every call.
    return f"{_ID_PREFIX}{next(_ID_COUNTER):08x}"


async def _abort(
    context: grpc.aio.ServicerContext[Any, Any], exc: BaseException, method: str
) -> None:
    rid = request_id_var.get()
    if isinstance(exc, StockadeError):
        log.info("%s refused: %s (%s)", method, exc.message, exc.reason)
    else:
        log.error("%s failed (request id %s)", method, rid, exc_info=exc)
    status = status_for(exc, request_id=rid)
    await context.abort(status.code, status.details, status.trailing_metadata)


__all__ = ["ContextInterceptor", "MethodAccess", "peer_identity", "request_id_var"]


def _authorize(
    context: grpc.aio.ServicerContext[Any, Any], method: str, allowed: frozenset[str] | None
) -> None:
    """Refuse a caller whose certificate identity is not allowed for ``method``.

    Only enforced on mTLS servers (``allowed`` is None otherwise): without client
    certificates there is no identity, and such servers listen on loopback only.
    """
    if allowed is None:
        return
    who = peer_identity(context)
    if who not in allowed:
        raise NotAuthorized(
            f"{method} is not allowed for caller {who or '(no identity)'}",
            caller=who or "",
            method=method,
        )


@dataclass(frozen=True)
class MethodAccess:
    """One RPC's declared access and the authority that checks admin callers."""

    access: Access
    admin: AdminAuth | None = None


Admit = Callable[[grpc.aio.ServicerContext[Any, Any]], None]


def _admission(method: str, declared: MethodAccess | None) -> Admit | None:
    """What to check of the caller before ``method`` runs (None: nothing).

    Worked out once per RPC when its handler is wrapped, so an RPC open to any caller (the
    Decide hot path) pays nothing per call."""
    if declared is None or declared.access not in ADMIN_KINDS:
        return None
    # create_server refuses an admin RPC without an authority; wired by hand, such an RPC
    # still fails closed (nobody is an admin).
    auth = declared.admin or AdminAuth(())
    rpc = method.rsplit("/", 1)[-1]
    must_be_admin = declared.access is Access.ADMIN

    def admit(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        caller = auth.caller(context)
        if must_be_admin:
            caller.require_admin(rpc)
        caller_var.set(caller)

    return admit


def _checked(request: Any) -> Any:
    """The request, or ``InvalidArgument`` if it did not parse or breaks a limit."""
    if isinstance(request, Malformed):
        raise InvalidArgument(request.message)
    if request is not None and hasattr(request, "DESCRIPTOR"):
        check_request(request)
    return request


async def _checked_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """Each message of a client stream, checked as it arrives."""
    async for request in requests:
        yield _checked(request)


def _wrap_unary(
    behavior: Callable[..., Awaitable[Any]],
    method: str,
    allowed: frozenset[str] | None,
    admit: Admit | None = None,
    *,
    streaming_request: bool = False,
) -> Callable[..., Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        request_id_var.set(_request_id(context))
        try:
            _authorize(context, method, allowed)
            request = _checked_stream(request) if streaming_request else _checked(request)
            if admit is not None:
                admit(context)
            return await behavior(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, method)

    return handler


def _wrap_stream(
    behavior: Callable[..., Any],
    method: str,
    allowed: frozenset[str] | None,
    admit: Admit | None = None,
    *,
    streaming_request: bool = False,
) -> Callable[..., AsyncIterator[Any]]:
    async def handler(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        request_id_var.set(_request_id(context))
        try:
            _authorize(context, method, allowed)
            request = _checked_stream(request) if streaming_request else _checked(request)
            if admit is not None:
                admit(context)
            result = behavior(request, context)
            if inspect.isasyncgen(result):
                async for item in result:
                    yield item
            else:
                await result
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, method)

    return handler


class ContextInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Request ids, caller checks and exception → status mapping for every RPC.

    ``method_identities`` maps full method names (``/pkg.Service/Method``) to the
    certificate identities allowed to call them; it is only given on mTLS servers.
    ``method_access`` maps them to their declared access (``stockade.server.access``):
    admin RPCs refuse other callers before the servicer runs.
    """

    def __init__(
        self,
        method_identities: Mapping[str, frozenset[str]] | None = None,
        method_access: Mapping[str, MethodAccess] | None = None,
    ) -> None:
        self._identities = dict(method_identities or {})
        self._access = dict(method_access or {})
        # Registered handlers are fixed objects, so each is wrapped once, not per call.
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler, method)
        if len(self._wrapped) < 1024:  # method names come from registered services
            self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: Any, method: str) -> Any:
        allowed = self._identities.get(method)
        admit = _admission(method, self._access.get(method))
        kwargs = {
            # Bytes that do not parse become a ``Malformed`` the handler answers with
            # INVALID_ARGUMENT (a raising deserializer would give a bare UNKNOWN/INTERNAL).
            "request_deserializer": guard_deserializer(handler.request_deserializer),
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary(handler.unary_unary, method, allowed, admit), **kwargs
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_unary(handler.stream_unary, method, allowed, admit, streaming_request=True),
                **kwargs,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream, method, allowed, admit), **kwargs
            )
        behavior: Any = handler.stream_stream
        return grpc.stream_stream_rpc_method_handler(
            _wrap_stream(behavior, method, allowed, admit, streaming_request=True), **kwargs
        )
