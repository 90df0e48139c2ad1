"""The three PostgreSQL stores over TLS, against a server that speaks only TLS on TCP
(``tests.pg_tls``: Debian's PostgreSQL with a devcerts certificate), each configured the
way an operator does it: the service's own DSN setting (``STOCKADE_DECISION_STORE_DSN``,
``STOCKADE_AUDIT_STORE_DSN``, ``STOCKADE_EXECUTOR_STATE_DSN``) read by its settings class,
with ``sslmode``, ``sslrootcert`` and, for client-certificate logins, ``sslcert`` and
``sslkey`` in the URI (deploy/README, section 6).

Each store connects and works with ``sslmode=verify-full`` (by host name and by the IP
address the certificate names: the executor's DNS-free setup) and every connection it
holds is TLS; each refuses, before any query, a server whose certificate names another
host, a CA it was not told to trust, a DSN that asks for no TLS, and ``verify-full``
without a CA. Refusals are ``DependencyUnavailable`` (the service does not start: one
line, exit 2, no traceback) and no password reaches an error or a log line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from stockade.audit.app import open_store
from stockade.audit.model import AuditEventRow
from stockade.audit.settings import AuditSettings
from stockade.decision.app import store_path
from stockade.decision.modes import Mode
from stockade.decision.settings import DecisionSettings
from stockade.decision.store import open_decision_store
from stockade.errors import DependencyUnavailable
from stockade.executor.settings import ExecutorSettings
from stockade.executor.state import open_state
from tests.pg_tls import CERT_PASSWORD, CERT_ROLE, PASSWORD, UNNAMED_HOST, TlsPostgres

DEADLINE_S = 120.0
SECRETS = (PASSWORD, quote(PASSWORD, safe=""), CERT_PASSWORD, quote(CERT_PASSWORD, safe=""))


Check = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


async def _use_decision(tmp: Path, while_open: Check = _nothing) -> None:
    settings = DecisionSettings(state_dir=tmp)
    store = await open_decision_store(settings.store_dsn, str(store_path(settings)), pool_size=2)
    try:
        record, created = await store.create_session("tls-session", Mode.DEFAULT)
        assert created and record.session_id == "tls-session"
        assert (await store.get_session("tls-session")).session_id == "tls-session"
        await while_open()
    finally:
        await store.close()


async def _use_audit(tmp: Path, while_open: Check = _nothing) -> None:
    settings = AuditSettings(state_dir=tmp, replica_id="audit-tls-0")
    store = await open_store(settings)
    try:
        event = AuditEventRow(
            event_id="tls-e1", session_id="s", step=1, tool_name="read_file", status="OK"
        )
        assert (await store.append([event])).accepted == 1
        verdict = await store.verify()
        assert verdict.ok and verdict.rows_checked == 1, verdict.detail
        await while_open()
    finally:
        await store.close()


async def _use_executor(tmp: Path, while_open: Check = _nothing) -> None:
    settings = ExecutorSettings(state_dir=tmp, workspace=tmp)
    state = await open_state(settings.state_dsn or None, settings.state_dir)
    try:
        expires = time.time() + 60
        assert await state.spend_grant("grant-tls", expires) is True
        assert await state.spend_grant("grant-tls", expires) is False
        await while_open()
    finally:
        await state.close()


@dataclass(frozen=True)
class Store:
    """One service's store: its DSN setting and a short use of it through its settings."""

    service: str
    setting: str
    use: Callable[[Path, Check], Awaitable[None]]


STORES = [
    Store("decision", "STOCKADE_DECISION_STORE_DSN", _use_decision),
    Store("audit", "STOCKADE_AUDIT_STORE_DSN", _use_audit),
    Store("executor", "STOCKADE_EXECUTOR_STATE_DSN", _use_executor),
]
IDS = [s.service for s in STORES]


def _assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a password leaked into: {text[:300]}"


def _log_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        f"{r.getMessage()} {r.exc_text or ''} {r.exc_info[1] if r.exc_info else ''}"
        for r in caplog.records
    )


async def _works_over_tls(
    store: Store,
    server: TlsPostgres,
    dsn: str,
    database: str,
    role: str,
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(store.setting, dsn)
    caplog.set_level(logging.DEBUG)
    seen: list[tuple[str, bool]] = []

    async def look() -> None:
        seen.extend(await server.tls_sessions(database))

    # While the store is open (after it was used), every connection it holds is TLS.
    await store.use(tmp, look)
    assert seen, "the store holds no connection while open"
    assert {user for user, _ in seen} == {role}
    assert all(tls for _, tls in seen), seen
    _assert_no_secret(_log_text(caplog))


@pytest.mark.parametrize("store", STORES, ids=IDS)
@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"], ids=["by-name", "by-ip-san"])
async def test_each_store_works_with_verify_full(
    store: Store,
    host: str,
    tls_pg: TlsPostgres,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """By host name, and by the IP address the certificate names (what the executor uses
    to need no DNS: deploy/README, section 6)."""
    database = await tls_pg.create_database()
    dsn = tls_pg.dsn(database, host=host)
    await _works_over_tls(
        store, tls_pg, dsn, database, "stockade_pw", tmp_path, monkeypatch, caplog
    )


@pytest.mark.parametrize("store", STORES, ids=IDS)
async def test_each_store_works_with_a_client_certificate(
    store: Store,
    tls_pg: TlsPostgres,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A role the server admits only with a certificate whose CN is its name (and its
    password): ``sslcert`` and ``sslkey`` in the DSN."""
    database = await tls_pg.create_database(CERT_ROLE)
    dsn = tls_pg.dsn(database, user=CERT_ROLE, sslcert=tls_pg.client_cert, sslkey=tls_pg.client_key)
    await _works_over_tls(store, tls_pg, dsn, database, CERT_ROLE, tmp_path, monkeypatch, caplog)


@dataclass(frozen=True)
class Refusal:
    """A DSN the store must refuse, and what the error must say about why."""

    name: str
    dsn: Callable[[TlsPostgres, str], str]
    says: str


REFUSALS = [
    Refusal(
        "certificate-for-another-host",
        lambda s, db: s.dsn(db, host=UNNAMED_HOST),
        f"certificate is not valid for '{UNNAMED_HOST}'",
    ),
    Refusal(
        "unknown-ca",
        lambda s, db: s.dsn(db, sslrootcert=s.unknown_ca_file),
        "certificate verify failed",
    ),
    Refusal(
        "plaintext-to-a-tls-only-server",
        lambda s, db: s.dsn(db, sslmode="disable", sslrootcert=""),
        "no encryption",
    ),
    Refusal(
        "verify-full-without-a-ca",
        lambda s, db: s.dsn(db, sslrootcert=""),
        "root certificate file",
    ),
    Refusal(
        "client-certificate-missing",
        lambda s, db: s.dsn(db, user=CERT_ROLE),
        "requires a valid client certificate",
    ),
    Refusal(
        "client-certificate-of-another-ca",
        lambda s, db: s.dsn(
            db, user=CERT_ROLE, sslcert=s.foreign_client_cert, sslkey=s.foreign_client_key
        ),
        "",  # the server ends the handshake: only the refusal itself is certain
    ),
    Refusal(
        "client-certificate-for-another-role",
        lambda s, db: s.dsn(db, user=CERT_ROLE, sslcert=s.wrong_cn_cert, sslkey=s.wrong_cn_key),
        "authentication failed",
    ),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.name for r in REFUSALS])
@pytest.mark.parametrize("store", STORES, ids=IDS)
async def test_each_store_refuses_what_tls_does_not_vouch_for(
    store: Store,
    refusal: Refusal,
    tls_pg: TlsPostgres,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    database = await tls_pg.create_database(
        CERT_ROLE if "client-certificate" in refusal.name else "stockade_pw"
    )
    # Without a CA named, libpq's rules look in ~/.postgresql: make sure there is none.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    monkeypatch.setenv(store.setting, refusal.dsn(tls_pg, database))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(DependencyUnavailable) as caught:
        await store.use(tmp_path, _nothing)
    message = caught.value.message
    assert refusal.says in message
    assert "***" in message  # the DSN it names is the redacted one
    _assert_no_secret(message, str(caught.value), _log_text(caplog))
    # Nothing got in.
    assert await tls_pg.tls_sessions(database) == []


# --- the services themselves: start-up as an operator meets it ---------------------------


def _service_env(store: Store, dsn: str, tmp: Path, ready: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("STOCKADE_", "PG"))}
    prefix = f"STOCKADE_{store.service.upper()}"
    policy = tmp / "policy.toml"
    policy.write_text('[permissions]\nallow = ["read_file"]\n')
    workspace = tmp / "ws"
    workspace.mkdir(exist_ok=True)
    env.update(
        {
            store.setting: dsn,
            "STOCKADE_READY_FILE": str(ready),
            "HOME": str(tmp / "home"),
            f"{prefix}_LISTEN": f"unix://{tmp}/{store.service}.sock",
            f"{prefix}_STATE_DIR": str(tmp / "state"),
            "STOCKADE_DECISION_POLICY_FILE": str(policy),
            "STOCKADE_EXECUTOR_WORKSPACE": str(workspace),
            "STOCKADE_AUDIT_REPLICA_ID": "audit-tls-serve",
        }
    )
    return env


def _serve(store: Store, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "stockade.cli.main", "serve", store.service],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("store", STORES, ids=IDS)
async def test_each_service_serves_on_a_tls_store_and_logs_no_password(
    store: Store, tls_pg: TlsPostgres, tmp_path: Path
) -> None:
    database = await tls_pg.create_database()
    ready = tmp_path / "ready"
    proc = _serve(store, _service_env(store, tls_pg.dsn(database), tmp_path, ready))
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        while not ready.exists():
            assert proc.poll() is None, f"exited {proc.returncode}: {proc.communicate()[1]}"
            assert loop.time() < deadline, "the service did not become ready"
            await asyncio.sleep(0.05)
        sessions = await tls_pg.tls_sessions(database)
        assert sessions and all(tls for _, tls in sessions), sessions
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    _assert_no_secret(out, err)


#: One refusal per service, so each service's start-up path is seen failing closed.
SERVE_REFUSALS = {
    "decision": REFUSALS[0],  # a certificate for another host
    "audit": REFUSALS[1],  # a CA it was not told to trust
    "executor": REFUSALS[2],  # plaintext
}


@pytest.mark.parametrize("store", STORES, ids=IDS)
async def test_a_service_whose_store_fails_tls_does_not_start(
    store: Store, tls_pg: TlsPostgres, tmp_path: Path
) -> None:
    refusal = SERVE_REFUSALS[store.service]
    database = await tls_pg.create_database()
    ready = tmp_path / "ready"
    proc = _serve(store, _service_env(store, refusal.dsn(tls_pg, database), tmp_path, ready))
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 2, err
    assert not ready.exists()
    line = [text for text in err.splitlines() if "cannot start" in text]
    assert len(line) == 1, err
    assert refusal.says in line[0], line[0]
    assert "Traceback" not in err
    _assert_no_secret(out, err)


@pytest.mark.parametrize("sslmode", ["require", "prefer", "disable"])
def test_a_service_refuses_to_send_its_password_unverified_over_a_network(
    sslmode: str, tmp_path: Path
) -> None:
    """A network host (TEST-NET-1: unroutable, so a connection attempt would hang, not
    fail) with a mode that does not check the server: refused before any connection."""
    store = STORES[0]
    dsn = f"postgresql://stockade_pw:{quote(PASSWORD, safe='')}@192.0.2.10/db?sslmode={sslmode}"
    ready = tmp_path / "ready"
    done = subprocess.run(
        [sys.executable, "-m", "stockade.cli.main", "serve", store.service],
        env=_service_env(store, dsn, tmp_path, ready),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 2, done.stderr
    assert f"over the network with sslmode={sslmode}" in done.stderr
    assert "sslmode=verify-full" in done.stderr
    assert "Traceback" not in done.stderr
    _assert_no_secret(done.stdout, done.stderr)
