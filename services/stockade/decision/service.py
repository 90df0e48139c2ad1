"""The decision service as a runnable service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from stockade.decision.servicer import DecisionServicer
from stockade.decision.settings import DecisionSettings
from stockade.server import Registration
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

SERVICE_NAME = d_pb2.DESCRIPTOR.services_by_name["DecisionService"].full_name


@dataclass
class DecisionApp:
    """ServiceApp for the decision service."""

    settings: DecisionSettings
    name: str = "decision"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Build the servicer."""
        servicer = DecisionServicer(self.settings)  # type: ignore[abstract]  # first cut
        yield [Registration(d_grpc.add_DecisionServiceServicer_to_server, servicer, SERVICE_NAME)]
