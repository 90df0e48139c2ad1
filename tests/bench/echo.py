"""``python -m tests.bench.echo ADDRESS``: the echo server of :mod:`tests.bench.common` in
a process of its own, for baselines of RPCs that cross processes (the services run as
processes of their own in every deployment)."""

from __future__ import annotations

import asyncio
import sys

from tests.bench.common import echo_server


async def _serve(address: str) -> None:
    async with echo_server(address) as bound:
        print(bound, flush=True)
        await asyncio.Event().wait()  # until the benchmark kills us


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1]))
