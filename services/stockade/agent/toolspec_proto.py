"""Conversions between the registry's ``ToolSpec`` and the ``stockade.v1.ToolSpec`` message.

Used when the agent merges a provider's ListTools answer into its registry (and by tests
that play a provider). The wire form of each trait is the contract's
(``stockade.contract.toolspec``), shared with providers. Protobuf only, no gRPC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stockade.agent.registry import InterruptBehavior, Location, ToolSpec
from stockade.contract.tools import Interrupt
from stockade.contract.tools import Location as ContractLocation
from stockade.contract.toolspec import (
    INTERRUPT_TO_PB,
    LOCATION_FROM_PB,
    LOCATION_TO_PB,
    dict_to_struct,
    struct_to_dict,
)
from stockade.v1 import common_pb2


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
        interrupt_behavior=INTERRUPT_TO_PB[Interrupt(spec.interrupt_behavior.value)],
        concurrency_safe=spec.is_concurrency_safe(arguments or {}),
        causes_sibling_abort=spec.causes_sibling_abort,
        read_only=spec.read_only,
        location=LOCATION_TO_PB[ContractLocation(spec.location.value)],
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
    location = LOCATION_FROM_PB.get(message.location, ContractLocation.REMOTE)
    return ToolSpec(
        name=message.name,
        description=message.description,
        parameters=parameters,
        interrupt_behavior=interrupt,
        concurrency_safe=message.concurrency_safe,
        causes_sibling_abort=message.causes_sibling_abort,
        read_only=message.read_only,
        location=Location(location.value),
        primary_content_field=message.primary_content_field,
        provider=provider,
    )
