"""Background WAL checkpoints, off the writer's path.

In WAL mode SQLite normally copies the log back into the database (and syncs it) inside
whichever commit crosses ``wal_autocheckpoint``; at audit ingestion rates that stalls the
writer for a large share of its time. Here a separate connection runs a PASSIVE
checkpoint shortly after new rows arrive, on aiosqlite's thread, where SQLite works
without holding the GIL, so the copy overlaps the writer's next batches. The writer keeps
a large ``wal_autocheckpoint`` as a backstop should this fall behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3

import aiosqlite

from stockade.audit.notify import HeadWatch

log = logging.getLogger("stockade.audit")


class Checkpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` after new commits, at most every interval."""

    def __init__(self, db: aiosqlite.Connection, watch: HeadWatch, interval_s: float) -> None:
        """Use ``start`` instead."""
        self._db = db
        self._watch = watch
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.checkpoints = 0
        """Checkpoints run so far."""

    @classmethod
    async def start(
        cls, path: str | os.PathLike[str], watch: HeadWatch, interval_s: float = 0.2
    ) -> Checkpointer:
        """Open a connection to ``path`` and start checkpointing after commits."""
        db = await aiosqlite.connect(os.fspath(path), isolation_level=None)
        await db.execute("PRAGMA busy_timeout = 10000")
        checkpointer = cls(db, watch, interval_s)
        checkpointer._task = asyncio.create_task(checkpointer._run(), name="audit-checkpoint")
        return checkpointer

    async def _run(self) -> None:
        seen = self._watch.head
        while True:
            seen = await self._watch.wait_past(seen)
            if self._watch.closed:
                return
            # Let a few commits gather so one checkpoint copies them together.
            await asyncio.sleep(self._interval_s)
            seen = self._watch.head
            try:
                await self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                self.checkpoints += 1
            except sqlite3.Error as err:  # the writer's own autocheckpoint still runs
                log.warning("audit WAL checkpoint failed: %s", err)

    async def close(self) -> None:
        """Stop checkpointing and close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._db.close()
