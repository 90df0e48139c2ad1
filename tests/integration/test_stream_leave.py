"""A client leaving a server stream (approvals watch, audit tail) is normal: the server
cleans up and logs nothing above DEBUG (no ERROR with an ``aclose()`` traceback)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

DEADLINE_S = 30.0


async def _until(cond: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Records above DEBUG since the last ``caplog.clear()``."""
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno > logging.DEBUG
    ]


async def test_leaving_watch_approvals_logs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    pfile = tmp_path / "policy.toml"
    pfile.write_text('[permissions]\nallow = ["read_file"]\n')
    settings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        policy_file=pfile,
        workspace="/w",
    )
    async with DecisionApp(settings).open() as regs:
        broker = regs[0].servicer.core.broker
        srv = await create_server("decision", settings, regs)
        caplog.clear()  # start-up lines are not what this test is about
        try:
            for _ in range(3):  # several watchers leave, one after another
                async with grpc.aio.insecure_channel(srv.address) as ch:
                    call = d_grpc.DecisionServiceStub(ch).WatchApprovals(
                        d_pb2.WatchApprovalsRequest()
                    )
                    await _until(lambda: broker.watcher_count == 1, "the watcher")
                    call.cancel()
                await _until(lambda: broker.watcher_count == 0, "the watcher to leave")
            # A watcher whose channel simply closes (the process went away).
            ch = grpc.aio.insecure_channel(srv.address)
            call = d_grpc.DecisionServiceStub(ch).WatchApprovals(d_pb2.WatchApprovalsRequest())
            await _until(lambda: broker.watcher_count == 1, "the watcher")
            await ch.close(None)
            await _until(lambda: broker.watcher_count == 0, "the watcher to leave")
            assert _loud(caplog) == []
        finally:
            await stop_server(srv)


async def test_leaving_audit_tail_logs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = AuditSettings(listen="127.0.0.1:0", state_dir=tmp_path / "audit", grace_seconds=1)
    async with AuditApp(settings).open() as regs:
        servicer = next(r.servicer for r in regs if r.service_name.endswith("AuditService"))
        store = servicer.core.store
        open_tails: list[int] = []
        real_tail = store.tail

        async def counted_tail(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            # Counts the server-side generators still open, so the test waits for a
            # condition (the server finished cleaning up) rather than for a time.
            open_tails.append(1)
            try:
                async for row in real_tail(*args, **kwargs):
                    yield row
            finally:
                open_tails.pop()

        store.tail = counted_tail
        srv = await create_server("audit", settings, regs)
        caplog.clear()
        try:
            for _ in range(3):
                async with grpc.aio.insecure_channel(srv.address) as ch:
                    call = a_grpc.AuditServiceStub(ch).Tail(a_pb2.TailRequest())
                    await _until(lambda: len(open_tails) == 1, "the tail")
                    call.cancel()
                await _until(lambda: not open_tails, "the tail to end")
            assert _loud(caplog) == []
        finally:
            await stop_server(srv)
