"""A tool as a ToolProvider declares it, and its ``stockade.v1.ToolSpec`` message.

A provider (the paper catalogue, any other backend) declares each tool it serves with a
description, an argument schema and its traits, and sends that over ListTools; the agent
reads the same message into its registry. Both sides use the conversions here, so the
wire form of a trait is written once. Protobuf only, no gRPC, no service imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format, struct_pb2

from stockade.contract import argschema
from stockade.contract.tools import Interrupt, Location, ToolTraits
from stockade.errors import InvalidArgument
from stockade.v1 import common_pb2

__all__ = [
    "INTERRUPT_TO_PB",
    "LOCATION_FROM_PB",
    "LOCATION_TO_PB",
    "ToolDeclaration",
    "declaration_to_proto",
    "dict_to_struct",
    "struct_to_dict",
]

INTERRUPT_TO_PB: Mapping[Interrupt, common_pb2.InterruptBehavior.ValueType] = {
    Interrupt.CANCEL: common_pb2.INTERRUPT_BEHAVIOR_CANCEL,
    Interrupt.BLOCK: common_pb2.INTERRUPT_BEHAVIOR_BLOCK,
}
"""Interrupt behaviour → its protobuf value."""
LOCATION_TO_PB: Mapping[Location, common_pb2.ToolLocation.ValueType] = {
    Location.EXECUTOR: common_pb2.TOOL_LOCATION_EXECUTOR,
    Location.BUILTIN: common_pb2.TOOL_LOCATION_BUILTIN,
    Location.REMOTE: common_pb2.TOOL_LOCATION_REMOTE,
}
"""Location → its protobuf value."""
LOCATION_FROM_PB: Mapping[int, Location] = {int(v): k for k, v in LOCATION_TO_PB.items()}
"""Protobuf value → location (an unknown value is absent: the reader picks the default)."""


def dict_to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    """A JSON-like mapping as a ``google.protobuf.Struct``."""
    message = struct_pb2.Struct()
    message.update(dict(value))
    return message


def struct_to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` as a plain dict."""
    result: dict[str, Any] = json_format.MessageToDict(message)
    return result


@dataclass(frozen=True)
class ToolDeclaration:
    """A tool a provider serves: what the model sees plus its traits."""

    traits: ToolTraits
    """Name, read-only, concurrency, interrupt behaviour, primary field."""
    description: str
    """What the tool does, for the model."""
    parameters: Mapping[str, Any]
    """JSON schema of the arguments (an object schema)."""

    @property
    def name(self) -> str:
        """The tool name."""
        return self.traits.name

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the schema; return them as a dict or raise
        ``InvalidArgument`` naming the tool and the place that is wrong."""
        if not isinstance(arguments, dict):
            raise InvalidArgument(f"{self.name}: arguments must be a JSON object", tool=self.name)
        try:
            argschema.validate(arguments, self.parameters)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{self.name}: {exc.message}", tool=self.name) from exc
        return arguments


def declaration_to_proto(declaration: ToolDeclaration) -> common_pb2.ToolSpec:
    """The ListTools form of ``declaration``."""
    t = declaration.traits
    return common_pb2.ToolSpec(
        name=t.name,
        description=declaration.description,
        arguments_schema=dict_to_struct(declaration.parameters),
        interrupt_behavior=INTERRUPT_TO_PB[t.interrupt],
        concurrency_safe=t.concurrency_safe,
        causes_sibling_abort=t.sibling_abort,
        read_only=t.read_only,
        location=LOCATION_TO_PB[t.location],
        primary_content_field=t.primary_field,
    )
