"""The executor as a runnable service."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from stockade.executor.paths import PathSandbox
from stockade.executor.servicer import executor_servicer
from stockade.executor.settings import ExecutorSettings
from stockade.server import Registration
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

log = logging.getLogger(__name__)
SERVICE_NAME = x_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name


def build_sandbox(settings: ExecutorSettings) -> PathSandbox:
    """The path sandbox described by the settings."""
    return PathSandbox.from_settings(
        str(settings.workspace),
        str(settings.library_dir) if settings.library_dir else None,
        str(settings.skills_dir) if settings.skills_dir else None,
        settings.additional_dirs,
    )


@dataclass
class ExecutorApp:
    """ServiceApp for the executor."""

    settings: ExecutorSettings
    name: str = "executor"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Start the confined launcher and build the servicer; stop the launcher on exit.

        With mTLS on, only the agent's identity may run or cancel calls (X-3).
        """
        async with executor_servicer(self.settings, build_sandbox(self.settings)) as servicer:
            layers = servicer.layers()
            log.info(
                "executor workspace %s; confinement active: %s; inactive: %s",
                self.settings.workspace,
                ", ".join(layer.name for layer in layers if layer.active) or "none",
                ", ".join(layer.name for layer in layers if not layer.active) or "none",
            )
            yield [
                Registration(
                    x_grpc.add_ExecutorServiceServicer_to_server,
                    servicer,
                    SERVICE_NAME,
                    method_identities={
                        "Execute": frozenset(self.settings.execute_identities),
                        "Cancel": frozenset(self.settings.execute_identities),
                    },
                )
            ]
