"""Run the Stockade services as local subprocesses (for the demo, tests and laptops).

``LocalStack`` starts ``python -m stockade.<service>`` for each service with its settings
in environment variables, listening on unix sockets in a short temporary folder, waits
until each reports SERVING through the standard health protocol, and stops them with
SIGTERM (graceful drain) or SIGKILL. Each service logs to ``<base>/logs/<name>.log``.

A service may run as several replicas (``replicas={"audit": 2}``): its processes are
then named ``audit-1``, ``audit-2`` (each its own socket, state folder and log), and
``addresses["audit"]`` is the first one's. Agent replica N talks to replica N of each
service (or the last one a service has), so every replica carries traffic.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICES = ("decision", "executor", "audit", "agent")
EXTRAS = ("papers", "console")
"""Optional processes: the example ToolProvider and the approval console."""
HTTP_SERVICES = frozenset({"console"})
"""Services that speak HTTP on a loopback TCP port (browsers cannot use unix sockets)."""


class StackError(RuntimeError):
    """A service did not start or stop as expected."""


def service_of(name: str) -> str:
    """The service a process name runs: ``decision-2`` is a replica of ``decision``."""
    base, sep, index = name.rpartition("-")
    if sep and index.isdigit() and base in (*SERVICES, *EXTRAS):
        return base
    return name


def replica_names(service: str, count: int) -> list[str]:
    """The process names of ``count`` replicas: the service's own name for one."""
    if count < 1:
        raise ValueError(f"{service}: at least one replica")
    return [service] if count == 1 else [f"{service}-{i}" for i in range(1, count + 1)]


class LocalStack:
    """The four services (or a subset) as separate processes on unix sockets."""

    def __init__(
        self,
        base_dir: Path,
        *,
        env: Mapping[str, Mapping[str, str]] | None = None,
        common_env: Mapping[str, str] | None = None,
        replicas: Mapping[str, int] | None = None,
    ) -> None:
        """``env`` adds settings per service (``"audit"``: every replica) or per replica
        (``"audit-2"``: that one, applied last)."""
        self.base_dir = base_dir.resolve()
        self.sock_dir = Path(tempfile.mkdtemp(prefix="stk-", dir="/tmp"))
        self.log_dir = self.base_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.extra_env = {k: dict(v) for k, v in (env or {}).items()}
        self.common_env = dict(common_env or {})
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.replicas = {
            service: replica_names(service, (replicas or {}).get(service, 1))
            for service in (*SERVICES, *EXTRAS)
        }
        """Each service's process names (its replicas)."""
        self.addresses = {
            name: f"unix://{self.sock_dir}/{name}.sock"
            for names in self.replicas.values()
            for name in names
            if service_of(name) not in HTTP_SERVICES
        }
        for service, names in self.replicas.items():
            if service not in HTTP_SERVICES:
                self.addresses.setdefault(service, self.addresses[names[0]])
        self.console_listen = "127.0.0.1:0"
        """Where the console listens (port 0: a free port, read from its ready file)."""
        self.console_url = ""
        """The console's address once it serves (``http://127.0.0.1:PORT``)."""
        # The decision service signs grants with the private key; the executor holds
        # only the public key (DEC-12).
        from stockade.decision.grants import PRIVATE_KEY_NAME, PUBLIC_KEY_NAME, generate_keypair

        # Admin RPCs (ResolveApproval, AddRule, SetMode ...) need a token: one per stack.
        self.admin_token = secrets.token_hex(16)
        # The console has a token of its own, named, and is the decision service's one
        # delegate: it may name the person it acts for, the stack's admin token may not.
        self.console_token = secrets.token_hex(16)
        keys = self.base_dir / "keys"
        if (keys / PRIVATE_KEY_NAME).exists():
            self.grant_private_key = keys / PRIVATE_KEY_NAME
            self.grant_public_key = keys / PUBLIC_KEY_NAME
        else:
            self.grant_private_key, self.grant_public_key = generate_keypair(keys)

    def lane(self, service: str, name: str) -> str:
        """The replica of ``service`` that process ``name`` talks to: replica N for a
        process that is replica N of its own service, else (or past the last) the last."""
        names = self.replicas[service]
        _, _, index = name.rpartition("-")
        position = int(index) if service_of(name) != name else len(names)
        return names[min(position, len(names)) - 1]

    def env_for(self, name: str) -> dict[str, str]:
        """The environment a service process gets."""
        service = service_of(name)
        prefix = f"STOCKADE_{service.upper()}_"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STOCKADE_")}
        env.update(self.common_env)
        env[f"{prefix}LISTEN"] = (
            self.console_listen if service == "console" else self.addresses[name]
        )
        env[f"{prefix}STATE_DIR"] = str(self.base_dir / "state" / name)
        env.setdefault("OTEL_SDK_DISABLED", "true")
        if service == "decision":
            env["STOCKADE_DECISION_GRANT_PRIVATE_KEY_FILE"] = str(self.grant_private_key)
            env["STOCKADE_DECISION_ADMIN_TOKENS"] = (
                f"{self.admin_token},console={self.console_token}"
            )
            env["STOCKADE_DECISION_DELEGATE_IDENTITIES"] = "token:console"
            # Relative paths in calls and rules are taken from the executor's workspace.
            workspace = self.extra_env.get("executor", {}).get("STOCKADE_EXECUTOR_WORKSPACE")
            if workspace:
                env.setdefault("STOCKADE_DECISION_WORKSPACE", workspace)
        if service == "console":
            env["STOCKADE_CONSOLE_DECISION_ADDR"] = self.addresses[self.lane("decision", name)]
            env["STOCKADE_CONSOLE_AUDIT_ADDR"] = self.addresses[self.lane("audit", name)]
            env["STOCKADE_CONSOLE_DECISION_ADMIN_TOKEN"] = self.console_token
            env["STOCKADE_READY_FILE"] = str(self._ready_file(name))
        if service == "executor":
            env["STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE"] = str(self.grant_public_key)
        if service == "agent":
            for target in ("decision", "executor", "audit"):
                env[f"STOCKADE_AGENT_{target.upper()}_ADDR"] = self.addresses[
                    self.lane(target, name)
                ]
            spool = "spool" if name == service else f"spool-{name}"
            env.setdefault("STOCKADE_AGENT_SPOOL_DIR", str(self.base_dir / "state" / spool))
        env.update(self.extra_env.get(service, {}))
        if name != service:
            env.update(self.extra_env.get(name, {}))
        return env

    async def start(self, names: Sequence[str] = SERVICES, *, timeout_s: float = 90.0) -> None:
        """Start ``names`` (in parallel) and wait until each is SERVING (the deadline is
        generous: four Pythons importing gRPC at once on a busy machine once took over 30 s)."""
        for name in names:
            await self.spawn(name)
        await asyncio.gather(*(self.wait_serving(n, timeout_s=timeout_s) for n in names))

    async def spawn(self, name: str) -> asyncio.subprocess.Process:
        """Start one service process without waiting for it."""
        if name in self.procs and self.procs[name].returncode is None:
            raise StackError(f"{name} is already running")
        if service_of(name) in HTTP_SERVICES:
            self._ready_file(name).parent.mkdir(parents=True, exist_ok=True)
            self._ready_file(name).unlink(missing_ok=True)
        else:
            Path(self.addresses[name][len("unix://") :]).unlink(missing_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            f"stockade.{service_of(name)}",
            env=self.env_for(name),
            stdout=log,
            stderr=log,
            stdin=asyncio.subprocess.DEVNULL,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def _ready_file(self, name: str) -> Path:
        return self.base_dir / "state" / f"{name}.ready"

    async def health(self, name: str, *, timeout_s: float = 1.0) -> int:
        """The overall health status of a service (a HealthCheckResponse.ServingStatus)."""
        if service_of(name) in HTTP_SERVICES:
            return await self._http_health(name, timeout_s)
        async with grpc.aio.insecure_channel(self.addresses[name]) as ch:
            resp = await health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s
            )
            return int(resp.status)

    async def _http_health(self, name: str, timeout_s: float) -> int:
        """SERVING once the console wrote its address and ``/healthz`` answers 200."""
        import httpx

        ready = self._ready_file(name)
        if not ready.exists():
            return int(health_pb2.HealthCheckResponse.NOT_SERVING)
        url = ready.read_text().strip().partition("=")[2]
        try:
            async with httpx.AsyncClient(timeout=timeout_s) as client:
                resp = await client.get(f"{url}/healthz")
        except httpx.HTTPError:
            return int(health_pb2.HealthCheckResponse.NOT_SERVING)
        if resp.status_code != 200:
            return int(health_pb2.HealthCheckResponse.NOT_SERVING)
        self.console_url = url
        return int(health_pb2.HealthCheckResponse.SERVING)

    async def wait_serving(self, name: str, *, timeout_s: float = 90.0) -> None:
        """Poll health until SERVING; fail early (with the log's tail) if the process died.

        Each check gets a few seconds (a new channel's handshake included): a service that
        is up answers at once, and a short per-check deadline on a busy machine could miss
        a service that was serving."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            proc = self.procs.get(name)
            if proc is not None and proc.returncode is not None:
                raise StackError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            try:
                if await self.health(name, timeout_s=3.0) == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.05)
        raise StackError(f"{name} did not become SERVING in {timeout_s}s:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The last lines of a service's log."""
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    async def stop(self, name: str, *, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        """Signal a service and wait for it to exit; returns its exit code."""
        proc = self.procs.get(name)
        if proc is None or proc.returncode is not None:
            return proc.returncode if proc and proc.returncode is not None else 0
        proc.send_signal(sig)
        try:
            return await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise StackError(
                f"{name} did not stop within {timeout_s}s after signal {sig}"
            ) from None

    async def close(self) -> None:
        """Stop every service (agent first) and remove the socket folder."""
        for name in reversed(list(self.procs)):
            try:
                await self.stop(name)
            except StackError:
                pass
        shutil.rmtree(self.sock_dir, ignore_errors=True)

    async def __aenter__(self) -> LocalStack:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
