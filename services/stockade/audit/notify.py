"""An in-process signal that new rows were committed, for the live tail.

Subscribers do not receive rows through a queue (a slow reader would either pin memory
or lose rows); they wait for the head sequence to move past what they have seen and then
read the new rows from the store. Memory stays constant however many rows arrive.
"""

from __future__ import annotations

import asyncio


class HeadWatch:
    """Tracks the log's head sequence and wakes waiters when it moves."""

    def __init__(self, head: int = 0) -> None:
        """Start at ``head`` (the last committed sequence)."""
        self._head = head
        self._moved = asyncio.Event()
        self._closed = False

    @property
    def head(self) -> int:
        """The last committed sequence."""
        return self._head

    @property
    def closed(self) -> bool:
        """True after ``close``: no more rows will come."""
        return self._closed

    def publish(self, head: int) -> None:
        """Record a new head and wake every waiter."""
        if head <= self._head:
            return
        self._head = head
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def close(self) -> None:
        """Wake every waiter for good (the store is closing)."""
        self._closed = True
        self._moved.set()

    async def wait_past(self, seen: int) -> int:
        """Wait until the head is beyond ``seen`` (or the watch closes); return the head."""
        while self._head <= seen and not self._closed:
            await self._moved.wait()
        return self._head
