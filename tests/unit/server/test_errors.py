"""Domain exceptions become precise statuses with google.rpc.ErrorInfo; others leak nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from stockade import errors
from stockade.server.app import Registration, create_server, stop_server
from stockade.server.errors import DOMAIN, error_info
from stockade.server.settings import ServerSettings

RAISES: dict[str, BaseException] = {
    "invalid": errors.InvalidPattern("bad pattern 'x('", pattern="x("),
    "missing": errors.SessionNotFound("no session s1"),
    "grant": errors.GrantExpired("grant expired"),
    "unimplemented": errors.NotImplementedYet("not built yet"),
    "crash": RuntimeError("secret internal detail /etc/db-password"),
}


def _unary(name: str) -> Any:
    async def behavior(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        raise RAISES[name]

    return behavior


async def _stream(
    request: bytes, context: grpc.aio.ServicerContext[Any, Any]
) -> AsyncIterator[bytes]:
    yield b"first"
    raise errors.CommandRefused("rm -rf / refused", command="rm")


def _add(servicer: object, server: grpc.aio.Server) -> None:
    handlers = {name: grpc.unary_unary_rpc_method_handler(_unary(name)) for name in RAISES}
    handlers["stream"] = grpc.unary_stream_rpc_method_handler(_stream)  # type: ignore[assignment]
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", handlers),))


@pytest.fixture
async def channel() -> AsyncIterator[grpc.aio.Channel]:
    srv = await create_server(
        "test", ServerSettings(listen="127.0.0.1:0"), [Registration(_add, None, "t.T")]
    )
    async with grpc.aio.insecure_channel(srv.address) as ch:
        yield ch
    await stop_server(srv)


@pytest.mark.parametrize(
    ("method", "code", "reason"),
    [
        ("invalid", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PATTERN"),
        ("missing", grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND"),
        ("grant", grpc.StatusCode.PERMISSION_DENIED, "GRANT_EXPIRED"),
        ("unimplemented", grpc.StatusCode.UNIMPLEMENTED, "NOT_IMPLEMENTED"),
        ("crash", grpc.StatusCode.INTERNAL, "INTERNAL"),
    ],
)
async def test_exception_maps_to_status_and_error_info(
    channel: grpc.aio.Channel, method: str, code: grpc.StatusCode, reason: str
) -> None:
    call = channel.unary_unary(f"/t.T/{method}")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(b"x", metadata=(("x-request-id", "req-123"),))
    err = info.value
    assert err.code() == code
    detail = error_info(err)
    assert detail is not None
    assert detail.reason == reason and detail.domain == DOMAIN
    assert detail.metadata["request_id"] == "req-123"


async def test_internal_error_leaks_no_detail(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await channel.unary_unary("/t.T/crash")(b"x")
    assert "secret" not in (info.value.details() or "")
    assert "Traceback" not in (info.value.details() or "")
    assert (info.value.details() or "").startswith("internal error (request id ")


async def test_metadata_of_the_error_travels(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await channel.unary_unary("/t.T/invalid")(b"x")
    detail = error_info(info.value)
    assert detail is not None and detail.metadata["pattern"] == "x("
    assert info.value.details() == "bad pattern 'x('"


async def test_error_in_a_stream_after_messages(channel: grpc.aio.Channel) -> None:
    got = []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for msg in channel.unary_stream("/t.T/stream")(b"x"):
            got.append(msg)
    assert got == [b"first"]
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    detail = error_info(info.value)
    assert detail is not None and detail.reason == "COMMAND_REFUSED"


async def test_plaintext_refused_on_public_address() -> None:
    with pytest.raises(RuntimeError, match="refusing plaintext"):
        await create_server("t", ServerSettings(listen="0.0.0.0:0"), [])


def test_instrumentation_follows_the_tracer_provider() -> None:
    """No SDK provider installed (as in this test process): no gRPC instrumentation cost."""
    from stockade.tracing import tracing_enabled

    assert tracing_enabled() is False


def test_a_status_quoting_huge_input_is_cut_to_fit_the_trailers() -> None:
    from stockade.server.errors import MAX_MESSAGE_CHARS, MAX_METADATA_VALUE_CHARS, status_for

    huge = "x" * (1 << 20)
    status = status_for(errors.InvalidArgument(f"event {huge!r} is bad", event_id=huge))
    assert len(status.details) <= MAX_MESSAGE_CHARS and "cut: 1,048,5" in status.details
    total = sum(len(v) for _, v in status.trailing_metadata)
    assert total < 16_384 - 1024
    status = status_for(errors.InvalidArgument("short", field="f"))
    assert status.details == "short"
    assert MAX_METADATA_VALUE_CHARS < MAX_MESSAGE_CHARS
