"""The agent as a runnable service: the composition root.

Opens the channels to the decision service, the executor, the audit service, tool
providers and remote hooks; builds the core (``stockade.agent.core``) and the servicer; and
closes everything after the server drained.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from stockade.agent.core import AgentCore
from stockade.agent.memory import MemoryStore
from stockade.agent.registry import ToolRegistry
from stockade.agent.remote_hooks import RemoteHook
from stockade.agent.remote_tools import ToolProviderClient
from stockade.agent.servicer import AgentServicer
from stockade.agent.settings import AgentSettings
from stockade.agent.skills import SkillLibrary
from stockade.agent.tools import default_registry
from stockade.client.audit import AuditRecorder
from stockade.client.base import TlsConfig, aio_channel
from stockade.client.decision import DecisionClient
from stockade.client.executor import ExecutorClient
from stockade.errors import InvalidArgument
from stockade.llm.base import Provider
from stockade.llm.openai import OpenAIConfig, OpenAIProvider
from stockade.llm.scripted import ScriptedProvider, load_script
from stockade.server import Registration
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import agent_service_pb2_grpc as a_grpc

SERVICE_NAME = a_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name

log = logging.getLogger(__name__)


@dataclass
class AgentApp:
    """ServiceApp for the agent."""

    settings: AgentSettings
    name: str = "agent"

    _openai: OpenAIProvider | None = field(default=None, init=False, repr=False)

    def provider_for(self, script: str) -> Provider:
        """The provider for one turn: a fresh scripted one, or the shared HTTP one."""
        s = self.settings
        if s.provider == "scripted":
            return ScriptedProvider(load_script(s.script_dir, script or s.default_script))
        if script:
            raise InvalidArgument("'script' applies to the scripted provider only")
        if self._openai is None:
            self._openai = OpenAIProvider(
                OpenAIConfig(
                    base_url=s.openai_base_url,
                    model=s.openai_model,
                    api_key=s.openai_api_key,
                    stream=s.openai_stream,
                    timeout_s=s.openai_timeout_s,
                    max_retries=s.openai_max_retries,
                )
            )
        return self._openai

    def registry(self) -> ToolRegistry:
        """The default tools plus the ones declared in configuration."""
        registry = default_registry()
        for tool in self.settings.tools:
            registry.register(tool.to_spec(), replace=True)
        return registry

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Open channels to the other services; close them after the server drained."""
        s = self.settings
        # With mTLS configured, the agent's own certificate is its client identity too
        # (the executor accepts Execute only from it).
        tls = (
            TlsConfig(s.tls_cert_file, s.tls_key_file, s.tls_ca_file)
            if s.tls_cert_file and s.tls_key_file and s.tls_ca_file
            else None
        )
        decision_ch = aio_channel(s.decision_addr, tls=tls)
        executor_ch = aio_channel(s.executor_addr, tls=tls)
        # Never blocks on the network: written ahead to the spool before a call's result
        # is released, sent in order in batches, replayed while the audit service is
        # down (AUD-2, AUD-4). Each event names its call's span, so the audit service's
        # receipt still joins the call's trace.
        audit = AuditRecorder(
            s.audit_addr,
            s.spool_dir / "agent-audit.spool",
            tls=tls,
            fsync=s.audit_fsync,
            disk_full_action=s.audit_disk_full_action,
            max_backlog=s.audit_max_backlog,
        )
        await audit.start()
        extra_channels = {
            address: aio_channel(address, tls=tls)
            for address in [*s.tool_providers, *(h.address for h in s.remote_hooks)]
        }
        providers = {
            address: ToolProviderClient(address, extra_channels[address])
            for address in s.tool_providers
        }
        hooks = [RemoteHook(config, extra_channels[config.address]) for config in s.remote_hooks]
        log.info(
            "agent provider %s; decision %s, executor %s, audit %s%s; %d tool providers, "
            "%d remote hooks",
            s.provider,
            s.decision_addr,
            s.executor_addr,
            s.audit_addr,
            " (mTLS)" if tls else "",
            len(providers),
            len(hooks),
        )
        core = AgentCore(
            decision=DecisionClient(decision_ch, decide_deadline_s=s.decide_deadline_s),
            executor=ExecutorClient(executor_ch),
            audit=audit,
            provider_for=self.provider_for,
            max_steps=s.max_steps,
            registry=self.registry(),
            hooks=hooks,
            tool_providers=providers,
            limits=s.limit_settings(),
            approval_wait_s=s.approval_wait_s,
            tool_timeout_s=s.tool_timeout_s,
            max_output_chars=s.max_tool_output_chars,
            persist_dir=s.tool_results_dir,
            skills=SkillLibrary(s.skills_dir) if s.skills_dir is not None else None,
            memory=MemoryStore(s.memory_dir) if s.memory_dir is not None else None,
        )
        try:
            yield [
                Registration(
                    a_grpc.add_AgentServiceServicer_to_server, AgentServicer(core), SERVICE_NAME
                )
            ]
        finally:
            await audit.aclose()
            for ch in (decision_ch, executor_ch, *extra_channels.values()):
                await ch.close(None)
            if self._openai is not None:
                await self._openai.aclose()
