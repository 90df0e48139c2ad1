"""Every typed client method raises the typed ``ServiceError`` for a failed call, never a
``grpc.RpcError`` (#13: the agent's core reads these errors without importing gRPC), over
a real gRPC server on port 0 that ends each call with the status the test asks for.

Also: the hierarchy maps every gRPC status code, an error carries the code's name and the
server's message and nothing of the call's credentials, permission answers (Decide,
AwaitApproval) still fail closed instead of raising, and the deprecated ``timeout_s=`` /
``deadline_s`` keywords warn and still work for one release.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from stockade.client import errors
from stockade.client.agent import AgentClient, SyncAgentClient
from stockade.client.audit import AuditClient, SyncAuditClient
from stockade.client.base import aio_channel, renamed_timeout, service_errors, sync_channel
from stockade.client.decision import DecisionClient, SyncDecisionClient
from stockade.client.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    ServiceError,
    UnavailableError,
)
from stockade.client.executor import ExecutorClient, SyncExecutorClient
from stockade.server.app import Registration, create_server, stop_server
from stockade.server.settings import ServerSettings
from stockade.v1 import agent_service_pb2 as ag_pb2
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.clientcalls import CLIENT_CALLS

SECRET = "Bearer s3cret-admin-token-never-in-an-error"

CLIENTS: dict[type, str] = {
    DecisionClient: "decision",
    SyncDecisionClient: "decision",
    ExecutorClient: "executor",
    SyncExecutorClient: "executor",
    AgentClient: "agent",
    SyncAgentClient: "agent",
    AuditClient: "audit",
    SyncAuditClient: "audit",
}
FAIL_CLOSED = {"DecisionClient": {"decide", "await_approval"}, "SyncDecisionClient": {"decide"}}
# Every typed method that raises (decide and await_approval fail closed instead).
CALLS = {
    cls: {m: args for m, args in methods.items() if m not in FAIL_CLOSED.get(cls, set())}
    for cls, methods in CLIENT_CALLS.items()
}
SERVICES = {
    "stockade.v1.DecisionService": d_pb2,
    "stockade.v1.ExecutorService": x_pb2,
    "stockade.v1.AgentService": ag_pb2,
    "stockade.v1.AuditService": au_pb2,
}
EXPECTED: dict[grpc.StatusCode, type[ServiceError]] = {
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDeniedError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
}


def test_every_status_code_has_its_class() -> None:
    for code in grpc.StatusCode:
        if code is grpc.StatusCode.OK:
            continue
        made = errors.service_error("decision", code.name, "why")
        assert type(made) is EXPECTED.get(code, ServiceError), code
        assert (made.service, made.code, made.details) == ("decision", code.name, "why")
        assert str(made) == f"decision service {code.name}: why"
        assert made.outcome_unknown is (code is grpc.StatusCode.DEADLINE_EXCEEDED)
    # Every code a class claims is a real status code (a misspelt one would never match).
    claimed = {c for cls in errors.ERROR_CLASSES for c in cls.codes}
    assert claimed <= set(grpc.StatusCode.__members__)
    assert claimed == {code.name for code in EXPECTED}


def test_an_error_survives_pickling_and_cuts_long_details() -> None:
    err = errors.service_error("audit", "RESOURCE_EXHAUSTED", "x" * 10_000)
    assert len(err.details) <= errors.MAX_DETAILS_CHARS
    assert "cut: 10,000 characters" in err.details
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is ResourceExhaustedError
    assert (again.service, again.code, again.details) == (err.service, err.code, err.details)


def test_the_errors_module_imports_no_grpc() -> None:
    """The published wheel's users (and the agent's core) catch these without gRPC."""
    source = inspect.getsource(errors)
    assert "import grpc" not in source and "from grpc" not in source


# -- over a real server -------------------------------------------------------------------


def _abort_code(context: Any) -> grpc.StatusCode:
    md = dict(context.invocation_metadata() or ())
    return grpc.StatusCode[str(md["x-abort"])]


def _handler(method: Any) -> grpc.RpcMethodHandler:
    """Ends the call with the status named by the request's ``x-abort`` metadata."""

    async def fail(context: Any) -> None:
        code = _abort_code(context)
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            await asyncio.sleep(30)  # the caller's own deadline passes first
        await context.abort(code, f"refused by the test ({code.name})")

    if method.server_streaming:

        async def stream(request: Any, context: Any) -> AsyncIterator[bytes]:
            if method.client_streaming:
                async for _ in request:
                    pass
            await fail(context)
            return
            yield b""

        if method.client_streaming:
            return grpc.stream_stream_rpc_method_handler(stream)
        return grpc.unary_stream_rpc_method_handler(stream)

    async def unary(request: Any, context: Any) -> bytes:
        if method.client_streaming:
            async for _ in request:
                pass
        await fail(context)
        return b""

    if method.client_streaming:
        return grpc.stream_unary_rpc_method_handler(unary)
    return grpc.unary_unary_rpc_method_handler(unary)


def _handlers(servicer: object, server: grpc.aio.Server) -> None:
    for full_name, pb2 in SERVICES.items():
        service = pb2.DESCRIPTOR.services_by_name[full_name.rsplit(".", 1)[1]]
        handlers = {method.name: _handler(method) for method in service.methods}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(full_name, handlers),)
        )


@pytest.fixture
async def server() -> AsyncIterator[str]:
    srv = await create_server(
        "refuser",
        ServerSettings(listen="127.0.0.1:0", grace_seconds=0),
        [Registration(_handlers, None, "stockade.test.Refuser")],
    )
    try:
        yield srv.address
    finally:
        await stop_server(srv)


async def _drive(result: Any) -> None:
    if inspect.isasyncgen(result):
        async for _ in result:
            pass
    elif inspect.isawaitable(result):
        await result


def _client(cls: type, address: str, ach: grpc.aio.Channel, sch: grpc.Channel) -> Any:
    is_sync = cls.__name__.startswith("Sync")
    if cls is AuditClient:
        return cls(address, channel=ach)
    if cls is SyncAuditClient:
        return cls(address)
    return cls(sch if is_sync else ach)


def _each_call(
    address: str, ach: grpc.aio.Channel, sch: grpc.Channel
) -> list[tuple[str, str, Callable[..., Any], tuple[Any, ...]]]:
    calls = []
    for cls, service in CLIENTS.items():
        client = _client(cls, address, ach, sch)
        for name, args in CALLS[cls.__name__].items():
            calls.append((f"{cls.__name__}.{name}", service, getattr(client, name), args))
    return calls


def test_every_raising_method_is_exercised() -> None:
    """A new typed method that this test does not call fails here."""
    for cls in CLIENTS:
        methods = {
            name
            for name, member in inspect.getmembers(cls)
            if not name.startswith("_")
            and name not in {"close", "stub"}
            and (inspect.isfunction(member) or inspect.isasyncgenfunction(member))
        }
        expected = set(CALLS[cls.__name__]) | FAIL_CLOSED.get(cls.__name__, set())
        assert methods == expected, cls.__name__


async def _call(
    method: Callable[..., Any], args: tuple[Any, ...], code: str, timeout: float
) -> None:
    metadata = [("x-abort", code), ("authorization", SECRET)]
    if inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method):
        await _drive(method(*args, timeout=timeout, metadata=metadata))
    else:

        def run() -> None:
            result = method(*args, timeout=timeout, metadata=metadata)
            if inspect.isgenerator(result):
                list(result)

        await asyncio.to_thread(run)


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    ],
    ids=lambda c: c.name,
)
async def test_each_method_raises_the_typed_error(server: str, code: grpc.StatusCode) -> None:
    address = server
    deadline = code is grpc.StatusCode.DEADLINE_EXCEEDED
    async with aio_channel(address) as ach:
        sch = sync_channel(address)
        try:
            for probe, service, method, args in _each_call(address, ach, sch):
                # The deadline case waits out a short timeout; the others get a long one.
                with pytest.raises(ServiceError) as caught:
                    await _call(method, args, code.name, 0.3 if deadline else 20)
                err = caught.value
                assert type(err) is EXPECTED.get(code, ServiceError), probe
                assert not isinstance(err, grpc.RpcError), probe
                assert (err.service, err.code) == (service, code.name), probe
                if not deadline:
                    assert err.details == f"refused by the test ({code.name})", probe
                assert err.outcome_unknown is deadline, probe
                # Nothing of the call's credentials is kept in the error.
                for text in (str(err), repr(err), *map(str, err.args)):
                    assert "s3cret" not in text, probe
        finally:
            sch.close()


async def test_an_unreachable_service_is_unavailable() -> None:
    address = "unix:///tmp/stockade-nobody-listens-agentshape.sock"
    async with aio_channel(address) as ach:
        with pytest.raises(UnavailableError) as caught:
            await ExecutorClient(ach).cancel("s", "c", timeout=5)
        assert caught.value.code == "UNAVAILABLE" and caught.value.service == "executor"
        # Permission answers still fail closed, never raise.
        decided = await DecisionClient(ach).decide(d_pb2.DecideRequest(), timeout=5)
        assert decided.verdict == c_pb2.VERDICT_DENY
        assert "decision service UNAVAILABLE" in decided.reason


def test_service_errors_translates_only_grpc_errors() -> None:
    with pytest.raises(ValueError), service_errors("decision"):
        raise ValueError("not a call failure")


# -- the deprecated keywords --------------------------------------------------------------


def test_renamed_timeout_warns_and_refuses_both() -> None:
    assert renamed_timeout("m", 3.0, "timeout_s", None) == 3.0
    with pytest.warns(DeprecationWarning, match=r"m\(timeout_s=...\) is deprecated"):
        assert renamed_timeout("m", None, "timeout_s", 4.0) == 4.0
    with pytest.raises(TypeError, match="give timeout= only"):
        renamed_timeout("m", 3.0, "timeout_s", 4.0)


async def test_the_old_keywords_still_work_with_a_warning(server: str) -> None:
    """await_approval, execute, run_turn (timeout_s) and verify (deadline_s) for one release."""
    address = server
    md = [("x-abort", "NOT_FOUND")]
    async with aio_channel(address) as ach:
        with pytest.warns(DeprecationWarning, match=r"await_approval\(timeout_s="):
            waited = await DecisionClient(ach).await_approval("a", timeout_s=5, metadata=md)
        assert waited.verdict == c_pb2.VERDICT_DENY  # NOT_FOUND: failed closed
        with pytest.warns(DeprecationWarning, match=r"execute\(timeout_s="):
            with pytest.raises(NotFoundError):
                await _drive(
                    ExecutorClient(ach).execute(x_pb2.ExecuteRequest(), timeout_s=5, metadata=md)
                )
        with pytest.warns(DeprecationWarning, match=r"run_turn\(timeout_s="):
            with pytest.raises(NotFoundError):
                await _drive(
                    AgentClient(ach).run_turn(ag_pb2.RunTurnRequest(), timeout_s=5, metadata=md)
                )
        with pytest.warns(DeprecationWarning, match=r"verify\(deadline_s="):
            with pytest.raises(NotFoundError):
                await AuditClient(address, channel=ach).verify(5, metadata=md)
        with pytest.raises(TypeError, match="give timeout= only"):
            await DecisionClient(ach).await_approval("a", timeout=5, timeout_s=5)

    # The blocking clients run in a thread: the server answers on this event loop.
    def sync_calls() -> None:
        sch = sync_channel(address)
        try:
            with pytest.warns(DeprecationWarning, match=r"run_turn\(timeout_s="):
                with pytest.raises(NotFoundError):
                    request = ag_pb2.RunTurnRequest()
                    list(SyncAgentClient(sch).run_turn(request, timeout_s=5, metadata=md))
        finally:
            sch.close()
        with SyncAuditClient(address) as audit:
            with pytest.warns(DeprecationWarning, match=r"verify\(deadline_s="):
                with pytest.raises(NotFoundError):
                    audit.verify(5, metadata=md)

    await asyncio.to_thread(sync_calls)


async def test_the_recorders_waits_take_timeout_too(tmp_path: Any) -> None:
    """``AuditRecorder.flush`` / ``close``: ``timeout=`` (positional still works), and the
    old ``timeout_s=`` warns; nothing listens, so the events stay spooled either way."""
    from stockade.client.audit import AuditRecorder

    address = "unix:///tmp/stockade-nobody-listens-agentshape.sock"
    recorder = AuditRecorder(address, tmp_path / "audit.spool")
    await recorder.start()
    recorder.enqueue(au_pb2.AuditEvent(event_id="e1", session_id="s1", tool_name="read_file"))
    assert not await recorder.flush(0.05)
    assert not await recorder.flush(timeout=0.05)
    with pytest.warns(DeprecationWarning, match=r"flush\(timeout_s="):
        assert not await recorder.flush(timeout_s=0.05)
    with pytest.raises(TypeError, match="give timeout= only"):
        await recorder.flush(timeout=0.05, timeout_s=0.05)
    with pytest.warns(DeprecationWarning, match=r"close\(timeout_s="):
        await recorder.close(timeout_s=0.05)
    assert recorder.pending == 1  # kept in the spool for the next start
