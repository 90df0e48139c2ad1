"""Endless streams (Tail, WatchApprovals) end at once on SIGTERM instead of holding the
whole grace period, and end cleanly so the caller can reconnect elsewhere."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc

from stockade.client.base import aio_channel
from stockade.stack import LocalStack
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import audit_service_pb2_grpc as au_grpc
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

# Long enough that "ends at once" (under half of it) cannot be confused with "held the
# grace", with room for a slow stop on a busy machine; under the 120 s test timeout.
GRACE = "60"


async def _stream_ends_on_sigterm(stack: LocalStack, name: str, open_stream: object) -> float:
    async with aio_channel(stack.addresses[name]) as ch:
        call = open_stream(ch)  # type: ignore[operator]
        reader = asyncio.ensure_future(_drain(call))
        await asyncio.sleep(0.5)  # the stream is open and idle
        assert not reader.done()
        t0 = time.monotonic()
        code = await stack.stop(name, sig=signal.SIGTERM, timeout_s=55)
        elapsed = time.monotonic() - t0
        assert code == 0, stack.log_tail(name)
        await asyncio.wait_for(reader, 5)
        return elapsed


async def _drain(call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
    async for _ in call:
        pass


async def test_tail_ends_at_once_on_sigterm(
    stack_factory: type[LocalStack], tmp_path: Path
) -> None:
    stack = stack_factory(tmp_path / "s", env={"audit": {"STOCKADE_AUDIT_GRACE_SECONDS": GRACE}})
    await stack.start(["audit"])
    elapsed = await _stream_ends_on_sigterm(
        stack, "audit", lambda ch: au_grpc.AuditServiceStub(ch).Tail(au_pb2.TailRequest())
    )
    assert elapsed < float(GRACE) / 2


async def test_watch_approvals_ends_at_once_on_sigterm(
    stack_factory: type[LocalStack], tmp_path: Path
) -> None:
    stack = stack_factory(
        tmp_path / "s", env={"decision": {"STOCKADE_DECISION_GRACE_SECONDS": GRACE}}
    )
    await stack.start(["decision"])
    elapsed = await _stream_ends_on_sigterm(
        stack,
        "decision",
        lambda ch: d_grpc.DecisionServiceStub(ch).WatchApprovals(d_pb2.WatchApprovalsRequest()),
    )
    assert elapsed < float(GRACE) / 2
