"""The tool registry: every tool the agent may offer, with its safety traits (AGT-1, AGT-2).

A ``ToolSpec`` is the agent's single source of truth about a tool: the model sees its name,
description and JSON schema; the execution pipeline reads its traits (interrupt behaviour,
concurrency safety, sibling abort, read-only) and where it runs (``executor``, ``builtin``
or ``remote`` behind a ToolProvider). The default tools are in ``stockade.agent.tools``;
deployments add tools from configuration (``ToolConfig``) and from remote providers'
ListTools answers. ``ToolRegistry.restrict`` implements least privilege for
subagents: a child registry can only ever be narrower than its parent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stockade.contract import argschema as json_schema
from stockade.contract.tools import SEED_TOOLS
from stockade.contract.tools import Location as ContractLocation
from stockade.errors import InvalidArgument, UnknownTool
from stockade.llm.base import ToolSchema

log = logging.getLogger(__name__)


class InterruptBehavior(Enum):
    """How a running call reacts to a user cancel."""

    CANCEL = "cancel"
    """Stop at once (read-only or restartable work)."""
    BLOCK = "block"
    """Finish first: the call has side effects that must not be cut in half."""


class Location(Enum):
    """Where a tool runs."""

    EXECUTOR = "executor"
    """Built into the executor and run inside its sandbox."""
    BUILTIN = "builtin"
    """Implemented inside the agent (todo_write, ask_user, subagent, ...)."""
    REMOTE = "remote"
    """Implemented by another backend behind the ToolProvider gRPC interface."""


ConcurrencyRule = bool | Callable[[Mapping[str, Any]], bool]
"""Either a constant or a predicate over the call's arguments."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool's declaration and safety traits."""

    name: str
    """Unique tool name, as the model calls it."""
    description: str
    """What the tool does, for the model."""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    """JSON schema of the arguments (an object schema)."""
    interrupt_behavior: InterruptBehavior = InterruptBehavior.BLOCK
    """Reaction to a user cancel; BLOCK is the conservative default."""
    concurrency_safe: ConcurrencyRule = False
    """May run in parallel with other concurrency-safe calls; conservative default false."""
    causes_sibling_abort: bool = False
    """Its failure cancels the other calls of the same parallel batch."""
    read_only: bool = False
    """Has no side effects."""
    location: Location = Location.EXECUTOR
    """Where the tool runs."""
    primary_content_field: str = ""
    """The argument an ALLOW rule matches against (``command``, ``file_path`` ...)."""
    provider: str = ""
    """For remote tools: the ToolProvider address that serves it."""

    def is_concurrency_safe(self, arguments: Mapping[str, Any]) -> bool:
        """Whether this call may join a parallel batch; a failing predicate means no."""
        rule = self.concurrency_safe
        if isinstance(rule, bool):
            return rule
        try:
            return bool(rule(arguments))
        except Exception:  # a predicate bug must not make a call parallel
            log.warning("concurrency predicate of %s failed; running serially", self.name)
            return False

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the schema; return them as a dict or raise."""
        if not isinstance(arguments, dict):
            raise InvalidArgument(f"{self.name}: arguments must be a JSON object", tool=self.name)
        try:
            json_schema.validate(arguments, self.parameters)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{self.name}: {exc.message}", tool=self.name) from exc
        return arguments

    def to_schema(self) -> ToolSchema:
        """The tool as offered to the model."""
        return ToolSchema(
            name=self.name, description=self.description, parameters=dict(self.parameters)
        )


class ToolRegistry:
    """An ordered set of ``ToolSpec`` by name."""

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: ToolSpec, *, replace: bool = False) -> None:
        """Add a tool; a second tool of the same name is an error unless ``replace``."""
        if not spec.name or not spec.name.replace("_", "").replace("-", "").isalnum():
            raise InvalidArgument(f"invalid tool name {spec.name!r}", tool=spec.name)
        if spec.name in self._specs and not replace:
            raise InvalidArgument(f"tool {spec.name!r} is already registered", tool=spec.name)
        self._specs[spec.name] = spec

    def get(self, name: str) -> ToolSpec:
        """The spec of ``name``; ``UnknownTool`` when it is not registered here."""
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownTool(f"unknown tool {name!r}", tool=name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def names(self) -> list[str]:
        """Registered tool names in registration order."""
        return list(self._specs)

    def schemas(self) -> list[ToolSchema]:
        """Every tool as offered to the model."""
        return [spec.to_schema() for spec in self._specs.values()]

    def restrict(self, names: Iterable[str]) -> ToolRegistry:
        """A child registry with only ``names``; asking for a tool this one lacks is refused.

        Least privilege (AGT-5): a child can only narrow its parent, so an unknown or
        not-granted name raises instead of being silently dropped or added.
        """
        wanted = list(dict.fromkeys(names))
        missing = [name for name in wanted if name not in self._specs]
        if missing:
            raise UnknownTool(
                f"cannot grant tools the parent does not have: {', '.join(missing)}",
                tools=",".join(missing),
            )
        return ToolRegistry(self._specs[name] for name in wanted)

    def without(self, names: Iterable[str]) -> ToolRegistry:
        """A copy of this registry minus ``names``."""
        drop = set(names)
        return ToolRegistry(spec for spec in self._specs.values() if spec.name not in drop)

    def read_only(self) -> ToolRegistry:
        """A copy with only the read-only tools."""
        return ToolRegistry(spec for spec in self._specs.values() if spec.read_only)


UNAVAILABLE_BUILTINS = frozenset({"load_skill"})
"""Built-ins that need configuration (load_skill: a skills folder); without it they are
never offered to the model."""


def offered_registry(
    registry: ToolRegistry, unavailable: frozenset[str] = UNAVAILABLE_BUILTINS
) -> ToolRegistry:
    """The tools worth offering: remote tools need a provider, built-ins an implementation."""
    drop = [
        spec.name
        for spec in registry
        if (spec.location is Location.REMOTE and not spec.provider) or spec.name in unavailable
    ]
    return registry.without(drop)


#: Names of the built-in agent tools (run inside the agent, never by the executor).
BUILTIN_TOOLS = frozenset(
    t.name for t in SEED_TOOLS.values() if t.location is ContractLocation.BUILTIN
)


class ToolConfig(BaseModel):
    """A tool declared in configuration (AGT-2: deployments register more tools)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Unique tool name."""
    description: str = ""
    """What it does, for the model."""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON schema of the arguments."""
    interrupt_behavior: InterruptBehavior = InterruptBehavior.BLOCK
    """``cancel`` or ``block`` (default, conservative)."""
    concurrency_safe: bool = False
    """May run in parallel; conservative default false."""
    causes_sibling_abort: bool = False
    """Its failure cancels its parallel siblings."""
    read_only: bool = False
    """Has no side effects."""
    location: Location = Location.REMOTE
    """Where it runs; configured tools are usually remote."""
    primary_content_field: str = ""
    """The argument ALLOW rules match against."""
    provider: str = ""
    """ToolProvider address for remote tools."""

    def to_spec(self) -> ToolSpec:
        """The registry entry for this configuration."""
        if self.location is Location.REMOTE and not self.provider:
            raise InvalidArgument(f"remote tool {self.name!r} needs a provider address")
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            interrupt_behavior=self.interrupt_behavior,
            concurrency_safe=self.concurrency_safe,
            causes_sibling_abort=self.causes_sibling_abort,
            read_only=self.read_only,
            location=self.location,
            primary_content_field=self.primary_content_field,
            provider=self.provider,
        )


def merge_remote(registry: ToolRegistry, specs: Iterable[ToolSpec], provider: str) -> list[str]:
    """Register (or update) tools a ToolProvider listed; returns the names taken.

    A provider may re-declare a default remote tool (it then serves it), but it may never
    replace an executor or built-in tool: that would let a remote backend hijack, e.g.,
    ``run_bash``.
    """
    taken: list[str] = []
    for spec in specs:
        if spec.name in registry and registry.get(spec.name).location is not Location.REMOTE:
            log.warning("provider %s tried to replace non-remote tool %s", provider, spec.name)
            continue
        remote = ToolSpec(
            name=spec.name,
            description=spec.description,
            parameters=spec.parameters,
            interrupt_behavior=spec.interrupt_behavior,
            concurrency_safe=spec.concurrency_safe,
            causes_sibling_abort=spec.causes_sibling_abort,
            read_only=spec.read_only,
            location=Location.REMOTE,
            primary_content_field=spec.primary_content_field,
            provider=provider,
        )
        registry.register(remote, replace=True)
        taken.append(spec.name)
    return taken
