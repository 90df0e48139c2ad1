"""Channels, deadlines and retries shared by every client.

Every channel carries the OpenTelemetry client interceptors, so trace context crosses
every hop. ``unix:///path`` and ``HOST:PORT`` addresses are accepted; with a
``TlsConfig`` the channel uses mutual TLS.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors

from stockade.tracing import tracing_enabled

T = TypeVar("T")

DEFAULT_DEADLINE_S = 10.0
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


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
