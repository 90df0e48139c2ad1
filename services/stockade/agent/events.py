"""Building RunTurn events with sequence numbers and timestamps."""

from __future__ import annotations

import time
from typing import Any

from google.protobuf import timestamp_pb2

from stockade.v1 import agent_service_pb2 as a_pb2


class EventFactory:
    """Numbers the events of one turn's stream."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._seq = 0

    def make(self, agent_name: str = "lead", **event: Any) -> a_pb2.RunTurnResponse:
        """An event with exactly one of the oneof fields set from ``event``."""
        self._seq += 1
        ts = timestamp_pb2.Timestamp()
        ts.FromNanoseconds(time.time_ns())
        return a_pb2.RunTurnResponse(
            sequence=self._seq, session_id=self.session_id, agent_name=agent_name, time=ts, **event
        )
