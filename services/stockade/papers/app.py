"""The paper catalogue as a runnable service: the composition root (builds the core and
the servicer)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from stockade.papers.catalogue import PaperCatalogue
from stockade.papers.core import PapersCore
from stockade.papers.servicer import SERVICE_NAME, PapersServicer
from stockade.papers.settings import PapersSettings
from stockade.server import Registration
from stockade.v1 import tool_provider_pb2_grpc as tp_grpc


@dataclass
class PapersApp:
    """ServiceApp for the example ToolProvider."""

    settings: PapersSettings
    name: str = "papers"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Nothing to open: the catalogue lives in memory."""
        yield [
            Registration(
                tp_grpc.add_ToolProviderServicer_to_server,
                PapersServicer(PapersCore(PaperCatalogue())),
                SERVICE_NAME,
            )
        ]
