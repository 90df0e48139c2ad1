"""The audit client: a producer that never blocks or loses events, and typed queries.

``AuditRecorder`` is what the agent uses (its ``enqueue`` is the ``AuditSink`` of the
AuditLog hook): events go into a bounded in-memory buffer and a background task sends
them in batches over ``RecordBatch``. When the service cannot be reached the events go
to a local append-only spool (``stockade.client.spool``) and, once everything older is
spooled, newer events follow them there, so the order is kept; the sender replays the
spool, oldest first, with jittered exponential backoff, and only then returns to the
buffer. A batch the service may or may not have stored is sent again; the service
ignores repeated event ids (AUD-4). ``close`` flushes what it can and spools the rest
for the next run.

``AuditClient`` wraps the query side (Query, Tail, GetSessionMetrics, VerifyLog) with
deadlines; ``SyncAuditClient`` is its blocking facade for scripts and the CLI.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from opentelemetry import metrics

from stockade.audit.metrics import client_instruments
from stockade.client.base import DEFAULT_DEADLINE_S, TlsConfig, aio_channel, sync_channel
from stockade.client.spool import Spool
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc

log = logging.getLogger("stockade.client.audit")


def recorder_channel(address: str, *, tls: TlsConfig | None = None) -> grpc.aio.Channel:
    """The recorder's channel: tracing interceptors and a short reconnect backoff."""
    return aio_channel(address, tls=tls)


class AuditRecorder:
    """Fire-and-forget audit producer with batching, retries, spooling and replay."""

    def __init__(
        self,
        address: str,
        spool_path: str | Path,
        *,
        tls: TlsConfig | None = None,
        channel: grpc.aio.Channel | None = None,
        batch_events: int = 500,
        messages_per_call: int = 8,
        max_buffer: int = 10_000,
        linger_s: float = 0.02,
        deadline_s: float = DEFAULT_DEADLINE_S,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 2.0,
        spool_max_bytes: int = 1 << 30,
        meter: metrics.Meter | None = None,
    ) -> None:
        """Prepare the recorder; ``start`` (or ``async with``) begins sending.

        ``batch_events`` events travel per streamed message, up to ``messages_per_call``
        messages per RecordBatch call; at most ``max_buffer`` events wait in memory
        before newer ones go to the spool at ``spool_path``.
        """
        self._own_channel = channel is None
        self._channel = channel if channel is not None else recorder_channel(address, tls=tls)
        self._stub = a_grpc.AuditServiceStub(self._channel)
        self._spool = Spool(Path(spool_path), max_bytes=spool_max_bytes)
        self._buffer: deque[a_pb2.AuditEvent] = deque()
        self._lock = threading.Lock()
        self._spills = 0
        self._batch_events = batch_events
        self._messages_per_call = messages_per_call
        self._max_buffer = max_buffer
        self._linger_s = linger_s
        self._deadline_s = deadline_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._closing = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._instruments = client_instruments(meter)
        self.sent = 0
        """Events acknowledged by the service (new or duplicate) since start."""
        self.dropped = 0
        """Events the service refused as malformed (logged; they can never be stored)."""
        self._instruments.spool_size.add(self._spool.pending)
        if self._spool.pending:
            log.info("audit spool %s holds %d events to replay", spool_path, self._spool.pending)

    # -- producer side (never blocks on the network) ------------------------------------

    def enqueue(self, event: a_pb2.AuditEvent) -> None:
        """Queue one event and return at once (thread-safe).

        Raises ``SpoolFull`` only if the service is down *and* the spool reached its
        size limit: the caller learns about the loss instead of it being silent.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the audit recorder is closed")
            if self._spool.pending or len(self._buffer) >= self._max_buffer:
                # Something older is on disk (or memory is full): keep the order by
                # putting this event, and everything buffered before it, behind it there.
                self._spill_locked([event])
            else:
                self._buffer.append(event)
                self._instruments.queue_depth.add(1)
        self._poke()

    def enqueue_many(self, events: Sequence[a_pb2.AuditEvent]) -> None:
        """Queue several events in order (thread-safe, non-blocking)."""
        for event in events:
            self.enqueue(event)

    def _spill_locked(self, extra: Sequence[a_pb2.AuditEvent]) -> None:
        """Move the buffer, then ``extra``, to the end of the spool (caller holds the lock)."""
        events = [*self._buffer, *extra]
        self._spool.append([e.SerializeToString() for e in events])
        self._instruments.queue_depth.add(-len(self._buffer))
        self._instruments.spool_size.add(len(events))
        self._buffer.clear()
        self._spills += 1

    def _poke(self) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake.set()
            return
        try:
            loop.call_soon_threadsafe(self._wake.set)
        except RuntimeError:
            pass  # the loop has ended: the event stays queued and close() spools it

    @property
    def pending(self) -> int:
        """Events not yet acknowledged (in memory plus spooled)."""
        with self._lock:
            return len(self._buffer) + self._spool.pending

    @property
    def spooled(self) -> int:
        """Events in the spool."""
        return self._spool.pending

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> AuditRecorder:
        """Start the background sender (idempotent)."""
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.create_task(self._run(), name="audit-recorder")
        return self

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued event is acknowledged; False on timeout."""
        if self._task is None:
            await self.start()
        try:
            async with asyncio.timeout(timeout_s):
                while self.pending:
                    self._idle.clear()
                    self._wake.set()
                    await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def close(self, timeout_s: float = 10.0) -> None:
        """Flush for up to ``timeout_s``; spool whatever is left; close the channel."""
        if self._closed:
            return
        flushed = await self.flush(timeout_s) if self._task is not None else not self.pending
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        with self._lock:
            if self._buffer:
                self._spill_locked([])
            self._closed = True
        if not flushed:
            log.warning("audit: %d events left in spool %s", self._spool.pending, self._spool.path)
        # They stay on disk for the next recorder, which counts them when it opens.
        self._instruments.spool_size.add(-self._spool.pending)
        self._spool.close()
        if self._own_channel:
            await self._channel.close(None)

    async def aclose(self) -> None:
        """Flush and close (the name the agent's audit sink uses)."""
        await self.close()

    async def __aenter__(self) -> AuditRecorder:
        """Start sending."""
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        """Flush and close."""
        await self.close()

    # -- sender ------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = self._backoff_initial_s
        while True:
            if not self.pending:
                self._idle.set()
                await self._wake.wait()
                self._wake.clear()
                if self._linger_s and self.pending < self._batch_events and not self._closing:
                    # Let a burst gather into one batch instead of many tiny ones.
                    await asyncio.sleep(self._linger_s)
                continue
            try:
                await self._send_some()
                delay = self._backoff_initial_s
            except Exception as err:
                # _RetryLater, a full spool, anything unexpected: the sender must survive.
                log.warning("audit delivery failed (%s); retrying in %.2fs", err, delay)
                self._idle.set()  # let flush() re-check its timeout
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, self._backoff_max_s)

    async def _send_some(self) -> None:
        """Send one call's worth: the spool first (it is older), else the buffer."""
        limit = self._batch_events * self._messages_per_call
        if self._spool.pending:
            payloads, offset = self._spool.peek(limit)
            events = [a_pb2.AuditEvent.FromString(p) for p in payloads]
            await self._deliver(events)
            with self._lock:
                self._spool.ack(offset, len(payloads))
            self._instruments.spool_size.add(-len(payloads))
            return
        # Events stay at the front of the buffer while in flight, so a spill meanwhile
        # (buffer full, or a failure) writes them to disk ahead of anything newer.
        with self._lock:
            events = [self._buffer[i] for i in range(min(limit, len(self._buffer)))]
            generation = self._spills
        delivered = False
        try:
            await self._deliver(events)
            delivered = True
        finally:
            with self._lock:
                if generation == self._spills:
                    if delivered:
                        for _ in events:
                            self._buffer.popleft()
                        self._instruments.queue_depth.add(-len(events))
                    else:
                        # Unknown whether they were stored: to disk, in order; the
                        # replay resends them and the service drops what it has.
                        self._spill_locked([])
                # Otherwise they were spilled while in flight and will be resent from
                # the spool; the service ignores the duplicates.

    async def _deliver(self, events: list[a_pb2.AuditEvent]) -> None:
        """Send ``events`` in one RecordBatch call; isolate malformed events if refused.

        Every failure other than INVALID_ARGUMENT is retried later: the events are kept
        (the service may be down, overloaded, restarting, or misconfigured for a while).
        """
        try:
            await self._record_batch(events)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                await self._deliver_one_by_one(events)
                return
            raise _RetryLater(f"{err.code().name}: {err.details()}") from None

    async def _record_batch(self, events: list[a_pb2.AuditEvent]) -> None:
        size = self._batch_events

        async def messages() -> AsyncIterator[a_pb2.RecordBatchRequest]:
            for start in range(0, len(events), size):
                yield a_pb2.RecordBatchRequest(events=events[start : start + size])

        await self._stub.RecordBatch(messages(), timeout=self._deadline_s)
        self.sent += len(events)
        self._instruments.events_sent.add(len(events))

    async def _deliver_one_by_one(self, events: list[a_pb2.AuditEvent]) -> None:
        for event in events:
            try:
                await self._stub.Record(a_pb2.RecordRequest(event=event), timeout=self._deadline_s)
                self.sent += 1
                self._instruments.events_sent.add(1)
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    raise _RetryLater(f"{err.code().name}: {err.details()}") from None
                self.dropped += 1
                log.error(
                    "audit service refused event %s of session %s: %s",
                    event.event_id,
                    event.session_id,
                    err.details(),
                )


class _RetryLater(Exception):
    """The batch could not be delivered now; try again after a backoff."""


class AuditClient:
    """Async queries of the audit service, each with a deadline."""

    def __init__(
        self,
        address: str,
        *,
        tls: TlsConfig | None = None,
        channel: grpc.aio.Channel | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        """Connect to ``address`` (or use ``channel``)."""
        self._own_channel = channel is None
        self._channel = channel if channel is not None else aio_channel(address, tls=tls)
        self.stub = a_grpc.AuditServiceStub(self._channel)
        self._deadline_s = deadline_s

    async def record(self, event: a_pb2.AuditEvent) -> bool:
        """Store one event synchronously (no spooling); True when it was a duplicate."""
        response = await self.stub.Record(
            a_pb2.RecordRequest(event=event), timeout=self._deadline_s
        )
        return response.duplicate

    async def query(self, request: a_pb2.QueryRequest) -> a_pb2.QueryResponse:
        """One page of rows, newest first."""
        return await self.stub.Query(request, timeout=self._deadline_s)

    async def query_all(
        self, request: a_pb2.QueryRequest, limit: int | None = None
    ) -> AsyncIterator[a_pb2.AuditRecord]:
        """Every matching row, newest first, following page tokens (up to ``limit``)."""
        page = a_pb2.QueryRequest()
        page.CopyFrom(request)
        count = 0
        while True:
            response = await self.query(page)
            for record in response.records:
                if limit is not None and count >= limit:
                    return
                count += 1
                yield record
            if not response.next_page_token:
                return
            page.page_token = response.next_page_token

    async def tail(
        self, session_id: str = "", after_sequence: int = 0
    ) -> AsyncIterator[a_pb2.AuditRecord]:
        """Rows as they are stored, from the head or after ``after_sequence`` (no deadline:
        the stream runs until cancelled)."""
        call = self.stub.Tail(
            a_pb2.TailRequest(session_id=session_id, after_sequence=after_sequence)
        )
        async for response in call:
            yield response.record

    async def session_metrics(self, session_id: str) -> a_pb2.GetSessionMetricsResponse:
        """The per-session metrics snapshot."""
        return await self.stub.GetSessionMetrics(
            a_pb2.GetSessionMetricsRequest(session_id=session_id), timeout=self._deadline_s
        )

    async def verify(self, deadline_s: float = 300.0) -> a_pb2.VerifyLogResponse:
        """Check the hash chain (long deadline: it reads the whole log)."""
        return await self.stub.VerifyLog(a_pb2.VerifyLogRequest(), timeout=deadline_s)

    async def close(self) -> None:
        """Close the channel if this client opened it."""
        if self._own_channel:
            await self._channel.close(None)

    async def __aenter__(self) -> AuditClient:
        """Use as an async context manager."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close."""
        await self.close()


class SyncAuditClient:
    """Blocking facade of ``AuditClient`` for scripts and the CLI."""

    def __init__(
        self,
        address: str,
        *,
        tls: TlsConfig | None = None,
        deadline_s: float = DEFAULT_DEADLINE_S,
    ) -> None:
        """Connect to ``address``."""
        self._channel = sync_channel(address, tls=tls)
        self.stub = a_grpc.AuditServiceStub(self._channel)
        self._deadline_s = deadline_s

    def query(self, request: a_pb2.QueryRequest) -> a_pb2.QueryResponse:
        """One page of rows, newest first."""
        response: a_pb2.QueryResponse = self.stub.Query(request, timeout=self._deadline_s)
        return response

    def query_all(
        self, request: a_pb2.QueryRequest, limit: int | None = None
    ) -> Iterator[a_pb2.AuditRecord]:
        """Every matching row, newest first, following page tokens (up to ``limit``)."""
        page = a_pb2.QueryRequest()
        page.CopyFrom(request)
        count = 0
        while True:
            response = self.query(page)
            for record in response.records:
                if limit is not None and count >= limit:
                    return
                count += 1
                yield record
            if not response.next_page_token:
                return
            page.page_token = response.next_page_token

    def tail(self, session_id: str = "", after_sequence: int = 0) -> Iterator[a_pb2.AuditRecord]:
        """Rows as they are stored (from the head or after ``after_sequence``), until the
        stream ends or the caller stops."""
        call: Any = self.stub.Tail(
            a_pb2.TailRequest(session_id=session_id, after_sequence=after_sequence)
        )
        try:
            for response in call:
                yield response.record
        finally:
            call.cancel()

    def session_metrics(self, session_id: str) -> a_pb2.GetSessionMetricsResponse:
        """The per-session metrics snapshot."""
        response: a_pb2.GetSessionMetricsResponse = self.stub.GetSessionMetrics(
            a_pb2.GetSessionMetricsRequest(session_id=session_id), timeout=self._deadline_s
        )
        return response

    def verify(self, deadline_s: float = 300.0) -> a_pb2.VerifyLogResponse:
        """Check the hash chain."""
        response: a_pb2.VerifyLogResponse = self.stub.VerifyLog(
            a_pb2.VerifyLogRequest(), timeout=deadline_s
        )
        return response

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> SyncAuditClient:
        """Use as a context manager."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close."""
        self.close()
