"""The console's approval feed over a real decision server: it mirrors pending approvals,
reconnects when the stream drops (the server restarts) and gets the backlog again, and
bounds both what it keeps and what each browser may fall behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from google.protobuf import struct_pb2

from stockade.console.feed import CLIENT_QUEUE, ApprovalFeed, TooManyClients
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

POLICY = '[permissions]\nask = ["file_write"]\n[limits]\napproval_timeout_seconds = 120\n'


@asynccontextmanager
async def decision(tmp: Path, listen: str) -> AsyncIterator[str]:
    (tmp / "policy.toml").write_text(POLICY)
    settings = load_settings(
        DecisionSettings,
        listen=listen,
        state_dir=tmp / "state",
        policy_file=tmp / "policy.toml",
        admin_tokens=["t" * 20],
    )
    async with DecisionApp(settings).open() as regs:
        running = await create_server("decision", settings, regs)
        try:
            yield running.address
        finally:
            await stop_server(running)


async def ask(stub: d_grpc.DecisionServiceAsyncStub, call_id: str) -> str:
    args = struct_pb2.Struct()
    args.update({"file_path": f"{call_id}.md", "content": "x"})
    resp = await stub.Decide(
        d_pb2.DecideRequest(
            call=c_pb2.ToolCall(call_id=call_id, tool_name="file_write", arguments=args,
                                session_id="s1")
        ),
        timeout=10,
        wait_for_ready=True,
    )  # fmt: skip
    assert resp.verdict == c_pb2.VERDICT_ASK
    return resp.approval_id


async def until(check: object, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not check():  # type: ignore[operator]
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_the_feed_reconnects_and_reads_the_backlog_again(tmp_path: Path) -> None:
    listen = f"unix://{tmp_path}/decision.sock"
    async with grpc.aio.insecure_channel(listen) as channel:
        stub: d_grpc.DecisionServiceAsyncStub = d_grpc.DecisionServiceStub(channel)  # type: ignore[assignment]
        feed = ApprovalFeed(stub, backoff_initial_s=0.05, backoff_max_s=0.2)
        async with decision(tmp_path, listen):
            first = await ask(stub, "c1")
            feed.start()
            await until(lambda: [a.approval_id for a in feed.pending()] == [first], "backlog")
        # The server is gone: the stream ends; a new server on the same socket (the same
        # SQLite state, as after a restart) gets a new stream with the backlog.
        await until(lambda: not feed.connected.is_set(), "the stream to drop")
        async with decision(tmp_path, listen):
            await until(lambda: feed.connected.is_set() and feed.reconnects >= 1, "reconnect")
            second = await ask(stub, "c2")
            await until(
                lambda: [a.approval_id for a in feed.pending()] == [first, second], "both pending"
            )
        await feed.close()


async def test_bounds_on_pending_and_on_slow_browsers(tmp_path: Path) -> None:
    listen = f"unix://{tmp_path}/decision.sock"
    async with decision(tmp_path, listen), grpc.aio.insecure_channel(listen) as channel:
        stub: d_grpc.DecisionServiceAsyncStub = d_grpc.DecisionServiceStub(channel)  # type: ignore[assignment]
        feed = ApprovalFeed(stub, max_pending=2, max_clients=1)
        feed.start()
        await until(feed.connected.is_set, "the stream")
        slow = feed.follow()  # a browser that never reads
        try:
            feed.follow()
            raise AssertionError("a second follower passed max_clients=1")
        except TooManyClients as exc:
            assert "1 browsers" in str(exc)
        ids = [await ask(stub, f"c{i}") for i in range(3)]
        await until(lambda: feed.overflow == 1, "the third to overflow")
        assert [a.approval_id for a in feed.pending()] == ids[:2]
        # Enough changes to fill the slow browser's queue: it is dropped, not buffered.
        for _ in range(CLIENT_QUEUE + 5):
            feed._broadcast(feed.pending()[0])  # the fan-out path the stream uses
            if feed.client_count == 0:
                break
        assert feed.client_count == 0
        got = [change async for change in slow]
        assert len(got) <= CLIENT_QUEUE  # ended, with what it had
        feed.follow()  # room again
        await feed.close()
