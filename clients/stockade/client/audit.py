"""The audit client: a producer that never blocks, never loses events and never sticks,
and typed queries.

``AuditRecorder`` is what the agent uses (its ``enqueue`` is the ``AuditSink`` of the
AuditLog hook). Every event is written ahead to a local append-only spool
(``stockade.client.spool``) before ``enqueue`` returns, so a killed agent loses no event
of a call whose result it released (with ``fsync=True``, ``wait_durable`` also waits for
a group fsync, so power loss loses none either). A background task sends the spool,
oldest first, in batches over ``RecordBatch`` (each streamed message under
``MAX_MESSAGE_BYTES``), acknowledges what the service stored, and retries with jittered
exponential backoff while the service is unreachable. A batch the service may or may not
have stored is sent again; the service ignores repeated event ids (AUD-4).

Nothing can block the stream: JSON fields too long or too deep are cut to a marker
(``stockade.contract.audit_bounds``) before they are written, and an event the service refuses
as malformed (INVALID_ARGUMENT, or too big for a message) is never retried: it goes to a
dead-letter file next to the spool (``<spool>.rejected``) and a small stand-in row that
says it was refused (with the SHA-256 and size of what was sent) takes its place in the
trail, so the refusal shows in the log and in ``rejected``.

When the spool cannot be written (a full disk, the spool's size limit), events wait in a
bounded in-memory backlog that is written (or sent) when possible, in order, and
``blocked_reason`` tells the agent to refuse further calls: at once with
``disk_full_action="refuse"`` (the default: fail closed, like auditd's disk_full_action),
or only once ``max_backlog`` events wait with ``"backlog"``.

``AuditClient`` wraps the query side (Query, Tail, GetSessionMetrics, VerifyLog) with
deadlines; ``SyncAuditClient`` is its blocking facade for scripts and the CLI. Their
methods raise a ``stockade.client.errors.ServiceError`` on failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import grpc
from google.protobuf import json_format, struct_pb2
from opentelemetry import metrics

from stockade.client.audit_metrics import client_instruments
from stockade.client.base import (
    DEFAULT_DEADLINE_S,
    CallOptions,
    Metadata,
    TlsConfig,
    aio_channel,
    call_options,
    renamed_timeout,
    service_errors,
    sync_channel,
)
from stockade.client.spool import Spool, SpoolBusy, SpoolFull
from stockade.contract.audit_bounds import (
    MAX_EVENT_BYTES,
    MAX_JSON_CHARS,
    MAX_MESSAGE_BYTES,
    bound_json_text,
    cut_marker,
    refused_marker,
)
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2_grpc as a_grpc

log = logging.getLogger("stockade.client.audit")

DiskFullAction = Literal["refuse", "backlog"]
"""What the agent does while the spool cannot be written: refuse further calls, or go on
with a bounded in-memory backlog (refusing once it is full)."""

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_STATUSES = frozenset(a_pb2.AuditStatus.values()) - {a_pb2.AUDIT_STATUS_UNSPECIFIED}
# Per streamed event: the field tag and length prefix around its bytes.
_EVENT_OVERHEAD = 6
# How often a full disk is tried again while events wait in memory.
_DISK_RETRY_S = 0.25
CLOSE_FLUSH_S = 10.0
"""How long ``AuditRecorder.close`` waits for the spool to drain by default."""


def recorder_channel(address: str, *, tls: TlsConfig | None = None) -> grpc.aio.Channel:
    """The recorder's channel: tracing interceptors and a short reconnect backoff."""
    return aio_channel(address, tls=tls)


def _cut_struct(struct: struct_pb2.Struct, reason: str) -> struct_pb2.Struct:
    text = json.dumps(json_format.MessageToDict(struct), sort_keys=True, separators=(",", ":"))
    marker = struct_pb2.Struct()
    marker.update(json.loads(cut_marker(text, reason)))
    return marker


def bound_event(event: a_pb2.AuditEvent) -> a_pb2.AuditEvent:
    """``event``, or a copy whose over-long or over-deep JSON fields are cut markers.

    The typed arguments are cut to a marker object past ``MAX_JSON_CHARS`` bytes; typed
    conflicts that large leave the event, their cut marker taking their place in
    ``conflict_log`` (the one field that can say they were cut).
    """
    arguments = bound_json_text(event.arguments_json) if event.arguments_json else ""
    conflicts = bound_json_text(event.conflict_log) if event.conflict_log else ""
    big_struct = event.HasField("arguments") and event.arguments.ByteSize() > MAX_JSON_CHARS
    big_conflicts = bool(event.conflicts) and (
        sum(c.ByteSize() for c in event.conflicts) > MAX_JSON_CHARS
    )
    if (
        arguments == event.arguments_json
        and conflicts == event.conflict_log
        and not big_struct
        and not big_conflicts
    ):
        return event
    copy = a_pb2.AuditEvent()
    copy.CopyFrom(event)
    copy.arguments_json = arguments
    copy.conflict_log = conflicts
    if big_struct:
        copy.arguments.CopyFrom(_cut_struct(event.arguments, f"longer than {MAX_JSON_CHARS} bytes"))
    if big_conflicts:
        listed = [json_format.MessageToDict(c, preserving_proto_field_name=True)
                  for c in event.conflicts]  # fmt: skip
        copy.ClearField("conflicts")
        copy.conflict_log = cut_marker(
            json.dumps(listed, sort_keys=True, separators=(",", ":")),
            f"longer than {MAX_JSON_CHARS} bytes",
        )
    return copy


def refused_stand_in(event: a_pb2.AuditEvent, payload: bytes, reason: str) -> a_pb2.AuditEvent:
    """The small row stored in place of an event the service refused: what can be kept
    of its identity (cut to the service's limits), a preview saying it was refused and
    why, and the SHA-256 and size of the refused event in ``arguments``."""
    digest = hashlib.sha256(payload).hexdigest()
    tool = event.tool_name[:128] or "unknown"
    status = event.status if event.status in _STATUSES else a_pb2.AUDIT_STATUS_FAIL
    if status == a_pb2.AUDIT_STATUS_SESSION_STOP:
        tool = "session"
    elif tool == "session":
        status = a_pb2.AUDIT_STATUS_SESSION_STOP
    stand_in = a_pb2.AuditEvent(
        event_id=event.event_id if 0 < len(event.event_id) <= 128 else f"refused-{digest[:48]}",
        session_id=event.session_id[:256] or "unknown",
        step=max(0, event.step),
        tool_name=tool,
        status=status,
        elapsed_ms=max(0, event.elapsed_ms),
        output_preview=f"[audit event refused by the audit service: {reason}]"[:200],
        agent_name=event.agent_name[:128],
        call_id=event.call_id[:256],
        trace_id=event.trace_id if _TRACE_ID.fullmatch(event.trace_id) else "",
    )
    stand_in.arguments.update(json.loads(refused_marker(payload, reason)))
    if event.HasField("time") and event.time.seconds >= 0:
        stand_in.time.CopyFrom(event.time)
    return stand_in


class AuditBacklogFull(Exception):
    """The spool cannot be written and the in-memory backlog is at its hard limit: the
    event was not kept (the agent refuses calls long before this)."""


class AuditRecorder:
    """Fire-and-forget audit producer: write-ahead spool, batching, retries, dead letters."""

    def __init__(
        self,
        address: str,
        spool_path: str | Path,
        *,
        tls: TlsConfig | None = None,
        channel: grpc.aio.Channel | None = None,
        batch_events: int = 500,
        messages_per_call: int = 8,
        linger_s: float = 0.02,
        deadline_s: float = DEFAULT_DEADLINE_S,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 2.0,
        spool_max_bytes: int = 1 << 30,
        fsync: bool = False,
        disk_full_action: DiskFullAction = "refuse",
        max_backlog: int = 10_000,
        rejected_max_bytes: int = 64 << 20,
        meter: metrics.Meter | None = None,
    ) -> None:
        """Prepare the recorder; ``start`` (or ``async with``) begins sending.

        ``batch_events`` events (and at most ``MAX_MESSAGE_BYTES``) travel per streamed
        message, up to ``messages_per_call`` messages per RecordBatch call. ``fsync``
        makes ``wait_durable`` wait for a group fsync of the spool. While the spool
        cannot be written, up to ``max_backlog`` events wait in memory before
        ``blocked_reason`` refuses calls in ``"backlog"`` mode (``"refuse"`` refuses at
        once); twice that is the hard limit.
        """
        if disk_full_action not in ("refuse", "backlog"):
            raise ValueError("disk_full_action must be 'refuse' or 'backlog'")
        self._own_channel = channel is None
        self._channel = channel if channel is not None else recorder_channel(address, tls=tls)
        self._stub = a_grpc.AuditServiceStub(self._channel)
        self._spool = Spool(Path(spool_path), max_bytes=spool_max_bytes)
        self._rejected_path = Path(spool_path).with_name(Path(spool_path).name + ".rejected")
        self._rejected_max_bytes = rejected_max_bytes
        self._backlog: deque[bytes] = deque()
        self._backlog_generation = 0
        self._disk_error = ""
        self._disk_tried = 0.0
        self._lock = threading.Lock()
        self._batch_events = batch_events
        self._messages_per_call = messages_per_call
        self._linger_s = linger_s
        self._deadline_s = deadline_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._fsync = fsync
        self._disk_full_action = disk_full_action
        self._max_backlog = max_backlog
        self._appended = 0
        self._synced = 0
        self._sync_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._sync_wake = asyncio.Event()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._closing = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._instruments = client_instruments(meter)
        self.sent = 0
        """Events acknowledged by the service (new or duplicate) since start."""
        self.rejected = 0
        """Events the service refused as malformed or too big: each is in the dead-letter
        file and (unless that was refused too) replaced by a stand-in row."""
        self.dropped = 0
        """Refused events whose stand-in row was refused too (only in the dead letters)."""
        self.lost = 0
        """Events not kept at all: the spool unwritable and the backlog at its hard limit."""
        self.syncs = 0
        """Group fsyncs of the spool."""
        self._instruments.spool_size.add(self._spool.pending)
        if self._spool.pending:
            log.info("audit spool %s holds %d events to replay", spool_path, self._spool.pending)

    # -- producer side (never blocks on the network) ------------------------------------

    def enqueue(self, event: a_pb2.AuditEvent) -> None:
        """Write one event ahead to the spool and return (thread-safe, no network).

        Raises ``AuditBacklogFull`` only if the spool cannot be written *and* the
        in-memory backlog reached its hard limit (the caller learns about the loss).
        """
        event = bound_event(event)
        payload = event.SerializeToString()
        if len(payload) > MAX_EVENT_BYTES:
            reason = f"the event is {len(payload)} bytes, over the limit of {MAX_EVENT_BYTES}"
            self._dead_letter(payload, reason)
            payload = refused_stand_in(event, payload, reason).SerializeToString()
        with self._lock:
            if self._closed:
                raise RuntimeError("the audit recorder is closed")
            if self._backlog:
                # Older events wait in memory: this one goes behind them.
                if len(self._backlog) >= 2 * self._max_backlog:
                    self.lost += 1
                    raise AuditBacklogFull(
                        f"audit spool unwritable ({self._disk_error}) and "
                        f"{len(self._backlog)} events already wait in memory"
                    )
                self._backlog.append(payload)
                self._instruments.queue_depth.add(1)
                self._retry_disk_locked(force=False)
            else:
                try:
                    self._spool.append([payload])
                    self._appended += 1
                    self._instruments.spool_size.add(1)
                except (OSError, SpoolFull) as err:
                    self._disk_failed_locked(err)
                    self._backlog.append(payload)
                    self._instruments.queue_depth.add(1)
        self._poke()

    def enqueue_many(self, events: Sequence[a_pb2.AuditEvent]) -> None:
        """Queue several events in order (thread-safe, non-blocking)."""
        for event in events:
            self.enqueue(event)

    def _disk_failed_locked(self, err: Exception) -> None:
        if not self._disk_error:
            log.error(
                "audit spool %s cannot be written (%s): events wait in memory (%s mode)",
                self._spool.path,
                err,
                self._disk_full_action,
            )
        self._disk_error = str(err) or type(err).__name__
        self._disk_tried = time.monotonic()

    def _retry_disk_locked(self, *, force: bool) -> None:
        """Write the backlog to the spool if the disk takes it again (rate-limited)."""
        if not self._backlog:
            return
        now = time.monotonic()
        if not force and now - self._disk_tried < _DISK_RETRY_S:
            return
        self._disk_tried = now
        payloads = list(self._backlog)
        try:
            self._spool.append(payloads)
        except (OSError, SpoolFull) as err:
            self._disk_error = str(err) or type(err).__name__
            return
        log.warning("audit spool writable again: %d waiting events written", len(payloads))
        self._appended += len(payloads)
        self._instruments.spool_size.add(len(payloads))
        self._instruments.queue_depth.add(-len(payloads))
        self._backlog.clear()
        self._backlog_generation += 1
        self._disk_error = ""

    def blocked_reason(self) -> str:
        """Why further calls must be refused now ("" when they may run): the spool cannot
        be written (``"refuse"`` mode) or the in-memory backlog is full (``"backlog"``)."""
        with self._lock:
            waiting, error = len(self._backlog), self._disk_error
        if not waiting:
            return ""
        if self._disk_full_action == "refuse":
            return (
                f"the audit trail cannot be written ({error}); "
                f"{waiting} audit events wait in memory"
            )
        if waiting >= self._max_backlog:
            return (
                f"the audit trail cannot be written ({error}) and the in-memory backlog "
                f"is full ({waiting} of {self._max_backlog} events)"
            )
        return ""

    async def wait_durable(self) -> None:
        """Return once every event enqueued so far is durable: written to the spool (a
        killed process loses nothing), and fsynced too when ``fsync`` is on (one fsync
        serves every waiter: group commit). Events waiting in memory because the disk
        is full are not waited for (``blocked_reason`` refuses further calls instead)."""
        if not self._fsync:
            return
        with self._lock:
            target = self._appended
        if self._synced >= target:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sync_waiters.append((target, done))
        self._sync_wake.set()
        if self._sync_task is None:
            self._sync_task = asyncio.create_task(self._sync_loop(), name="audit-fsync")
        await done

    async def _sync_loop(self) -> None:
        while True:
            await self._sync_wake.wait()
            self._sync_wake.clear()
            if not self._sync_waiters:
                continue
            with self._lock:
                target = self._appended
                fd = os.dup(self._spool.fileno())
            try:
                await asyncio.to_thread(os.fsync, fd)
                self.syncs += 1
            except OSError as err:
                log.error("audit spool fsync failed: %s", err)
            finally:
                os.close(fd)
            self._synced = max(self._synced, target)
            waiting, self._sync_waiters = self._sync_waiters, []
            for wanted, done in waiting:
                if wanted <= target:
                    if not done.done():
                        done.set_result(None)
                else:
                    self._sync_waiters.append((wanted, done))
            if self._sync_waiters:
                self._sync_wake.set()

    def _dead_letter(self, payload: bytes, reason: str) -> None:
        """Keep a refused event in ``<spool>.rejected`` (bounded) and log it."""
        self.rejected += 1
        self._instruments.events_refused.add(1)
        log.error("audit event refused (%d bytes): %s", len(payload), reason)
        try:
            letters = Spool(self._rejected_path, max_bytes=self._rejected_max_bytes)
        except (OSError, SpoolBusy) as err:
            log.error("audit dead-letter file %s unusable: %s", self._rejected_path, err)
            return
        try:
            letters.append([payload])
        except (OSError, SpoolFull) as err:
            log.error("audit dead-letter file %s: %s", self._rejected_path, err)
        finally:
            letters.close()

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
            pass  # the loop has ended: the event is in the spool for the next run

    @property
    def pending(self) -> int:
        """Events not yet acknowledged (spooled plus waiting in memory)."""
        with self._lock:
            return len(self._backlog) + self._spool.pending

    @property
    def spooled(self) -> int:
        """Events in the spool, not yet acknowledged."""
        return self._spool.pending

    @property
    def backlog(self) -> int:
        """Events waiting in memory because the spool could not be written."""
        return len(self._backlog)

    @property
    def rejected_path(self) -> Path:
        """The dead-letter file of refused events."""
        return self._rejected_path

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> AuditRecorder:
        """Start the background sender (idempotent)."""
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.create_task(self._run(), name="audit-recorder")
        return self

    async def flush(self, timeout: float | None = None, *, timeout_s: float | None = None) -> bool:
        """Wait until every queued event is acknowledged; False when ``timeout`` seconds
        passed first (None: no limit; ``timeout_s`` is its deprecated name)."""
        timeout = renamed_timeout("flush", timeout, "timeout_s", timeout_s)
        if self._task is None:
            await self.start()
        try:
            async with asyncio.timeout(timeout):
                while self.pending:
                    self._idle.clear()
                    self._wake.set()
                    await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def close(self, timeout: float | None = None, *, timeout_s: float | None = None) -> None:
        """Flush for up to ``timeout`` seconds (default ``CLOSE_FLUSH_S``; ``timeout_s`` is
        its deprecated name); keep whatever is left in the spool; close."""
        timeout = renamed_timeout("close", timeout, "timeout_s", timeout_s)
        if timeout is None:
            timeout = CLOSE_FLUSH_S
        if self._closed:
            return
        flushed = await self.flush(timeout) if self._task is not None else not self.pending
        self._closing = True
        for task in (self._task, self._sync_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._task = self._sync_task = None
        for _, done in self._sync_waiters:
            if not done.done():
                done.set_result(None)
        with self._lock:
            self._retry_disk_locked(force=True)
            if self._backlog:
                self.lost += len(self._backlog)
                log.error(
                    "audit: %d events lost: the spool %s cannot be written (%s)",
                    len(self._backlog),
                    self._spool.path,
                    self._disk_error,
                )
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
        """Start on entry."""
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        """Flush and close on exit."""
        await self.close()

    # -- sender ------------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = self._backoff_initial_s
        while True:
            if self._backlog:
                with self._lock:
                    self._retry_disk_locked(force=False)
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
                # _RetryLater, anything unexpected: the sender must survive.
                log.warning("audit delivery failed (%s); retrying in %.2fs", err, delay)
                self._idle.set()  # let flush() re-check its timeout
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, self._backoff_max_s)

    async def _send_some(self) -> None:
        """Send one call's worth: the spool first (it is older), else the backlog."""
        limit = self._batch_events * self._messages_per_call
        if self._spool.pending:
            with self._lock:
                payloads, offset = self._spool.peek(limit)
            await self._deliver(payloads)
            with self._lock:
                self._spool.ack(offset, len(payloads))
                # Acknowledging may have freed the disk: waiting events go there now.
                self._retry_disk_locked(force=True)
            self._instruments.spool_size.add(-len(payloads))
            return
        with self._lock:
            payloads = list(islice(self._backlog, limit))
            generation = self._backlog_generation
        if not payloads:
            return
        await self._deliver(payloads)
        with self._lock:
            if generation == self._backlog_generation:
                for _ in payloads:
                    self._backlog.popleft()
                self._instruments.queue_depth.add(-len(payloads))
            # Otherwise they were written to the spool meanwhile and will be sent again
            # from there; the service ignores the repeats.

    async def _deliver(self, payloads: list[bytes]) -> None:
        """Send ``payloads`` in one RecordBatch call; isolate refused events if refused.

        Every failure other than a refusal of the content is retried later: the events
        are kept (the service may be down, overloaded, restarting, or its disk full).
        """
        events: list[a_pb2.AuditEvent] = []
        sizes: list[int] = []
        for payload in payloads:
            try:
                event = a_pb2.AuditEvent.FromString(payload)
            except Exception:  # cannot happen for what enqueue wrote; never stick on it
                self._dead_letter(payload, "the spooled event does not parse")
                continue
            if len(payload) > MAX_EVENT_BYTES:  # spooled by an older version
                reason = f"the event is {len(payload)} bytes, over the limit of {MAX_EVENT_BYTES}"
                self._dead_letter(payload, reason)
                event = refused_stand_in(event, payload, reason)
            events.append(event)
            sizes.append(event.ByteSize())
        if not events:
            return
        try:
            await self._record_batch(events, sizes)
        except grpc.aio.AioRpcError as err:
            if _is_refusal(err):
                await self._deliver_one_by_one(events)
                return
            raise _RetryLater(f"{err.code().name}: {err.details()}") from None

    async def _record_batch(self, events: list[a_pb2.AuditEvent], sizes: list[int]) -> None:
        count, most = self._batch_events, MAX_MESSAGE_BYTES

        async def messages() -> AsyncIterator[a_pb2.RecordBatchRequest]:
            batch: list[a_pb2.AuditEvent] = []
            size = 0
            for event, event_size in zip(events, sizes, strict=True):
                if batch and (len(batch) >= count or size + event_size > most):
                    yield a_pb2.RecordBatchRequest(events=batch)
                    batch, size = [], 0
                batch.append(event)
                size += event_size + _EVENT_OVERHEAD
            if batch:
                yield a_pb2.RecordBatchRequest(events=batch)

        await self._stub.RecordBatch(messages(), timeout=self._deadline_s)
        self.sent += len(events)
        self._instruments.events_sent.add(len(events))

    async def _deliver_one_by_one(self, events: list[a_pb2.AuditEvent]) -> None:
        for event in events:
            try:
                await self._record(event)
            except grpc.aio.AioRpcError as err:
                if not _is_refusal(err):
                    raise _RetryLater(f"{err.code().name}: {err.details()}") from None
                payload = event.SerializeToString()
                reason = err.details() or err.code().name
                self._dead_letter(payload, reason)
                try:
                    await self._record(refused_stand_in(event, payload, reason))
                except grpc.aio.AioRpcError as again:
                    if not _is_refusal(again):
                        raise _RetryLater(f"{again.code().name}: {again.details()}") from None
                    self.dropped += 1
                    log.error(
                        "audit: the stand-in of refused event %s was refused too (%s); "
                        "the event is only in %s",
                        event.event_id[:128],
                        again.details(),
                        self._rejected_path,
                    )

    async def _record(self, event: a_pb2.AuditEvent) -> None:
        await self._stub.Record(a_pb2.RecordRequest(event=event), timeout=self._deadline_s)
        self.sent += 1
        self._instruments.events_sent.add(1)


def _is_refusal(err: grpc.aio.AioRpcError) -> bool:
    """The service refused the content (retrying the same bytes cannot succeed)."""
    code = err.code()
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return True
    # A message over the channel's size limit (either side): the same bytes never fit.
    return code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (err.details() or "")


VERIFY_DEADLINE_S = 300.0
"""Default deadline of VerifyLog (it reads the whole log)."""


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

    def _options(
        self, timeout: float | None, metadata: Metadata | None, default_s: float | None = None
    ) -> CallOptions:
        return call_options(
            timeout, metadata, default_s=self._deadline_s if default_s is None else default_s
        )

    async def record(
        self,
        event: a_pb2.AuditEvent,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> bool:
        """Store one event synchronously (no spooling); True when it was a duplicate."""
        with service_errors("audit"):
            response = await self.stub.Record(
                a_pb2.RecordRequest(event=event), **self._options(timeout, metadata)
            )
        return response.duplicate

    async def query(
        self,
        request: a_pb2.QueryRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> a_pb2.QueryResponse:
        """One page of rows, newest first."""
        with service_errors("audit"):
            return await self.stub.Query(request, **self._options(timeout, metadata))

    async def query_all(
        self,
        request: a_pb2.QueryRequest,
        limit: int | None = None,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> AsyncIterator[a_pb2.AuditRecord]:
        """Every matching row, newest first, following page tokens (up to ``limit``);
        ``timeout`` bounds each page."""
        page = a_pb2.QueryRequest()
        page.CopyFrom(request)
        count = 0
        while True:
            response = await self.query(page, timeout=timeout, metadata=metadata)
            for record in response.records:
                if limit is not None and count >= limit:
                    return
                count += 1
                yield record
            if not response.next_page_token:
                return
            page.page_token = response.next_page_token

    async def tail(
        self,
        session_id: str = "",
        after_sequence: int = 0,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> AsyncIterator[a_pb2.AuditRecord]:
        """Rows as they are stored, from the head or after ``after_sequence`` (no deadline
        unless ``timeout`` is given: a live stream runs until cancelled)."""
        call = self.stub.Tail(
            a_pb2.TailRequest(session_id=session_id, after_sequence=after_sequence),
            **call_options(timeout, metadata, default_s=None),
        )
        with service_errors("audit"):
            async for response in call:
                yield response.record

    async def session_metrics(
        self,
        session_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> a_pb2.GetSessionMetricsResponse:
        """The per-session metrics snapshot."""
        with service_errors("audit"):
            return await self.stub.GetSessionMetrics(
                a_pb2.GetSessionMetricsRequest(session_id=session_id),
                **self._options(timeout, metadata),
            )

    async def verify(
        self,
        deadline_s: float | None = None,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> a_pb2.VerifyLogResponse:
        """Check the hash chain (default deadline ``VERIFY_DEADLINE_S``: it reads the whole
        log; ``deadline_s`` is ``timeout``'s deprecated name)."""
        timeout = renamed_timeout("verify", timeout, "deadline_s", deadline_s)
        with service_errors("audit"):
            return await self.stub.VerifyLog(
                a_pb2.VerifyLogRequest(), **self._options(timeout, metadata, VERIFY_DEADLINE_S)
            )

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

    def _options(
        self, timeout: float | None, metadata: Metadata | None, default_s: float | None = None
    ) -> CallOptions:
        return call_options(
            timeout, metadata, default_s=self._deadline_s if default_s is None else default_s
        )

    def query(
        self,
        request: a_pb2.QueryRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> a_pb2.QueryResponse:
        """One page of rows, newest first."""
        with service_errors("audit"):
            response: a_pb2.QueryResponse = self.stub.Query(
                request, **self._options(timeout, metadata)
            )
        return response

    def query_all(
        self,
        request: a_pb2.QueryRequest,
        limit: int | None = None,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> Iterator[a_pb2.AuditRecord]:
        """Every matching row, newest first, following page tokens (up to ``limit``);
        ``timeout`` bounds each page."""
        page = a_pb2.QueryRequest()
        page.CopyFrom(request)
        count = 0
        while True:
            response = self.query(page, timeout=timeout, metadata=metadata)
            for record in response.records:
                if limit is not None and count >= limit:
                    return
                count += 1
                yield record
            if not response.next_page_token:
                return
            page.page_token = response.next_page_token

    def tail(
        self,
        session_id: str = "",
        after_sequence: int = 0,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> Iterator[a_pb2.AuditRecord]:
        """Rows as they are stored (from the head or after ``after_sequence``), until the
        stream ends or the caller stops (no deadline unless ``timeout`` is given)."""
        call: Any = self.stub.Tail(
            a_pb2.TailRequest(session_id=session_id, after_sequence=after_sequence),
            **call_options(timeout, metadata, default_s=None),
        )
        try:
            with service_errors("audit"):
                for response in call:
                    yield response.record
        finally:
            call.cancel()

    def session_metrics(
        self,
        session_id: str,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> a_pb2.GetSessionMetricsResponse:
        """The per-session metrics snapshot."""
        with service_errors("audit"):
            response: a_pb2.GetSessionMetricsResponse = self.stub.GetSessionMetrics(
                a_pb2.GetSessionMetricsRequest(session_id=session_id),
                **self._options(timeout, metadata),
            )
        return response

    def verify(
        self,
        deadline_s: float | None = None,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
    ) -> a_pb2.VerifyLogResponse:
        """Check the hash chain (default deadline ``VERIFY_DEADLINE_S``; ``deadline_s`` is
        ``timeout``'s deprecated name)."""
        timeout = renamed_timeout("verify", timeout, "deadline_s", deadline_s)
        with service_errors("audit"):
            response: a_pb2.VerifyLogResponse = self.stub.VerifyLog(
                a_pb2.VerifyLogRequest(), **self._options(timeout, metadata, VERIFY_DEADLINE_S)
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
