"""Channels, deadlines, metadata, retries and the fail-closed rule shared by every client.

Every channel carries the OpenTelemetry client interceptors, so trace context crosses
every hop. ``unix:///path`` and ``HOST:PORT`` addresses are accepted; with a
``TlsConfig`` the channel uses mutual TLS.

Every typed client method takes ``timeout=`` (seconds; None: the client's default, so no
call is ever without a deadline) and ``metadata=`` (extra gRPC metadata for this call:
a forwarded caller's ``authorization``, a request id); :func:`call_options` turns them
into the stub's keyword arguments, in one place. And every client applies one rule to a
call that fails (SPEC §0, fail closed): a failure is never read as permission. Methods
whose answer is a permission (Decide, AwaitApproval) turn a failure into a DENY whose
reason :func:`fail_closed_reason` writes; the others raise a
``stockade.client.errors.ServiceError`` (never a ``grpc.RpcError``: :func:`service_errors`
translates, in one place) so the caller must act on it.

``timeout_s=`` (and the audit client's ``deadline_s``) are deprecated names of
``timeout=``: they still work for one release, with a ``DeprecationWarning``
(:func:`renamed_timeout`).
"""

from __future__ import annotations

import asyncio
import math
import random
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, TypeVar

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors

from stockade.client.errors import ServiceError, service_error
from stockade.tracing import tracing_enabled

T = TypeVar("T")

DEFAULT_DEADLINE_S = 10.0
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})

Metadata = Sequence[tuple[str, str]]
"""gRPC metadata: (key, value) pairs, keys in lower case."""

FAIL_CLOSED = "denied (fail closed)"
"""How every refusal made on the caller's side because a call failed begins."""


def deadline_s(timeout: float | None, default: float) -> float:
    """The call's deadline in seconds: ``timeout``, else the client's ``default``.

    Never None (a call without a deadline can wait for ever); a timeout that is not a
    positive finite number is a programming error (``ValueError``), not "no deadline".
    """
    if timeout is None:
        return default
    if isinstance(timeout, bool) or not (0 < timeout < math.inf):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def merge_metadata(own: Metadata, extra: Metadata | None) -> tuple[tuple[str, str], ...]:
    """The client's own metadata (its credentials) with this call's.

    A key the call gives replaces every entry of that key the client holds: a forwarded
    caller's ``authorization`` is sent alone, never beside the client's own token (the
    server would accept either).
    """
    if not extra:
        return tuple(own)
    given = [(k.lower(), v) for k, v in extra]
    keys = {k for k, _ in given}
    return (*((k, v) for k, v in own if k.lower() not in keys), *given)


class CallOptions(TypedDict, total=False):
    """The keyword arguments a stub call takes from :func:`call_options`."""

    timeout: float
    metadata: tuple[tuple[str, str], ...]


def call_options(
    timeout: float | None,
    metadata: Metadata | None,
    *,
    default_s: float | None,
    own: Metadata = (),
) -> CallOptions:
    """The stub's keyword arguments for one call: the deadline and the merged metadata.

    ``default_s`` None only for live streams that run until the caller cancels them
    (Tail); every other call passes its client's default deadline.
    """
    options: CallOptions = {}
    if timeout is not None or default_s is not None:
        options["timeout"] = deadline_s(timeout, default_s if default_s is not None else 0.0)
    merged = merge_metadata(own, metadata)
    if merged:
        options["metadata"] = merged
    return options


def rpc_error(service: str, err: grpc.RpcError) -> ServiceError:
    """The :class:`ServiceError` that says how a gRPC call to ``service`` failed.

    Only the status code's name and the details are kept (never the call's metadata).
    """
    code = err.code() if callable(getattr(err, "code", None)) else None
    details = err.details() if callable(getattr(err, "details", None)) else str(err)
    name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
    return service_error(service, name, details if isinstance(details, str) else "")


@contextmanager
def service_errors(service: str) -> Iterator[None]:
    """Inside the block, a failed gRPC call to ``service`` raises its
    :class:`ServiceError` (the gRPC error is its ``__cause__``, for debugging).

    Works around awaits and ``async for`` too (a ``with`` block inside a coroutine or an
    async generator); cancellation and ``GeneratorExit`` pass through untouched.
    """
    try:
        yield
    except grpc.RpcError as err:
        raise rpc_error(service, err) from err


def failure_text(service: str, err: grpc.RpcError | ServiceError) -> str:
    """What a failed call says: ``<service> service <CODE>: <details>``."""
    return str(err if isinstance(err, ServiceError) else rpc_error(service, err))


def fail_closed_reason(
    service: str, err: grpc.RpcError | ServiceError, *, attempts: int = 1
) -> str:
    """The reason of the DENY a caller must act on when a permission could not be had."""
    after = f" after {attempts} attempts" if attempts > 1 else ""
    return f"{FAIL_CLOSED}{after}: {failure_text(service, err)}"


def renamed_timeout(
    method: str, timeout: float | None, old_name: str, old_value: float | None
) -> float | None:
    """``timeout``, or the value given under its deprecated name ``old_name``.

    The old name still works for one release (stockade-client 0.2; removed in 0.3) with a
    ``DeprecationWarning``; giving both is a ``TypeError`` (which one was meant?).
    """
    if old_value is None:
        return timeout
    if timeout is not None:
        raise TypeError(f"{method}: give timeout= only ({old_name}= is its deprecated name)")
    warnings.warn(
        f"{method}({old_name}=...) is deprecated, use timeout= "
        "(the old name goes in stockade-client 0.3)",
        DeprecationWarning,
        stacklevel=3,
    )
    return old_value


@dataclass(frozen=True)
class TlsConfig:
    """Client side of mTLS: our certificate and key, and the CA that signs servers."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    server_name: str = ""
    """Override the name checked against the server certificate (e.g. ``decision``)."""

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_file.read_bytes(),
            private_key=self.key_file.read_bytes(),
            certificate_chain=self.cert_file.read_bytes(),
        )


def _options(tls: TlsConfig | None) -> list[tuple[str, str | int]]:
    # Retries are ours (idempotent calls only); reconnect fast after an outage, so a
    # restarted service is used again within about a second rather than minutes. Not
    # ``grpc.min_reconnect_backoff_ms``: gRPC also takes it as the minimum *connect
    # timeout*, and at 100 ms a handshake on a busy machine ("timed out before receiving
    # SETTINGS frame") failed the call closed although the service was up. A refused
    # connection still fails at once, so the fast reconnect is kept.
    opts: list[tuple[str, str | int]] = [
        ("grpc.enable_retries", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]
    if tls and tls.server_name:
        opts.append(("grpc.ssl_target_name_override", tls.server_name))
    return opts


def aio_channel(address: str, *, tls: TlsConfig | None = None) -> grpc.aio.Channel:
    """An asyncio channel to ``address`` with tracing interceptors."""
    interceptors = (
        aio_client_interceptors()  # type: ignore[no-untyped-call]
        if tracing_enabled()
        else None
    )
    if tls is not None:
        return grpc.aio.secure_channel(
            address, tls.credentials(), options=_options(tls), interceptors=interceptors
        )
    return grpc.aio.insecure_channel(address, options=_options(None), interceptors=interceptors)


def sync_channel(address: str, *, tls: TlsConfig | None = None) -> grpc.Channel:
    """A blocking channel to ``address``."""
    if tls is not None:
        return grpc.secure_channel(address, tls.credentials(), options=_options(tls))
    return grpc.insecure_channel(address, options=_options(None))


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int = 3,
    base_delay_s: float = 0.05,
) -> T:
    """Run an idempotent call, retrying UNAVAILABLE / RESOURCE_EXHAUSTED with jittered backoff."""
    for attempt in range(attempts):
        try:
            return await call()
        except grpc.aio.AioRpcError as err:
            if err.code() not in RETRYABLE or attempt == attempts - 1:
                raise
            await asyncio.sleep(base_delay_s * (2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")
