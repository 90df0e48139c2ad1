"""The "server is stopping" signal for streams that would otherwise never end.

A graceful stop lets in-flight calls finish within the grace period; a Tail or
WatchApprovals stream never finishes by itself and would hold the shutdown for the whole
grace. ``run_apps`` sets ``stopping()`` first, and such streams wrap their source in
``until_stopping`` so they end at once, cleanly (status OK), and the caller reconnects to
another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("stockade.server")

_events: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
    weakref.WeakKeyDictionary()
)


def stopping() -> asyncio.Event:
    """The running loop's stopping event (set once shutdown begins)."""
    loop = asyncio.get_running_loop()
    event = _events.get(loop)
    if event is None:
        event = _events[loop] = asyncio.Event()
    return event


async def until_stopping(source: AsyncIterator[T]) -> AsyncIterator[T]:
    """Items of ``source`` until it ends or the server starts stopping.

    The caller leaving the stream cancels the handler while it waits here for the next
    item; the pending ``anext`` is then cancelled and awaited *before* the source is
    closed (closing a generator that is still running raises ``RuntimeError: aclose():
    asynchronous generator is already running``, which used to be logged as an ERROR on
    every normal disconnect).
    """
    stop = asyncio.ensure_future(stopping().wait())
    iterator = aiter(source)
    item: asyncio.Future[T] | None = None
    try:
        while not stop.done():
            item = asyncio.ensure_future(anext(iterator))
            await asyncio.wait({item, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not item.done():
                return  # stopping: the finally below cancels the pending read
            try:
                value = item.result()
            except StopAsyncIteration:
                return
            item = None
            yield value
    finally:
        stop.cancel()
        if item is not None and not item.done():
            # Let the source see the cancellation (its own finally runs) before it is closed.
            item.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await item
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
        log.debug("stream source closed")
