"""Each service starts from its pod's own command and environment and stops on SIGTERM
within the pod's grace period.

For every Stockade container of every overlay the test runs what the image would run
(``stockade serve`` + the container's ``args``) with the container's environment, moved
to a temporary folder: paths under the pod's volumes become paths under ``tmp_path``, the
listener a unix socket (the mTLS health-only listener a free loopback port), Secrets real
files made by ``stockade.devcerts``, and the OTLP endpoint an address where nothing
listens (a collector that is down must not stall the shutdown), and a store DSN Secret
(``stockade-store-<service>``, the prod PostgreSQL store) a fresh database on the test
session's real PostgreSQL server (tests/pg.py). It waits until the
service reports ready, checks that the health service the readiness probe names answers
SERVING where the probe asks (and, with mTLS, that the main listener refuses a plaintext
caller), sends SIGTERM and requires a clean exit before ``terminationGracePeriodSeconds -
preStop`` has passed: the time kubelet leaves the process before it sends SIGKILL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade import devcerts

from .conftest import DEPLOY, OVERLAYS, ROOT, STOCKADE_SERVICES, Manifest, pod_spec, workload

# Volumes of the pods that the test maps into tmp_path.
POD_WRITABLE_ROOTS = ("/var/lib/stockade", "/tmp")
STARTUP_DEADLINE_S = 60.0
IMAGE_SITE_PACKAGES = "/opt/stockade/lib/python3.11/site-packages"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _health(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
        return int(reply.status)


def _grace_budget(obj: Manifest) -> float:
    """Seconds between SIGTERM and SIGKILL for the container process."""
    container = obj["spec"]["template"]["spec"]["containers"][0]
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
    return float(pod_spec(obj)["terminationGracePeriodSeconds"]) - float(pre_stop.get("seconds", 0))


STORE_SECRET_PREFIX = "stockade-store-"
"""Secrets that hold a service's PostgreSQL DSN (components/scale-out)."""


def _store_secret(entry: Manifest) -> bool:
    ref = entry.get("valueFrom", {}).get("secretKeyRef", {})
    return str(ref.get("name", "")).startswith(STORE_SECRET_PREFIX)


def _local_env(
    service: str, container: Manifest, tmp: Path, certs: Path, store_dsn: str | None = None
) -> dict[str, str]:
    """The container's environment, with every pod path moved into ``tmp`` and a store
    DSN Secret replaced by ``store_dsn``."""
    secret_files = {
        "grant-signing.key": certs / "grant-signing.key",
        "grant-signing.pub": certs / "grant-signing.pub",
        # An Ed25519 private key in PKCS#8 PEM, as the audit service's head key is.
        "head-signing.key": certs / "grant-signing.key",
        "policy.toml": DEPLOY / "k8s" / "base" / "policy.toml",
        "tls.crt": certs / f"{service}.crt",
        "tls.key": certs / f"{service}.key",
        "ca.crt": certs / "ca.crt",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STOCKADE_", "AGENT_"))}
    for entry in container.get("env", []):
        name = entry["name"]
        if _store_secret(entry):
            assert store_dsn, f"{name} names a store Secret but no database was given"
            env[name] = store_dsn
            continue
        if "valueFrom" in entry:
            env[name] = f"test-{name.lower()}"
            continue
        value = str(entry["value"])
        if name.endswith("_FILE"):
            value = str(secret_files[PurePosixPath(value).name])
        elif value.startswith(f"{IMAGE_SITE_PACKAGES}/"):
            relative = PurePosixPath(value).relative_to(IMAGE_SITE_PACKAGES)
            value = str(ROOT / "clients" / relative)
        elif value.startswith(POD_WRITABLE_ROOTS):
            local = tmp / "pod" / value.lstrip("/")
            local.mkdir(parents=True, exist_ok=True)
            value = str(local)
        env[name] = value
    env[f"STOCKADE_{service.upper()}_LISTEN"] = f"unix://{tmp}/{service}.sock"
    if f"STOCKADE_{service.upper()}_HEALTH_LISTEN" in env:
        env[f"STOCKADE_{service.upper()}_HEALTH_LISTEN"] = f"127.0.0.1:{_free_port()}"
    # Port 9 on loopback: nothing listens there, so every export fails fast-or-slow as a
    # real outage would; the shutdown must not wait on it beyond the grace.
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    env["STOCKADE_READY_FILE"] = str(tmp / "ready")
    return env


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("service", STOCKADE_SERVICES)
def test_service_stops_on_sigterm_within_its_grace_period(
    rendered: dict[str, list[Manifest]],
    overlay: str,
    service: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    obj = workload(rendered[overlay], service)
    container = obj["spec"]["template"]["spec"]["containers"][0]
    certs = tmp_path / "certs"
    devcerts.generate(certs, [service])
    # Only the pods on PostgreSQL need a server (started once per test session).
    needs_store = any(_store_secret(e) for e in container.get("env", []))
    store_dsn = str(request.getfixturevalue("pg_dsn")) if needs_store else None
    env = _local_env(service, container, tmp_path, certs, store_dsn)
    stockade = Path(sys.executable).parent / "stockade"
    assert stockade.exists(), "the stockade console script is the image's entrypoint"
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [str(stockade), "serve", *container["args"]],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            ready = tmp_path / "ready"
            started = time.monotonic()
            while not ready.exists():
                if proc.poll() is not None:
                    pytest.fail(f"{service} exited early:\n{stderr_path.read_text()[-3000:]}")
                if time.monotonic() - started > STARTUP_DEADLINE_S:
                    pytest.fail(f"{service} never became ready:\n{stderr_path.read_text()[-3000:]}")
                time.sleep(0.05)
            assert f"{service}=unix://" in ready.read_text()
            # What the readiness probe asks is what the server answers SERVING to, on the
            # address the probe uses: plaintext, as kubelet probes are.
            probe_service = container["readinessProbe"]["grpc"]["service"]
            up = service.upper()
            probe_address = env.get(f"STOCKADE_{up}_HEALTH_LISTEN", env[f"STOCKADE_{up}_LISTEN"])
            serving = health_pb2.HealthCheckResponse.SERVING
            assert _health(probe_address, probe_service) == serving
            for probe_name in ("startupProbe", "livenessProbe"):
                asked = container[probe_name]["grpc"]["service"]
                assert _health(probe_address, asked) == serving, probe_name
            if f"STOCKADE_{up}_TLS_CERT_FILE" in env:
                # The main listener requires mTLS: a plaintext caller gets nothing.
                with pytest.raises(grpc.RpcError) as refused:
                    _health(env[f"STOCKADE_{up}_LISTEN"], probe_service)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            proc.send_signal(signal.SIGTERM)
            budget = _grace_budget(obj)
            try:
                code = proc.wait(timeout=budget)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{service} ignored SIGTERM for the pod's {budget:.0f} s grace")
            assert code == 0, stderr_path.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
