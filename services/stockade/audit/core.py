"""The audit service's core: the one object the servicer calls, one method per RPC.

It holds the store the DSN chose (SQLite or PostgreSQL, ``AuditBackend``) and the duties
around it that are not storage: the pipelined intake of a stream of batches, the bounds of
a query or a tail, retention, and the signed chain heads (STORE-4). It works on the
domain's value objects (``stockade.audit.model``) and never imports gRPC; ``convert``
maps protobuf to and from them, ``servicer`` is that mapping and nothing else, and
``app`` opens the store and builds this object.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from stockade.audit.heads import SignedHead
from stockade.audit.model import (
    AppendResult,
    AuditEventRow,
    QueryFilters,
    SessionMetrics,
    StoredRow,
    VerifyResult,
)
from stockade.audit.store.base import AuditBackend
from stockade.errors import InvalidArgument

log = logging.getLogger("stockade.audit")
#: Signed chain heads go to their own logger, so a pipeline can route them elsewhere.
heads_log = logging.getLogger("stockade.audit.heads")

#: Batches of one RecordBatch stream handed to the store at once: while the store writes
#: one (SQLite's writer thread, PostgreSQL's server), the next is hashed or queued and the
#: one after is converted, so neither the event loop nor the writer waits for the other.
STREAM_WRITES_IN_FLIGHT = 2

HeadSink = Callable[[SignedHead], None]
"""Where a signed head goes besides the log (the OpenTelemetry log record exporter)."""


class AuditCore:
    """The audit log as the service offers it: record, query, tail, metrics, verify."""

    def __init__(
        self,
        store: AuditBackend,
        *,
        head_key: Ed25519PrivateKey | None = None,
        head_sinks: Sequence[HeadSink] = (),
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        """Serve ``store``; sign its chain head with ``head_key`` (None: no heads) and
        hand each signed head to ``head_sinks`` as well as to the log."""
        self.store = store
        self._head_key = head_key
        self._head_sinks = tuple(head_sinks)
        self._clock = clock

    # -- one method per RPC ------------------------------------------------------------

    async def record(self, row: AuditEventRow) -> AppendResult:
        """Store one event (Record); a repeated event id is a duplicate, not an error."""
        return await self.store.append([row])

    async def record_stream(self, batches: AsyncIterable[list[AuditEventRow]]) -> AppendResult:
        """Store the batches of a stream (RecordBatch), each written whole; the store may
        commit several batches, of this stream or others, in one transaction.

        Up to ``STREAM_WRITES_IN_FLIGHT`` batches are handed to the store while the next
        is read and converted, never more: the stream is not read further until the
        oldest of them is written, so flow control pushes back on a producer faster than
        the disk (bounded memory). A batch the store refuses (``InvalidArgument``) ends the
        stream before any later batch is handed over. Returns the totals.
        """
        accepted = duplicates = 0
        writing: deque[asyncio.Task[AppendResult]] = deque()
        try:
            async for rows in batches:
                if len(writing) >= STREAM_WRITES_IN_FLIGHT:
                    result = await writing[0]
                    writing.popleft()
                    accepted += result.accepted
                    duplicates += result.duplicates
                task = asyncio.ensure_future(self.store.append(rows))
                writing.append(task)
                # One turn of the loop: the store validates a batch synchronously on its
                # first step, so a refused batch is seen here, before the next is read.
                await asyncio.sleep(0)
                if task.done():
                    result = await task  # raises for a refused batch
                    writing.remove(task)
                    accepted += result.accepted
                    duplicates += result.duplicates
            while writing:
                result = await writing[0]
                writing.popleft()
                accepted += result.accepted
                duplicates += result.duplicates
        finally:
            if writing:
                # The stream failed mid-way: the writes in progress still complete whole
                # (the store shields them); wait so no task outlives the call.
                await asyncio.wait(writing)
                for task in writing:
                    if not task.cancelled():
                        task.exception()  # retrieved, so asyncio does not warn about it
        return AppendResult(accepted, duplicates, self.store.head_sequence)

    async def query(
        self, filters: QueryFilters, page_size: int, page_token: str
    ) -> tuple[list[StoredRow], str]:
        """One page of matching rows, newest first, and the token of the next (Query)."""
        return await self.store.query(filters, page_size, page_token)

    def tail(self, session_id: str, after_sequence: int) -> AsyncIterator[StoredRow]:
        """Rows as they are committed, after ``after_sequence`` (0: from the head), until
        the store closes (Tail). A plain iterator, not a generator of this object's, so the
        servicer can end it when the caller leaves or the server stops."""
        if after_sequence < 0:
            raise InvalidArgument("after_sequence must not be negative", field="after_sequence")
        return self.store.tail(session_id, after=after_sequence or None)

    async def session_metrics(self, session_id: str) -> SessionMetrics:
        """One session's metrics snapshot (GetSessionMetrics)."""
        return await self.store.session_metrics(session_id)

    async def verify(self) -> VerifyResult:
        """Check every hash chain; name each chain's first broken row (VerifyLog)."""
        return await self.store.verify()

    # -- duties the app schedules ------------------------------------------------------

    async def apply_retention(self, days: float) -> int:
        """Delete rows stored more than ``days`` ago; return how many."""
        deleted = await self.store.apply_retention(days)
        if deleted:
            log.info("retention: deleted %d rows older than %s days", deleted, days)
        return deleted

    @property
    def signs_heads(self) -> bool:
        """True when a head-signing key is configured."""
        return self._head_key is not None

    async def export_head(self) -> SignedHead:
        """Sign the chain's current head and export it: one log line (``HEAD_PREFIX`` +
        JSON, logger ``stockade.audit.heads``) and every head sink."""
        if self._head_key is None:
            raise InvalidArgument("no head-signing key is configured")
        chain_id, sequence, digest = await self.store.chain_head()
        head = SignedHead(chain_id, sequence, digest, self._clock()).signed(self._head_key)
        heads_log.info("%s", head.log_message())
        for sink in self._head_sinks:
            try:
                sink(head)
            except Exception:  # one exporter failing must not stop the others or the log
                log.exception("exporting the signed chain head failed")
        return head
