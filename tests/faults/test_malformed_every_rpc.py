"""The malformed-request table over EVERY RPC of every service (#12 item 11), against the
four real service processes: corrupt and truncated bytes, invalid UTF-8 in a string
field, nesting past the parser's limit, an enum value out of range and a 1 MB identifier —
each, wherever the request type can carry it, answers INVALID_ARGUMENT with a message
naming the problem; none answers UNKNOWN or INTERNAL, and every service still serves a
good request afterwards. Health and server reflection, which every server carries, too.

The requests are built by hand from the descriptors (the protobuf API refuses to build most
of them), so a new RPC or field is covered without editing this table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from stockade.server.requests import MAX_ID_CHARS
from stockade.v1 import (
    agent_service_pb2,
    audit_service_pb2,
    decision_service_pb2,
    executor_service_pb2,
)
from tests.faults.conftest import StartStack

SERVICES = {
    "decision": [decision_service_pb2.DESCRIPTOR.services_by_name["DecisionService"]],
    "executor": [executor_service_pb2.DESCRIPTOR.services_by_name["ExecutorService"]],
    "audit": [audit_service_pb2.DESCRIPTOR.services_by_name["AuditService"]],
    "agent": [agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"]],
}
HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"]
REFLECTION = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _ld(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _path_to(message: Descriptor, want: object, depth: int = 0) -> list[FieldDescriptor] | None:
    """The shortest field path from ``message`` to a field for which ``want(field)``."""
    if depth > 4:
        return None
    for field in message.fields:
        if want(field):  # type: ignore[operator]
            return [field]
    best: list[FieldDescriptor] | None = None
    for field in message.fields:
        if (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and not field.message_type.GetOptions().map_entry
        ):
            sub = _path_to(field.message_type, want, depth + 1)
            if sub is not None and (best is None or len(sub) + 1 < len(best)):
                best = [field, *sub]
    return best


def _wrap(path: list[FieldDescriptor], leaf: bytes) -> bytes:
    """``leaf`` (the last field's encoding) wrapped in the path's messages."""
    data = leaf
    for field in reversed(path[:-1]):
        data = _ld(field.number, data)
    return data


def _struct_nest(depth: int) -> bytes:
    struct = b""
    for _ in range(depth):
        struct = _ld(1, _ld(1, b"k") + _ld(2, _ld(5, struct)))
    return struct


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    needle: str


def cases(method: MethodDescriptor) -> list[Case]:
    request = method.input_type
    out = [
        Case("corrupt", b"\xff\xff\xff\xff", "does not parse"),
        Case("truncated", b"\x0a\x05ab", "does not parse"),
    ]
    path = _path_to(request, lambda f: f.type == FieldDescriptor.TYPE_STRING)
    if path:
        out.append(Case("utf8", _wrap(path, _ld(path[-1].number, b"ok\xff\xfe")), "UTF-8"))
    path = _path_to(
        request,
        lambda f: (
            f.type == FieldDescriptor.TYPE_MESSAGE
            and f.message_type.full_name == "google.protobuf.Struct"
        ),
    )
    if path:
        out.append(
            Case("nested", _wrap(path, _ld(path[-1].number, _struct_nest(120))), "nests deeper")
        )
    path = _path_to(
        request,
        lambda f: (
            f.type == FieldDescriptor.TYPE_ENUM and 99 not in {v.number for v in f.enum_type.values}
        ),
    )
    if path:
        leaf = _varint(path[-1].number << 3) + _varint(99)
        out.append(Case("enum", _wrap(path, leaf), "99"))
    path = _path_to(
        request, lambda f: f.type == FieldDescriptor.TYPE_STRING and f.name in MAX_ID_CHARS
    )
    if path and request.full_name != "stockade.v1.RecordBatchRequest":
        # (Audit events check their own fields, naming the event: tests/faults/
        # test_audit_malformed.py.)
        big = _ld(path[-1].number, b"x" * (1 << 20))
        # The audit service words its own refusal (quoting the event id first, cut to fit).
        needle = "" if request.full_name == "stockade.v1.RecordRequest" else "the limit is"
        out.append(Case("huge id", _wrap(path, big), needle))
    return out


async def _call(
    channel: grpc.aio.Channel, service: str, method: MethodDescriptor, data: bytes
) -> grpc.aio.AioRpcError:
    path = f"/{service}/{method.name}"
    kw = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    with pytest.raises(grpc.aio.AioRpcError) as info:
        if not method.client_streaming and not method.server_streaming:
            await channel.unary_unary(path, **kw)(data, timeout=30)
        elif not method.client_streaming:
            call = channel.unary_stream(path, **kw)(data, timeout=30)
            try:
                await call.read()
            finally:
                call.cancel()
        else:

            async def one() -> AsyncIterator[bytes]:
                yield data

            if method.server_streaming:
                call = channel.stream_stream(path, **kw)(one(), timeout=30)
                try:
                    await call.read()
                finally:
                    call.cancel()
            else:
                await channel.stream_unary(path, **kw)(one(), timeout=30)
    return info.value


async def test_every_rpc_answers_invalid_argument(fault_stack: StartStack) -> None:
    stack = await fault_stack()
    failures: list[str] = []
    counted = 0
    for name, services in SERVICES.items():
        async with grpc.aio.insecure_channel(stack.addresses[name]) as channel:
            for service in [*services, HEALTH, REFLECTION]:
                for method in service.methods:
                    for case in cases(method):
                        err = await _call(channel, service.full_name, method, case.data)
                        counted += 1
                        details = err.details() or ""
                        if (
                            err.code() != grpc.StatusCode.INVALID_ARGUMENT
                            or case.needle not in details
                            or "google.protobuf" in details
                        ):
                            failures.append(
                                f"{name} {method.full_name} {case.name}: "
                                f"{err.code().name} {details[:200]!r}"
                            )
            # Still serving after all of it.
            health = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            resp = await health(health_pb2.HealthCheckRequest(), timeout=30)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
    assert failures == [], "\n".join(failures)
    # Every RPC of the four services, Health and reflection, each at least corrupt + truncated.
    methods = sum(len(s.methods) for group in SERVICES.values() for s in group)
    assert counted >= 2 * (methods + 4 * (len(HEALTH.methods) + len(REFLECTION.methods)))
