"""What the agent's core needs from the other services, as interfaces without gRPC.

The core, the loop and the pipeline call the decision service, the executor and remote
tool providers through these protocols; ``stockade.agent.app`` plugs in the gRPC clients
(``stockade.client.decision.DecisionClient``, ``stockade.client.executor.ExecutorClient``,
``stockade.agent.remote_tools.ToolProviderClient``). A failed call raises a
``stockade.client.errors.ServiceError`` (a gRPC-free hierarchy), which the pipeline reads
to fail closed; an import-linter contract keeps gRPC out of these modules.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from stockade.agent.registry import ToolRegistry, ToolSpec, merge_remote
from stockade.client.errors import ServiceError
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2

log = logging.getLogger(__name__)

Metadata = Sequence[tuple[str, str]]
"""Extra gRPC metadata for one call: (key, value) pairs, keys in lower case."""


class DecisionPort(Protocol):
    """The decision service as the agent uses it.

    ``decide`` and ``await_approval`` never raise: a failure is a DENY (fail closed); the
    others raise ``ServiceError``.
    """

    async def decide(
        self,
        request: d_pb2.DecideRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.DecideResponse:
        """Decide a call."""
        ...

    async def await_approval(
        self,
        approval_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.AwaitApprovalResponse:
        """Wait for an approval's answer within ``timeout`` seconds."""
        ...

    async def create_session(
        self,
        session_id: str = "",
        mode: int = c_pb2.PERMISSION_MODE_UNSPECIFIED,
        task: str = "",
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.Session:
        """Create (or fetch) a session."""
        ...

    async def resolve_approval(
        self,
        request: d_pb2.ResolveApprovalRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.ResolveApprovalResponse:
        """Answer an approval."""
        ...


class ExecutorPort(Protocol):
    """The executor service as the agent uses it (every failure raises ``ServiceError``)."""

    async def inspect(
        self,
        request: x_pb2.InspectRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> d_pb2.ToolInspection:
        """Tool-level checks of a call."""
        ...

    def execute(
        self,
        request: x_pb2.ExecuteRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> AsyncIterator[x_pb2.ExecuteResponse]:
        """Run a call, streaming its chunks and result, within ``timeout`` seconds."""
        ...

    async def cancel(
        self,
        session_id: str,
        call_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> bool:
        """Cancel a running call."""
        ...


@dataclass(frozen=True)
class RemoteResult:
    """What a remote tool answered."""

    content: str
    """The result text for the model."""
    is_error: bool
    """True when the tool (or the call to it) failed."""
    outcome_unknown: bool = False
    """The agent stopped waiting (deadline): the provider may have run the tool."""


class ToolProviderPort(Protocol):
    """One remote tool provider (AGT-1 ``remote``)."""

    @property
    def address(self) -> str:
        """Where it is served (also the provider's name in the registry)."""
        ...

    async def list_tools(self, *, timeout: float = 3.0) -> list[ToolSpec]:
        """Its tools as registry entries; raises ``ServiceError`` on failure."""
        ...

    async def call_tool(
        self,
        *,
        session_id: str,
        call_id: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        agent_name: str = "lead",
        from_subagent: bool = False,
        timeout: float | None = None,
    ) -> RemoteResult:
        """Run one call; transport failures are an error result, never an exception."""
        ...


async def discover(
    registry: ToolRegistry, providers: Iterable[ToolProviderPort]
) -> dict[str, list[str]]:
    """Merge every reachable provider's tools into ``registry``; returns tools per provider.

    An unreachable provider is logged and skipped: its tools are simply not offered.
    """
    taken: dict[str, list[str]] = {}
    for provider in providers:
        try:
            specs = await provider.list_tools()
        except ServiceError as exc:
            log.warning("tool provider %s unavailable: %s", provider.address, exc.code)
            continue
        except Exception:  # a broken provider must not break the agent's turns
            log.exception("tool provider %s answered ListTools badly", provider.address)
            continue
        taken[provider.address] = merge_remote(registry, specs, provider.address)
    return taken
