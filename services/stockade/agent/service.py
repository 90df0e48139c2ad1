"""The agent as a runnable service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from stockade.agent.auditsink import AuditSink
from stockade.agent.loop import AgentCore
from stockade.agent.providers.base import Provider
from stockade.agent.providers.scripted import ScriptedProvider, load_script
from stockade.agent.servicer import AgentServicer
from stockade.agent.settings import AgentSettings
from stockade.client.base import TlsConfig, aio_channel
from stockade.client.decision import DecisionClient
from stockade.client.executor import ExecutorClient
from stockade.errors import InvalidArgument
from stockade.server import Registration
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import agent_service_pb2_grpc as a_grpc

SERVICE_NAME = a_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name


@dataclass
class AgentApp:
    """ServiceApp for the agent."""

    settings: AgentSettings
    name: str = "agent"

    def provider_for(self, script: str) -> Provider:
        """A fresh provider for one turn."""
        if self.settings.provider == "scripted":
            return ScriptedProvider(
                load_script(self.settings.script_dir, script or self.settings.default_script)
            )
        raise InvalidArgument(
            "provider 'openai' is not built yet (see README status table); use 'scripted'"
        )

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
        audit_ch = aio_channel(s.audit_addr, tls=tls)
        audit = AuditSink(audit_ch)
        core = AgentCore(
            decision=DecisionClient(decision_ch, decide_deadline_s=s.decide_deadline_s),
            executor=ExecutorClient(executor_ch),
            audit=audit,
            provider_for=self.provider_for,
            max_steps=s.max_steps,
        )
        try:
            yield [
                Registration(
                    a_grpc.add_AgentServiceServicer_to_server, AgentServicer(core), SERVICE_NAME
                )
            ]
        finally:
            await audit.aclose()
            for ch in (decision_ch, executor_ch, audit_ch):
                await ch.close(None)
