"""A real PostgreSQL that speaks only TLS on TCP, for the stores' TLS settings (issue #14).

pgserver's PostgreSQL 16 (``tests.pg``) is built without SSL, so this fixture runs
Debian's PostgreSQL (``/usr/lib/postgresql/<version>/bin``, built with OpenSSL; package
``postgresql-15`` on these machines and on CI; ``make test`` installs it when missing,
through ``make postgresql``) as a throwaway cluster, once per test session:

- a private folder in ``/tmp`` holds the data, the unix socket and the configuration;
- the server certificate and the client certificates come from ``stockade.devcerts``,
  the same code that issues ``stockade-tls-postgres`` for the ``postgres`` component
  (deploy/README), so these tests also show its certificates satisfy a real server:
  SANs ``postgres``, …, ``localhost``, ``127.0.0.1`` and ``::1``; a second devcerts run
  gives a CA nobody trusts;
- TCP on 127.0.0.1 and 127.0.0.2 (both loopback; the certificate names only the first,
  so a client dialling 127.0.0.2 meets a certificate for another host), every TCP line of
  ``pg_hba.conf`` is ``hostssl``, everything else over TCP is rejected;
- role ``stockade_pw`` logs in with a password (SCRAM), role ``decision`` (a devcerts
  client certificate's common name) with a password *and* a client certificate
  (``clientcert=verify-full``); the superuser only over the unix socket.

PostgreSQL refuses to run as root: as root, the cluster runs as the ``postgres`` user the
Debian package creates (or pgserver's own user when there is none). There is no skip:
without the binaries the tests that need the server fail, naming the package to install.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import asyncpg
import pytest

from stockade import devcerts

#: Where Debian installs each PostgreSQL major version.
PG_ROOT = Path("/usr/lib/postgresql")
#: A folder with ``initdb`` and ``postgres`` to use instead of the newest under PG_ROOT.
ENV_BIN = "STOCKADE_TEST_PG_TLS_BIN"
#: Passwords as awkward as a Secret may hold: every URI delimiter, quotes, a percent.
PASSWORD = "pw/tls:'\"@?#&=%25 +;--"
CERT_PASSWORD = "cert%pw@:/x'"
PASSWORD_ROLE = "stockade_pw"
#: Role names a client certificate's CN must match under clientcert=verify-full.
CERT_ROLE = "decision"
#: The loopback address the server listens on that its certificate does not name.
UNNAMED_HOST = "127.0.0.2"
START_DEADLINE_S = 120.0


def pg_bin_dir() -> Path:
    """The newest Debian PostgreSQL's bin folder (or ``$STOCKADE_TEST_PG_TLS_BIN``);
    ``RuntimeError`` naming the package when there is none."""
    given = os.environ.get(ENV_BIN, "").strip()
    if given:
        found = Path(given)
        if not (found / "postgres").is_file():
            raise RuntimeError(f"{ENV_BIN}={given} has no postgres binary")
        return found
    candidates = sorted(
        (p for p in PG_ROOT.glob("*/bin") if (p / "postgres").is_file()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not candidates:
        raise RuntimeError(
            f"no PostgreSQL server under {PG_ROOT}/<version>/bin: the TLS tests need "
            "Debian's (`make postgresql` installs it; `make test` does so by itself), or "
            f"set {ENV_BIN} to a folder with initdb and postgres built with OpenSSL"
        )
    return candidates[-1]


def server_user() -> pwd.struct_passwd | None:
    """Who runs the cluster: None (ourselves) unless we are root, which PostgreSQL
    refuses; then the ``postgres`` user, or pgserver's."""
    if os.geteuid() != 0:
        return None
    with contextlib.suppress(KeyError):
        return pwd.getpwnam("postgres")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pgserver warns about XDG_RUNTIME_DIR at import
        from pgserver.utils import ensure_user_exists
    entry = ensure_user_exists("pgserver")
    if entry is None:
        raise RuntimeError("running as root and no non-root user to run PostgreSQL as")
    return entry


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class TlsPostgres:
    """The running TLS-only server and the files a client needs."""

    port: int
    socket_dir: Path
    ca_file: Path
    """The CA that issued the server's certificate (devcerts' ``ca.crt``)."""
    unknown_ca_file: Path
    """Another devcerts CA: it issued nothing this server presents."""
    client_cert: Path
    client_key: Path
    """The ``decision`` client certificate and key, issued by ``ca_file``."""
    foreign_client_cert: Path
    foreign_client_key: Path
    """A ``decision`` client certificate issued by the unknown CA."""
    wrong_cn_cert: Path
    wrong_cn_key: Path
    """A client certificate from the right CA for another name (``audit``)."""

    def superuser_dsn(self, database: str = "postgres") -> str:
        """The superuser over the unix socket (the only way it gets in)."""
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def dsn(
        self,
        database: str,
        *,
        user: str = PASSWORD_ROLE,
        password: str | None = None,
        host: str = "127.0.0.1",
        sslmode: str | None = "verify-full",
        sslrootcert: Path | str | None = None,
        sslcert: Path | None = None,
        sslkey: Path | None = None,
    ) -> str:
        """A TCP DSN as an operator writes one (password percent-encoded); the CA is
        this server's unless ``sslrootcert`` says otherwise ("" for none)."""
        if password is None:
            password = CERT_PASSWORD if user == CERT_ROLE else PASSWORD
        query: dict[str, str] = {}
        if sslmode is not None:
            query["sslmode"] = sslmode
        root = self.ca_file if sslrootcert is None else sslrootcert
        if root != "":
            query["sslrootcert"] = str(root)
        if sslcert is not None:
            query["sslcert"] = str(sslcert)
        if sslkey is not None:
            query["sslkey"] = str(sslkey)
        netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}:{self.port}"
        suffix = f"?{urlencode(query)}" if query else ""
        return f"postgresql://{netloc}/{database}{suffix}"

    async def create_database(self, owner: str = PASSWORD_ROLE) -> str:
        """A fresh database owned by ``owner`` (so a store may migrate it); its name."""
        name = f"stk_tls_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(self.superuser_dsn())
        try:
            await conn.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        finally:
            await conn.close()
        return name

    async def tls_sessions(self, database: str) -> list[tuple[str, bool]]:
        """(role, uses TLS) of every client connected to ``database`` now."""
        conn = await asyncpg.connect(self.superuser_dsn())
        try:
            rows = await conn.fetch(
                "SELECT a.usename, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s"
                " USING (pid) WHERE a.datname = $1 AND a.pid <> pg_backend_pid()",
                database,
            )
        finally:
            await conn.close()
        return [(str(r["usename"]), bool(r["ssl"])) for r in rows]


HBA = f"""\
# The superuser: over the unix socket only (trust: the socket folder is private).
local   all  postgres                      trust
# TCP: TLS only. A password, or a password and a client certificate whose CN is the role.
hostssl all  {PASSWORD_ROLE}  127.0.0.0/8  scram-sha-256
hostssl all  {CERT_ROLE}      127.0.0.0/8  scram-sha-256 clientcert=verify-full
# Everything else, plaintext above all, is refused.
host    all  all          0.0.0.0/0    reject
host    all  all          ::/0         reject
"""


def _issue(out: Path) -> None:
    """devcerts' CA, the ``postgres`` server certificate and client certificates."""
    devcerts.generate(out, ["postgres", CERT_ROLE, "audit"])


@contextlib.contextmanager
def tls_postgres_server() -> Iterator[TlsPostgres]:
    """Start the TLS-only cluster (module docstring); stop and remove it on exit."""
    bin_dir = pg_bin_dir()
    user = server_user()
    root = Path(tempfile.mkdtemp(prefix="stk-pgtls-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        os.chmod(root, 0o755)  # the server's user must traverse it
        data, sock, conf, certs, other = (root / n for n in ("data", "sock", "conf", "ca", "x"))
        for folder in (data, sock, conf):
            folder.mkdir(mode=0o700)
        _issue(certs)
        devcerts.generate(other, [CERT_ROLE])
        shutil.copy(certs / "postgres.crt", conf / "server.crt")
        shutil.copy(certs / "postgres.key", conf / "server.key")
        shutil.copy(certs / "ca.crt", conf / "ca.crt")  # what client certificates chain to
        (conf / "pg_hba.conf").write_text(HBA)
        os.chmod(conf / "server.key", 0o600)  # PostgreSQL refuses a key others may read
        run_as: list[str] = []
        if user is not None:
            run_as = ["runuser", "-u", user.pw_name, "--"]
            for path in (data, sock, conf, *conf.iterdir()):
                os.chown(path, user.pw_uid, user.pw_gid)
        initdb = subprocess.run(
            [*run_as, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=reject", "--no-sync", "--encoding=UTF8", "--locale=C"],
            capture_output=True,
            text=True,
        )  # fmt: skip
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed: {initdb.stderr[-2000:]}")
        log = root / "server.log"
        for _attempt in range(3):  # a free port can be taken between the probe and bind
            port = _free_port()
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [*run_as, str(bin_dir / "postgres"), "-D", str(data),
                     "-p", str(port), "-k", str(sock),
                     "-c", f"listen_addresses=127.0.0.1,{UNNAMED_HOST}",
                     "-c", f"hba_file={conf / 'pg_hba.conf'}",
                     "-c", "ssl=on",
                     "-c", f"ssl_cert_file={conf / 'server.crt'}",
                     "-c", f"ssl_key_file={conf / 'server.key'}",
                     "-c", f"ssl_ca_file={conf / 'ca.crt'}",
                     "-c", "ssl_min_protocol_version=TLSv1.2",
                     "-c", "password_encryption=scram-sha-256",
                     "-c", "fsync=off", "-c", "max_connections=200"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            if _wait_ready(bin_dir, sock, port, proc):
                break
            proc.wait()
            proc = None
            if "could not bind" not in log.read_text(errors="replace"):
                break
        if proc is None:
            raise RuntimeError(f"PostgreSQL did not start:\n{log.read_text()[-3000:]}")
        server = TlsPostgres(
            port=port,
            socket_dir=sock,
            ca_file=certs / "ca.crt",
            unknown_ca_file=other / "ca.crt",
            client_cert=certs / f"{CERT_ROLE}.crt",
            client_key=certs / f"{CERT_ROLE}.key",
            foreign_client_cert=other / f"{CERT_ROLE}.crt",
            foreign_client_key=other / f"{CERT_ROLE}.key",
            wrong_cn_cert=certs / "audit.crt",
            wrong_cn_key=certs / "audit.key",
        )
        asyncio.run(_create_roles(server))
        yield server
    finally:
        if proc is not None:
            stop_server(proc, root / "data")
        shutil.rmtree(root, ignore_errors=True)


def stop_server(proc: subprocess.Popen[bytes], data: Path) -> None:
    """Fast shutdown (SIGINT: SIGTERM's "smart" one would wait for clients), sent to the
    postmaster itself (``proc`` may be runuser, which need not pass signals on)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGINT)
    with contextlib.suppress(OSError):
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_ready(bin_dir: Path, sock: Path, port: int, proc: subprocess.Popen[bytes]) -> bool:
    """Wait (generously: the machine is shared) until the server accepts connections;
    False when it exited first."""
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        ready = subprocess.run(
            [str(bin_dir / "pg_isready"), "-q", "-h", str(sock), "-p", str(port)],
            capture_output=True,
        )
        if ready.returncode == 0:
            return True
        time.sleep(0.1)
    proc.kill()
    return False


async def _create_roles(server: TlsPostgres) -> None:
    conn = await asyncpg.connect(server.superuser_dsn())
    try:
        for role, password in ((PASSWORD_ROLE, PASSWORD), (CERT_ROLE, CERT_PASSWORD)):
            # A password cannot be a bind parameter of ALTER ROLE: quote it as a literal.
            literal = "'" + password.replace("'", "''") + "'"
            assert re.fullmatch(r"[a-z_]+", role)
            await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD {literal}")
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def tls_pg() -> Iterator[TlsPostgres]:
    """The session's TLS-only PostgreSQL (module docstring). Never a silent skip."""
    try:
        with tls_postgres_server() as server:
            yield server
    except RuntimeError as err:
        pytest.fail(f"the PostgreSQL TLS tests need a server: {err}")
