"""The shared request checks (stockade.server.requests) over a real decision server:
bytes that do not parse, enum values out of range and over-long ids are INVALID_ARGUMENT
with a precise message, never UNKNOWN or INTERNAL (#12 item 11). The same table over every
RPC of every service, against real processes, is in tests/faults/test_malformed.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.errors import InvalidArgument
from stockade.server import create_server, load_settings
from stockade.server.requests import MAX_ID_CHARS, check_request
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

TOKEN = "tok"


@pytest.fixture
async def channel(tmp_path: Path) -> AsyncIterator[grpc.aio.Channel]:
    settings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        admin_tokens=[TOKEN],
    )
    async with DecisionApp(settings).open() as regs:
        srv = await create_server("decision", settings, regs)
        try:
            async with grpc.aio.insecure_channel(srv.address) as ch:
                yield ch
        finally:
            await srv.server.stop(None)


async def raw_call(ch: grpc.aio.Channel, method: str, data: bytes) -> grpc.aio.AioRpcError:
    rpc = ch.unary_unary(
        f"/stockade.v1.DecisionService/{method}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await rpc(data, timeout=10, metadata=(("authorization", f"Bearer {TOKEN}"),))
    return info.value


def _ld(field: int, payload: bytes) -> bytes:
    """One length-delimited field, encoded by hand."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def nested_decide(depth: int) -> bytes:
    """A DecideRequest whose call arguments nest ``depth`` Structs deep (built by hand: the
    Python API itself refuses to build it)."""
    struct = b""
    for _ in range(depth):
        value = _ld(5, struct)  # Value.struct_value
        struct = _ld(1, _ld(1, b"k") + _ld(2, value))  # Struct.fields entry
    call = c_pb2.ToolCall(session_id="s", call_id="c", tool_name="t").SerializeToString()
    call += _ld(c_pb2.ToolCall.DESCRIPTOR.fields_by_name["arguments"].number, struct)
    return _ld(d_pb2.DecideRequest.DESCRIPTOR.fields_by_name["call"].number, call)


def invalid_utf8_session() -> bytes:
    # GetSessionRequest{session_id (field 1, length-delimited) = b"\xff\xfe"}
    return b"\x0a\x02\xff\xfe"


@pytest.mark.parametrize(
    ("method", "data", "needle"),
    [
        ("GetSession", invalid_utf8_session(), "UTF-8"),
        ("GetSession", b"\x0a\xff\xff\xff\xff\x0f", "does not parse"),
        ("Decide", b"\xff" * 7, "does not parse"),
        (
            "Decide",
            nested_decide(60),
            "nests deeper",
        ),
        ("SetMode", d_pb2.SetModeRequest(session_id="s", mode=99).SerializeToString(), "mode"),  # type: ignore[arg-type]
        (
            "Decide",
            d_pb2.DecideRequest(
                call=c_pb2.ToolCall(session_id="s", call_id="c", tool_name="read_file"),
                inspection=d_pb2.ToolInspection(tool_rules=[c_pb2.Rule(effect=99)]),  # type: ignore[arg-type]
            ).SerializeToString(),
            "inspection.tool_rules[0].effect",
        ),
        (
            "GetSession",
            d_pb2.GetSessionRequest(session_id="s" * 1_000_000).SerializeToString(),
            "session_id",
        ),
        (
            "AddRule",
            d_pb2.AddRuleRequest(
                session_id="s",
                rule=c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, pattern="x" * 1_000_000),
            ).SerializeToString(),
            "rule.pattern",
        ),
    ],
)
async def test_malformed_requests_are_invalid_argument(
    channel: grpc.aio.Channel, method: str, data: bytes, needle: str
) -> None:
    err = await raw_call(channel, method, data)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert needle in (err.details() or "")
    assert "google.protobuf" not in (err.details() or "")


async def test_a_good_request_still_works(channel: grpc.aio.Channel) -> None:
    rpc = channel.unary_unary(
        "/stockade.v1.DecisionService/CreateSession",
        request_serializer=lambda b: b,
        response_deserializer=d_pb2.CreateSessionResponse.FromString,
    )
    resp = await rpc(
        d_pb2.CreateSessionRequest(session_id="s" * MAX_ID_CHARS["session_id"]).SerializeToString(),
        timeout=10,
    )
    assert resp.session.session_id == "s" * 256


def test_limits_name_the_field_and_the_bound() -> None:
    with pytest.raises(InvalidArgument) as info:
        check_request(d_pb2.GetSessionRequest(session_id="x" * 257))
    assert info.value.message == "session_id is 257 characters long; the limit is 256"
    with pytest.raises(InvalidArgument, match="hook_signals\\[1\\].kind: 7 is not a value of Kind"):
        check_request(
            d_pb2.DecideRequest(
                hook_signals=[
                    d_pb2.HookSignal(kind=d_pb2.HookSignal.KIND_BLOCK),
                    d_pb2.HookSignal(kind=7),  # type: ignore[arg-type]
                ]
            )
        )
    check_request(d_pb2.DecideRequest(call=c_pb2.ToolCall(session_id="x" * 256)))
