"""Building servers and running them until SIGTERM/SIGINT, draining in-flight calls.

A service is a ``ServiceApp``: its settings plus an async context manager that opens its
dependencies (SQLite, channels to other services …) and yields the servicers to
register. ``run_apps`` runs one or several apps in one event loop (``stockade serve all``
runs the four), each on its own listener, and on a signal marks every readiness status
NOT_SERVING, stops accepting calls, lets in-flight calls finish within the grace period,
then closes the dependencies.

Health (grpc.health.v1) keeps liveness apart from readiness, so Kubernetes restarts only
a process that is wedged, never one whose dependency is down:

- ``liveness``: SERVING from start to exit, drain included. It fails only when the
  process cannot answer (dead, or its event loop blocked: the probe then times out), the
  one condition a restart cures;
- ``readiness``, ``""`` (the server as a whole) and each service's own name
  (``stockade.v1.DecisionService`` …): SERVING while every service of the server says it
  can serve (``ServingState``: say, its database is reachable and its change feed synced)
  and the server is not draining.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.instrumentation.grpc import aio_server_interceptor

from stockade.server.access import ADMIN_KINDS, Access, AdminAuth
from stockade.server.interceptors import ContextInterceptor, MethodAccess
from stockade.server.lifecycle import stopping
from stockade.server.peercred import PeerCheckedListener, allowed_uids, private_dir
from stockade.server.settings import ServerSettings, SettingsError
from stockade.server.telemetry import setup_logging, setup_telemetry
from stockade.tracing import tracing_enabled

log = logging.getLogger("stockade.server")


class StartupError(RuntimeError):
    """A server cannot start as configured (the message says what to fix)."""


LIVENESS = "liveness"
"""The health service name of liveness: the process is up and its event loop answers."""
READINESS = "readiness"
"""The health service name of readiness: every service of the server can serve now."""


class ServingState:
    """A service's own word on whether it can serve (say, its database connection is up).

    ``create_server`` mirrors it into the readiness statuses (the service's own name,
    ``readiness`` and ``""``), so a load balancer or a kubelet readiness probe sends calls
    elsewhere while it is NOT_SERVING; liveness never follows it (a restart does not bring
    a database back), and the graceful drain still overrides it.
    """

    def __init__(self) -> None:
        """Start serving."""
        self._serving = True
        self._observers: list[Callable[[bool], None]] = []

    @property
    def serving(self) -> bool:
        """The current word."""
        return self._serving

    def set(self, serving: bool) -> None:
        """Change it (observers hear only changes)."""
        if serving == self._serving:
            return
        self._serving = serving
        for observe in list(self._observers):
            observe(serving)

    def observe(self, observer: Callable[[bool], None]) -> None:
        """Call ``observer(serving)`` on every change."""
        self._observers.append(observer)


@dataclass(frozen=True)
class Registration:
    """One gRPC service to register: the generated ``add_*_to_server`` and its servicer."""

    add: Callable[[Any, grpc.aio.Server], None]
    servicer: Any
    service_name: str
    """Full name, e.g. ``stockade.v1.DecisionService`` (health and reflection use it)."""
    method_identities: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """RPC name → certificate identities allowed to call it; enforced when mTLS is on (X-3)."""
    admin: AdminAuth | None = None
    """Who is an admin, for the RPCs the servicer's ``ACCESS`` declares admin (X-3)."""
    serving: ServingState | None = None
    """The service's own readiness, mirrored into its health status (None: always ready)."""


def declared_access(reg: Registration) -> dict[str, MethodAccess]:
    """Full method name → declared access, from the servicer's ``ACCESS`` table.

    ``StartupError`` when the table misses an RPC of the service, names one it does not
    have, or declares admin RPCs without an ``AdminAuth`` to check them: a server never
    starts with an RPC whose access nobody declared. A servicer without a table (test
    doubles, benchmarks) declares nothing; a test checks that every servicer of the
    product has one.
    """
    table: Mapping[str, Access] | None = getattr(reg.servicer, "ACCESS", None)
    if table is None:
        return {}
    try:
        service = descriptor_pool.Default().FindServiceByName(reg.service_name)
    except KeyError:
        service = None
    if service is not None:
        rpcs = {m.name for m in service.methods}
        missing = sorted(rpcs - set(table))
        unknown = sorted(set(table) - rpcs)
        if missing or unknown:
            raise StartupError(
                f"{reg.service_name}: every RPC must declare its access in "
                f"{type(reg.servicer).__name__}.ACCESS"
                + (f"; missing: {', '.join(missing)}" if missing else "")
                + (f"; not RPCs of the service: {', '.join(unknown)}" if unknown else "")
            )
    if reg.admin is None and any(a in ADMIN_KINDS for a in table.values()):
        raise StartupError(
            f"{reg.service_name} declares admin RPCs but its registration has no AdminAuth"
        )
    return {
        f"/{reg.service_name}/{rpc}": MethodAccess(access, reg.admin)
        for rpc, access in table.items()
    }


class ServiceApp(Protocol):
    """A runnable service."""

    name: str

    @property
    def settings(self) -> ServerSettings:
        """The service's settings."""
        ...

    def open(self) -> AbstractAsyncContextManager[list[Registration]]:
        """Open dependencies and yield the registrations; close them on exit."""
        ...


class HealthBoard:
    """The statuses a server's grpc.health.v1 service reports (module docstring).

    One writer: every change goes through here, so a service's readiness, the server's
    overall readiness (every service ready) and the drain never overwrite each other.
    """

    def __init__(self, servicer: Any, service_names: Sequence[str]) -> None:
        """``servicer`` is the grpc_health aio HealthServicer the server registered."""
        self.servicer = servicer
        self._ready = dict.fromkeys(service_names, True)
        self._draining = False

    @property
    def draining(self) -> bool:
        """True once the drain began (readiness stays NOT_SERVING from then on)."""
        return self._draining

    async def start(self) -> None:
        """Everything SERVING (services that cannot serve yet report it next)."""
        serving = health_pb2.HealthCheckResponse.SERVING
        for svc in (LIVENESS, READINESS, "", *self._ready):
            await self.servicer.set(svc, serving)

    async def set_ready(self, service_name: str, ready: bool) -> None:
        """``service_name`` can (or cannot) serve now; the overall readiness follows."""
        self._ready[service_name] = ready
        if self._draining:
            return
        await self.servicer.set(service_name, _status(ready))
        overall = _status(all(self._ready.values()))
        for svc in (READINESS, ""):
            await self.servicer.set(svc, overall)

    async def drain(self) -> None:
        """Readiness NOT_SERVING for good (callers move elsewhere); liveness stays
        SERVING: the process is alive and finishing its calls, and a liveness failure
        now could have the kubelet kill it before they end."""
        self._draining = True
        for svc in (READINESS, "", *self._ready):
            await self.servicer.set(svc, health_pb2.HealthCheckResponse.NOT_SERVING)


def _status(serving: bool) -> int:
    return int(
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )


@dataclass
class RunningServer:
    """A started server and what is needed to stop it."""

    name: str
    server: grpc.aio.Server
    health: HealthBoard
    """The statuses its grpc.health.v1 service reports."""
    address: str
    grace: float
    service_names: list[str] = field(default_factory=list)
    health_server: grpc.aio.Server | None = None
    """The plaintext health-only listener (``health_listen``), if any."""
    health_address: str = ""
    peer_listener: PeerCheckedListener | None = None
    """On a ``unix://`` listener: the SO_PEERCRED check in front of the server."""


def _is_loopback(listen: str) -> bool:
    if listen.startswith("unix://"):
        return True
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _server_credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    if not settings.tls_enabled:
        return None
    assert settings.tls_cert_file and settings.tls_key_file and settings.tls_ca_file
    return grpc.ssl_server_credentials(
        [(settings.tls_key_file.read_bytes(), settings.tls_cert_file.read_bytes())],
        root_certificates=settings.tls_ca_file.read_bytes(),
        require_client_auth=True,
    )


async def create_server(
    name: str,
    settings: ServerSettings,
    registrations: Sequence[Registration],
    *,
    interceptors: Sequence[Any] = (),
) -> RunningServer:
    """Build, bind and start a server with tracing, request ids, error mapping, health
    and reflection. Plaintext is refused on non-loopback addresses unless the settings
    say ``allow_plaintext`` (X-3)."""
    creds = _server_credentials(settings)
    if creds is None and not _is_loopback(settings.listen) and not settings.allow_plaintext:
        raise StartupError(
            f"{name}: refusing plaintext on non-loopback address {settings.listen}; configure "
            "tls_cert_file/tls_key_file/tls_ca_file or set allow_plaintext for a dev cluster"
        )
    identities = (
        {
            f"/{reg.service_name}/{rpc}": frozenset(allowed)
            for reg in registrations
            for rpc, allowed in reg.method_identities.items()
        }
        if creds is not None
        else {}
    )
    access = {m: a for reg in registrations for m, a in declared_access(reg).items()}
    tracing = [aio_server_interceptor()] if tracing_enabled() else []  # type: ignore[no-untyped-call]
    server = grpc.aio.server(
        interceptors=[*tracing, ContextInterceptor(identities, access), *interceptors],
        options=[("grpc.so_reuseport", 0)],
    )
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [r.service_name for r in registrations]
    for reg in registrations:
        reg.add(reg.servicer, server)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    listen = settings.listen
    peer_listener: PeerCheckedListener | None = None
    bind = listen
    if listen.startswith("unix://"):
        public = listen[len("unix://") :]
        Path(public).parent.mkdir(parents=True, exist_ok=True)
        # The server listens privately; the public path checks each peer's uid first.
        peer_listener = PeerCheckedListener(
            public, private_dir(public), allowed_uids(settings.allowed_peer_uids)
        )
        bind = peer_listener.inner_address
    port = server.add_secure_port(bind, creds) if creds else server.add_insecure_port(bind)
    if not listen.startswith("unix://"):
        if port == 0:
            raise StartupError(f"{name}: could not bind {listen}")
        address = f"{listen.rsplit(':', 1)[0]}:{port}"
    else:
        address = listen
    await server.start()
    if peer_listener is not None:
        try:
            await peer_listener.start()
        except BaseException:
            await server.stop(0)
            await peer_listener.close()
            raise
    board = HealthBoard(health_servicer, names)
    running = RunningServer(
        name,
        server,
        board,
        address,
        settings.grace_seconds,
        names,
        peer_listener=peer_listener,
    )
    if settings.health_listen:
        # Kubelet gRPC probes cannot present a client certificate: under mTLS they use a
        # plaintext listener that serves the same health statuses and nothing else.
        running.health_server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, running.health_server)
        hport = running.health_server.add_insecure_port(settings.health_listen)
        running.health_address = f"{settings.health_listen.rsplit(':', 1)[0]}:{hport}"
        await running.health_server.start()
    await board.start()
    for reg in registrations:
        if reg.serving is not None:
            _mirror_health(board, reg.service_name, reg.serving)
    log.info("%s serving on %s%s", name, address, " (mTLS)" if creds else "")
    return running


_HEALTH_UPDATES: set[asyncio.Task[None]] = set()
"""Health updates in flight (kept so the event loop does not drop them)."""


def _mirror_health(board: HealthBoard, service_name: str, state: ServingState) -> None:
    """Keep the readiness of ``service_name`` (and so the server's) equal to ``state``."""

    async def apply(serving: bool) -> None:
        if state.serving != serving:
            return  # a later change is queued behind this one and applies the news
        await board.set_ready(service_name, serving)
        log.log(
            logging.INFO if serving else logging.WARNING,
            "%s readiness: %s (liveness unaffected)",
            service_name,
            "SERVING" if serving else "NOT_SERVING",
        )

    def changed(serving: bool) -> None:
        task = asyncio.get_running_loop().create_task(apply(serving))
        _HEALTH_UPDATES.add(task)
        task.add_done_callback(_HEALTH_UPDATES.discard)

    state.observe(changed)
    if not state.serving:
        changed(False)


async def stop_server(running: RunningServer) -> None:
    """Graceful stop: readiness NOT_SERVING first, then drain in-flight calls within the
    grace (liveness stays SERVING until the process exits)."""
    await running.health.drain()
    await running.server.stop(running.grace)
    if running.peer_listener is not None:
        await running.peer_listener.close()
    if running.health_server is not None:
        await running.health_server.stop(0)
    log.info("%s stopped", running.name)


async def run_apps(
    apps: Sequence[ServiceApp],
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[dict[str, str]], None] | None = None,
) -> None:
    """Run ``apps`` until ``stop`` is set or SIGTERM/SIGINT arrives, then shut down."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    running: list[RunningServer] = []
    async with AsyncExitStack() as stack:
        for app in apps:
            registrations = await stack.enter_async_context(app.open())
            srv = await create_server(app.name, app.settings, registrations)
            # Unwinding is last-in first-out: each server stops (draining its calls) and
            # then its app closes (the agent flushes its audit queue) before the services
            # started earlier, which it calls, go down.
            stack.push_async_callback(stop_server, srv)
            running.append(srv)
        ready = {s.name: s.address for s in running}
        _write_ready_file(ready)
        if on_ready:
            on_ready(ready)
        try:
            await stop.wait()
        finally:
            # Endless streams (Tail, WatchApprovals) end now instead of holding the grace.
            stopping().set()


def _write_ready_file(ready: dict[str, str]) -> None:
    path = os.environ.get("STOCKADE_READY_FILE")
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(f"{k}={v}" for k, v in ready.items()) + "\n")
        os.replace(tmp, path)


def serve(apps: Sequence[ServiceApp], *, log_level: str = "INFO") -> int:
    """Process entry point: strict environment check, logging, telemetry, run until a
    signal. Returns the exit code: 0 after a clean stop, 2 when the configuration is
    wrong (one line on stderr naming the fix, no traceback)."""
    from stockade.errors import StockadeError
    from stockade.server.envcheck import check_environment

    names = ", ".join(app.name for app in apps)
    try:
        check_environment(os.environ, [type(app.settings) for app in apps])
    except SettingsError as exc:
        print(f"stockade {names}: {exc}", file=sys.stderr)
        return 2
    setup_logging(log_level)
    telemetry = setup_telemetry(apps[0].name if len(apps) == 1 else "all")
    try:
        asyncio.run(run_apps(apps))
    except (StockadeError, SettingsError, StartupError, OSError) as exc:
        # A bad policy file, a missing key or certificate, a port in use: the operator
        # needs the one line that names it, not the asyncio traceback around it.
        message = exc.message if isinstance(exc, StockadeError) else str(exc)
        print(f"stockade {names}: cannot start: {message}", file=sys.stderr)
        return 2
    finally:
        telemetry.shutdown()
    return 0
