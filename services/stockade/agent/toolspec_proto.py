"""Conversions between the registry's ``ToolSpec`` and the ``stockade.v1.ToolSpec`` message.

Used by ToolProvider servers (which declare their tools with traits) and by the agent when
it merges a provider's ListTools answer into its registry. Protobuf only, no gRPC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2

from stockade.agent.registry import InterruptBehavior, Location, ToolSpec
from stockade.v1 import common_pb2

_INTERRUPT_TO_PB = {
    InterruptBehavior.CANCEL: common_pb2.INTERRUPT_BEHAVIOR_CANCEL,
    InterruptBehavior.BLOCK: common_pb2.INTERRUPT_BEHAVIOR_BLOCK,
}
_LOCATION_TO_PB = {
    Location.EXECUTOR: common_pb2.TOOL_LOCATION_EXECUTOR,
    Location.BUILTIN: common_pb2.TOOL_LOCATION_BUILTIN,
    Location.REMOTE: common_pb2.TOOL_LOCATION_REMOTE,
}
_LOCATION_FROM_PB = {value: key for key, value in _LOCATION_TO_PB.items()}


def dict_to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    """A JSON-like mapping as a ``google.protobuf.Struct``."""
    message = struct_pb2.Struct()
    message.update(dict(value))
    return message


def struct_to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` as a plain dict."""
    result: dict[str, Any] = json_format.MessageToDict(message)
    return result


def spec_to_proto(
    spec: ToolSpec, arguments: Mapping[str, Any] | None = None
) -> common_pb2.ToolSpec:
    """The message form of ``spec``; ``concurrency_safe`` is evaluated for ``arguments``.

    A predicate cannot travel over the wire, so a provider declaring an argument-dependent
    tool sends the value for empty arguments (the conservative reading is its job).
    """
    return common_pb2.ToolSpec(
        name=spec.name,
        description=spec.description,
        arguments_schema=dict_to_struct(spec.parameters),
        interrupt_behavior=_INTERRUPT_TO_PB[spec.interrupt_behavior],
        concurrency_safe=spec.is_concurrency_safe(arguments or {}),
        causes_sibling_abort=spec.causes_sibling_abort,
        read_only=spec.read_only,
        location=_LOCATION_TO_PB[spec.location],
        primary_content_field=spec.primary_content_field,
    )


def spec_from_proto(message: common_pb2.ToolSpec, *, provider: str = "") -> ToolSpec:
    """A registry entry for a declared tool; unset traits take the conservative value."""
    interrupt = (
        InterruptBehavior.CANCEL
        if message.interrupt_behavior == common_pb2.INTERRUPT_BEHAVIOR_CANCEL
        else InterruptBehavior.BLOCK
    )
    parameters = (
        struct_to_dict(message.arguments_schema)
        if message.HasField("arguments_schema")
        else {"type": "object"}
    )
    return ToolSpec(
        name=message.name,
        description=message.description,
        parameters=parameters,
        interrupt_behavior=interrupt,
        concurrency_safe=message.concurrency_safe,
        causes_sibling_abort=message.causes_sibling_abort,
        read_only=message.read_only,
        location=_LOCATION_FROM_PB.get(message.location, Location.REMOTE),
        primary_content_field=message.primary_content_field,
        provider=provider,
    )
