"""A server built with the shared plumbing whose one RPC sleeps; run as a subprocess by
test_lifecycle.py to check SIGTERM drains in-flight calls."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from stockade.server import Registration, ServerSettings, load_settings, serve


async def _sleep(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    started = os.environ.get("SLOW_SERVER_STARTED")
    if started:  # tell the test the call is in flight (no guessing with a sleep)
        with open(started, "a") as fh:
            fh.write("started\n")
    await asyncio.sleep(float(request.decode()))
    return b"finished"


def _add(servicer: object, server: grpc.aio.Server) -> None:
    handler = grpc.method_handlers_generic_handler(
        "stockade.test.Slow", {"Sleep": grpc.unary_unary_rpc_method_handler(_sleep)}
    )
    server.add_generic_rpc_handlers((handler,))


@dataclass
class SlowApp:
    settings: ServerSettings = field(default_factory=lambda: load_settings(ServerSettings))
    name: str = "slow"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        yield [Registration(_add, None, "stockade.test.Slow")]


if __name__ == "__main__":
    raise SystemExit(serve([SlowApp()]))
