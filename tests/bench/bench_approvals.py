"""Approvals and the session cache do not grow with history (#12 items 3 and 5).

APPR-1: one ask-flow round trip (Decide's look-up of the call's pending approval, create,
resolve, the waiter's answer) on a store holding 100,000 earlier approvals, as a ratio
against the same round trip on a store holding 2,000 (before the indexes it was 13×).
SESS-1: memory the decision store's session cache holds after 20,000 sessions, as a
ratio against 2,000 sessions, with the cache bounded at 2,000 (before the LRU it grew
linearly: about 1.8 KB per session).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import aiosqlite

from stockade.decision.approvals import ApprovalBroker, Resolution
from stockade.decision.modes import Mode
from stockade.decision.store import PendingCall, SQLiteDecisionStore
from tests.bench.common import figure

ROUNDS = 300
SMALL, LARGE = 2_000, 100_000


async def _fill(path: Path, n: int) -> None:
    """``n`` answered approvals spread over 500 sessions, inserted in one transaction."""
    async with aiosqlite.connect(str(path)) as db:
        now = time.time()
        call = json.dumps({"call_id": "c", "tool_name": "file_write", "arguments": {}})
        await db.executemany(
            "INSERT OR IGNORE INTO sessions (session_id, mode, create_time) VALUES (?, ?, ?)",
            [(f"hist-{i}", "default", now) for i in range(500)],
        )
        await db.executemany(
            "INSERT INTO approvals (approval_id, session_id, call_id, call_json, reason, risk, "
            "summary, state, create_time, expire_time, finish_time) "
            "VALUES (?, ?, ?, ?, 'r', 'low', 's', 'allowed', ?, ?, ?)",
            [
                (f"old-{i}", f"hist-{i % 500}", f"call-{i}", call, now, now + 60, now)
                for i in range(n)
            ],
        )
        await db.commit()


async def _round_trips(stored: int) -> float:
    """Seconds per ask-flow round trip with ``stored`` earlier approvals."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.db"
        store = await SQLiteDecisionStore.open(path)
        await store.close()
        await _fill(path, stored)
        store = await SQLiteDecisionStore.open(path)
        try:
            await store.create_session("bench", Mode.DEFAULT)
            broker = ApprovalBroker(store)
            started = time.perf_counter()
            for i in range(ROUNDS):
                assert await store.pending_for_call("bench", f"b{i}") is None
                rec = await broker.create(
                    "bench",
                    PendingCall(f"b{i}", "file_write", {"file_path": f"/w/{i}"}),
                    reason="r",
                    risk="low",
                    summary="s",
                    timeout_s=60,
                )
                waiter = asyncio.ensure_future(broker.wait(rec.approval_id))
                await broker.resolve(rec.approval_id, Resolution.ALLOW_ONCE, resolver="bench")
                await waiter
            return (time.perf_counter() - started) / ROUNDS
        finally:
            await store.close()


async def _cache_bytes(sessions: int, bound: int) -> int:
    """Bytes the store holds after ``sessions`` sessions each made a call."""
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteDecisionStore.open(Path(tmp) / "c.db", cache_max_sessions=bound)
        try:
            await store._db.executemany(
                "INSERT INTO sessions (session_id, mode, create_time) VALUES (?, 'default', 0)",
                [(f"ses-{i:06d}",) for i in range(sessions)],
            )
            await store._db.commit()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            for i in range(sessions):
                await store.session_rules(f"ses-{i:06d}")
            held = tracemalloc.get_traced_memory()[0] - base
            tracemalloc.stop()
            return held
        finally:
            await store.close()


def run() -> list[dict[str, Any]]:
    """APPR-1 and SESS-1."""
    small = asyncio.run(_round_trips(SMALL))
    large = asyncio.run(_round_trips(LARGE))
    few = asyncio.run(_cache_bytes(2_000, 2_000))
    many = asyncio.run(_cache_bytes(20_000, 2_000))
    return [
        figure(
            "APPR-1",
            f"ask-flow round trip with {LARGE:,} stored approvals vs {SMALL:,}",
            large * 1000,
            "ms",
            baseline=small * 1000,
            ratio=large / small,
            target="<= 1.5",
        ),
        figure(
            "SESS-1",
            "session cache memory after 20,000 sessions vs 2,000 (bound 2,000)",
            many / 1e6,
            "MB",
            baseline=few / 1e6,
            ratio=many / few,
            target="<= 1.2",
        ),
    ]
