"""components/postgres on a real PostgreSQL server: the server runs with the arguments the
StatefulSet gives it and the component's pg_hba.conf, its init script creates the roles
with passwords handed over as psql variables, and then:

- each service's role logs in to its own database, and nowhere else;
- wrong passwords and the superuser over the network are refused;
- a password full of SQL stays a password (no injection through the Secret);
- the audit service's real PostgreSQL store migrates and writes as its role;
- the backup/restore commands of deploy/README.md round-trip a live hash-chained trail.

The server is Debian's PostgreSQL (``tests.pg_tls``: built with OpenSSL; pgserver's wheel
has no SSL), started here as in the pod: the StatefulSet's arguments, TLS on with a
``postgres`` certificate from ``stockade.devcerts`` where the pod mounts
``stockade-tls-postgres``, the component's ``pg_hba.conf`` as it is, and the services
connecting with ``sslmode=verify-full`` as deploy/README tells them to; plaintext is
refused by the server itself. One difference: the superuser's unix-socket line is
``trust`` instead of ``peer`` (peer auth would need the tests to run as the OS user
``postgres``). The network lines are what is under test.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from stockade import devcerts
from stockade.audit.model import AuditEventRow
from stockade.audit.store.postgres import PostgresAuditStore
from tests.pg_tls import pg_bin_dir, server_user, stop_server

from .conftest import DEPLOY, POSTGRES_COMBINATION, Manifest, env_of, workload

COMPONENT = DEPLOY / "k8s" / "components" / "postgres"
README = DEPLOY / "README.md"
SERVICES = ("decision", "audit", "executor")
# Passwords as hostile as a Secret could hold: quotes, SQL, psql's own syntax, a newline
# is impossible in an env value set from a literal, so none.
PASSWORDS = {
    "decision": "d3c'; ALTER ROLE stockade_decision SUPERUSER; --",
    "audit": "a:'audit_password' \\gexec $(id) `id` \"q\"",
    "executor": "x'||(SELECT 1)||'; CREATE ROLE evil SUPERUSER LOGIN; --",
    "executor_admin": "adm'; GRANT ALL ON DATABASE stockade_decision TO stockade_executor; --",
}
SUPERUSER_PASSWORD = "super-secret-not-for-network"
PASSWORD_OF = {f"stockade_{service}": password for service, password in PASSWORDS.items()}


def _bin(name: str) -> str:
    try:
        return str(pg_bin_dir() / name)
    except RuntimeError as err:  # never a silent skip
        pytest.fail(str(err))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Server:
    """The component's PostgreSQL, running."""

    port: int
    socket_dir: Path
    env: dict[str, str]
    """psql's environment for the superuser over the unix socket."""
    ca_file: Path
    """The devcerts CA that issued the server's certificate (the Secret's ``ca.crt``)."""

    def dsn(self, user: str, password: str, database: str, sslmode: str = "verify-full") -> str:
        """A service's DSN as deploy/README writes it: TLS, the server verified."""
        from urllib.parse import quote

        return (
            f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}"
            f"@127.0.0.1:{self.port}/{database}?sslmode={sslmode}"
            f"&sslrootcert={quote(str(self.ca_file), safe='')}"
        )

    def superuser_dsn(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={self.port}"


def _statefulset(rendered: dict[str, list[Manifest]]) -> Manifest:
    return workload(rendered[POSTGRES_COMBINATION], "postgres")


def _server_args(obj: Manifest, conf: Path) -> list[str]:
    """The container's ``postgres -c …`` arguments with the pod's paths made local."""
    container = obj["spec"]["template"]["spec"]["containers"][0]
    args = list(container["args"])
    assert args[0] == "postgres"
    tls_dir = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["tls"]
    local = {
        "/etc/stockade/postgres/pg_hba.conf": str(conf / "pg_hba.conf"),
        f"{tls_dir}/tls.crt": str(conf / "tls.crt"),
        f"{tls_dir}/tls.key": str(conf / "tls.key"),
    }
    out: list[str] = []
    for arg in args[1:]:
        name, sep, value = arg.partition("=")
        if name.startswith("ssl_") and name.endswith("_file"):
            assert value in local, f"{arg}: a file the test does not provide"
        out.append(f"{name}{sep}{local.get(value, value)}" if sep else arg)
    return out


@pytest.fixture(scope="module")
def server(rendered: dict[str, list[Manifest]]) -> Iterator[Server]:
    """The component's server on a free loopback port (module-scoped: ~3 s to start)."""
    obj = _statefulset(rendered)
    root = Path(tempfile.mkdtemp(prefix="stk-pgc-"))
    run_as: list[str] = []
    owner: tuple[int, int] | None = None
    entry = server_user()  # PostgreSQL refuses to run as root
    if entry is not None:
        owner = (entry.pw_uid, entry.pw_gid)
        run_as = ["runuser", "-u", entry.pw_name, "--"]
        os.chmod(root, 0o755)
    data, sock, conf, certs = root / "data", root / "sock", root / "conf", root / "certs"
    for folder in (data, sock, conf):
        folder.mkdir()
    hba_text = (COMPONENT / "pg_hba.conf").read_text()
    peer_line = re.compile(r"^local\s+all\s+postgres\s+peer$", re.M)
    assert peer_line.search(hba_text), "the superuser's socket line changed: update the test"
    hba_text = peer_line.sub("local all postgres trust", hba_text)
    (conf / "pg_hba.conf").write_text(hba_text)
    # stockade-tls-postgres as deploy/README creates it: devcerts' postgres certificate.
    devcerts.generate(certs, ["postgres"])
    shutil.copy(certs / "postgres.crt", conf / "tls.crt")
    shutil.copy(certs / "postgres.key", conf / "tls.key")
    os.chmod(conf / "tls.key", 0o600)  # the Secret's defaultMode; PostgreSQL insists
    if owner:
        for path in (data, sock, conf, *conf.iterdir()):
            os.chown(path, *owner)
    port = _free_port()
    log = root / "server.log"
    subprocess.run(
        [*run_as, _bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=reject"],
        check=True,
        capture_output=True,
    )
    args = _server_args(obj, conf)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *run_as,
                _bin("postgres"),
                "-D",
                str(data),
                *args,
                "-c",
                "listen_addresses=127.0.0.1,127.0.0.2",
                "-p",
                str(port),
                "-k",
                str(sock),
            ],
            stdout=out,
            stderr=out,
        )
    env = {**os.environ, "PGHOST": str(sock), "PGPORT": str(port), "POSTGRES_USER": "postgres"}
    try:
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(
                [_bin("pg_isready"), "--host", str(sock), "--port", str(port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the component's server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        _run_init_script(obj, env, conf)
        yield Server(port=port, socket_dir=sock, env=env, ca_file=certs / "ca.crt")
    finally:
        stop_server(proc, data)
        shutil.rmtree(root, ignore_errors=True)


def _run_init_script(obj: Manifest, env: dict[str, str], conf: Path) -> None:
    """Run init-stockade.sh as the image's entrypoint would, with the pod's environment
    (the passwords from the Secret) and roles.sql where the script looks for it."""
    script = (COMPONENT / "init-stockade.sh").read_text()
    assert "/etc/stockade/postgres/roles.sql" in script
    shutil.copy(COMPONENT / "roles.sql", conf / "roles.sql")
    local = conf / "init-stockade.sh"
    local.write_text(script.replace("/etc/stockade/postgres/roles.sql", str(conf / "roles.sql")))
    pod_env = env_of(obj["spec"]["template"]["spec"]["containers"][0])
    secret_values = {
        "postgres-password": SUPERUSER_PASSWORD,
        **{f"{s}-password": PASSWORDS[s] for s in SERVICES},
        "executor-admin-password": PASSWORDS["executor_admin"],
    }
    run_env = {**env, "PATH": f"{Path(_bin('psql')).parent}:{env['PATH']}"}
    for name, entry in pod_env.items():
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["name"] == "stockade-postgres"
            run_env[name] = secret_values[ref["key"]]
    # The entrypoint runs *.sh files with /bin/sh (sourced by bash when not executable).
    done = subprocess.run(["sh", str(local)], env=run_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


async def _connect(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, timeout=20)


async def test_each_role_reaches_its_own_database(server: Server) -> None:
    for service in ("decision", "audit"):
        role = f"stockade_{service}"
        conn = await _connect(server.dsn(role, PASSWORDS[service], role))
        try:
            assert await conn.fetchval("SELECT current_user") == role
            # Owning its database is enough to create its tables (the migrations).
            await conn.execute("CREATE TABLE probe (x int); DROP TABLE probe")
        finally:
            await conn.close()
    # The executor's role connects to its database and may create nothing there.
    conn = await _connect(
        server.dsn("stockade_executor", PASSWORDS["executor"], "stockade_executor")
    )
    try:
        for statement in (
            "CREATE TABLE probe (x int)",
            "CREATE SCHEMA probe",
            "CREATE TEMPORARY TABLE probe (x int)",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
    finally:
        await conn.close()


async def test_the_migration_job_gives_the_executor_its_functions_and_nothing_more(
    server: Server, rendered: dict[str, list[Manifest]]
) -> None:
    """What the scale-out component's Job runs, with the admin role roles.sql creates:
    the executors' schema appears, the executor's role can spend a grant once (the one
    arbiter across replicas) and cannot read, change or delete a record."""
    job = workload(rendered[POSTGRES_COMBINATION], "executor-state-migrate")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    admin = server.dsn("stockade_executor_admin", PASSWORDS["executor_admin"], "stockade_executor")
    stockade = Path(sys.executable).parent / "stockade"
    assert command[0] == "stockade"
    done = subprocess.run(
        [str(stockade), *command[1:]],
        env={**os.environ, "STOCKADE_EXECUTOR_STATE_ADMIN_DSN": admin},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert PASSWORDS["executor_admin"] not in done.stdout + done.stderr
    from stockade.executor.pg_state import PostgresExecutorState

    dsn = server.dsn("stockade_executor", PASSWORDS["executor"], "stockade_executor")
    replicas = [await PostgresExecutorState.open(dsn) for _ in range(2)]
    try:
        expires = time.time() + 60
        assert await replicas[0].spend_grant("grant-once", expires) is True
        assert await replicas[1].spend_grant("grant-once", expires) is False
    finally:
        for replica in replicas:
            await replica.close()
    conn = await _connect(dsn)
    try:
        for statement in (
            "SELECT * FROM stockade_executor.spent_grant",
            "DELETE FROM stockade_executor.spent_grant",
            "UPDATE stockade_executor.spent_grant SET expires_at = 0",
            "CREATE TABLE stockade_executor.probe (x int)",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
    finally:
        await conn.close()


async def test_a_role_reaches_no_other_database(server: Server) -> None:
    databases = [*(f"stockade_{s}" for s in SERVICES), "postgres", "template1"]
    for service in SERVICES:
        role = f"stockade_{service}"
        for database in databases:
            if database == role:
                continue
            # The first wall: pg_hba.conf has no line for it.
            with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
                await _connect(server.dsn(role, PASSWORDS[service], database))
    # The second wall, should a line be added: CONNECT was taken from PUBLIC, so no role
    # may connect to a database it does not own.
    conn = await _connect(server.superuser_dsn("postgres"))
    try:
        for service in SERVICES:
            for database in databases:
                may = await conn.fetchval(
                    "SELECT has_database_privilege($1, $2, 'CONNECT')",
                    f"stockade_{service}",
                    database,
                )
                assert may is (database == f"stockade_{service}"), (service, database)
    finally:
        await conn.close()


async def test_wrong_passwords_and_the_superuser_are_refused(server: Server) -> None:
    role = "stockade_audit"
    with pytest.raises(asyncpg.InvalidPasswordError):
        await _connect(server.dsn(role, PASSWORDS["decision"], role))
    with pytest.raises(asyncpg.InvalidPasswordError):
        await _connect(server.dsn(role, "", role))
    for database in ("postgres", role):
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
            await _connect(server.dsn("postgres", SUPERUSER_PASSWORD, database))
    # A role that does not exist is refused too (no line lets it in).
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
        await _connect(server.dsn("evil", "x", role))


HBA_LINE = re.compile(r"^(local|host|hostssl|hostnossl|hostgssenc|hostnogssenc)\s+(.*)$")


def test_only_tls_connections_get_in(rendered: dict[str, list[Manifest]]) -> None:
    """On the files: every network line that lets anyone in is ``hostssl`` with SCRAM,
    everything else over the network is rejected at the end, and the server is told to
    use TLS with the certificate of its mounted Secret (the live server: below)."""
    lines = [
        line.split()
        for line in (COMPONENT / "pg_hba.conf").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert all(HBA_LINE.match(" ".join(line)) for line in lines), lines
    network = [line for line in lines if line[0] != "local"]
    admitting = [line for line in network if line[-1] != "reject"]
    assert admitting, "no service can log in"
    for line in admitting:
        assert line[0] == "hostssl" and line[-1] == "scram-sha-256", line
        # One role, its own database (the executor's also its administrator), nothing shared.
        assert line[1].startswith("stockade_"), line
        assert line[2] in (line[1], f"{line[1]}_admin"), line
    assert {tuple(line[:3]) for line in network[-2:]} == {
        ("host", "all", "all"),
        ("hostnossl", "all", "all"),
    }
    assert all(line[-1] == "reject" for line in network[-2:])
    locals_ = [line for line in lines if line[0] == "local"]
    assert locals_ == [["local", "all", "postgres", "peer"]]
    obj = _statefulset(rendered)
    container = obj["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    settings = dict(a.partition("=")[::2] for a in args if "=" in a)
    assert settings["ssl"] == "on"
    assert settings["hba_file"] == "/etc/stockade/postgres/pg_hba.conf"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}
    tls_dir = mounts["tls"]
    assert volumes["tls"]["secret"]["secretName"] == "stockade-tls-postgres"
    assert settings["ssl_cert_file"] == f"{tls_dir}/tls.crt"
    assert settings["ssl_key_file"] == f"{tls_dir}/tls.key"
    # PostgreSQL refuses a key file group-writable or readable by others.
    assert volumes["tls"]["secret"]["defaultMode"] & 0o037 == 0


async def test_the_live_server_admits_only_verified_tls(server: Server) -> None:
    """What the lines above do on the running server: a service's login with the README's
    DSN is TLS; the same login in plaintext is refused by pg_hba.conf; a client that
    dials an address the certificate does not name refuses the server."""
    role = "stockade_decision"
    conn = await _connect(server.dsn(role, PASSWORD_OF[role], role))
    try:
        tls = await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        assert tls is True
    finally:
        await conn.close()
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encryption"):
        await _connect(server.dsn(role, PASSWORD_OF[role], role, sslmode="disable"))
    wrong_host = server.dsn(role, PASSWORD_OF[role], role).replace("@127.0.0.1:", "@127.0.0.2:")
    with pytest.raises(ssl.SSLCertVerificationError, match="not valid for '127.0.0.2'"):
        await _connect(wrong_host)


async def test_hostile_passwords_stay_passwords(server: Server) -> None:
    conn = await _connect(server.superuser_dsn("postgres"))
    try:
        roles = await conn.fetch(
            "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole, rolreplication, "
            "rolconnlimit FROM pg_roles WHERE rolname LIKE 'stockade%' OR rolname = 'evil' "
            "ORDER BY rolname"
        )
        stored = await conn.fetch(
            "SELECT rolname, rolpassword FROM pg_authid WHERE rolname LIKE 'stockade%'"
        )
    finally:
        await conn.close()
    assert [r["rolname"] for r in roles] == sorted(
        [*(f"stockade_{s}" for s in SERVICES), "stockade_executor_admin"]
    )
    for row in roles:
        flags = (row["rolsuper"], row["rolcreatedb"], row["rolcreaterole"], row["rolreplication"])
        assert flags == (False, False, False, False), row["rolname"]
        assert 0 < row["rolconnlimit"] <= 200
    for row in stored:
        # Hashed with SCRAM, never kept as given.
        assert row["rolpassword"].startswith("SCRAM-SHA-256$"), row["rolname"]


def _event(n: int) -> AuditEventRow:
    return AuditEventRow(
        event_id=f"restore-e{n}",
        session_id="restore",
        step=n % 8,
        tool_name="read_file",
        status="OK",
        output_preview=f"output {n}",
        time_ns=1_700_000_000_000_000_000 + n * 1_000_000,
        call_id=f"call-{n}",
        verdict="ALLOW",
    )


async def _audit_rows(dsn: str) -> tuple[bool, int, str]:
    store = await PostgresAuditStore.open(dsn, chain_id="restore-check")
    try:
        verdict = await store.verify()
    finally:
        await store.close()
    return verdict.ok, verdict.rows_checked, verdict.detail


def _readme_command(pattern: str) -> list[str]:
    """The arguments of the README's command matching ``pattern`` (after ``-- ``)."""
    text = README.read_text().replace("\\\n", " ")
    match = re.search(pattern, text)
    assert match, f"deploy/README.md has no command like {pattern!r}"
    return match.group(1).split()


async def test_the_readme_backup_and_restore_round_trip_a_live_trail(server: Server) -> None:
    """The audit service's real store writes as its role over TLS; pg_dump and pg_restore
    with the README's own arguments bring the trail back to the backup's moment, and
    every chain verifies."""
    role = "stockade_audit"
    dsn = server.dsn(role, PASSWORDS["audit"], role)
    a = await PostgresAuditStore.open(dsn, chain_id="audit-7d9f-abcde")
    b = await PostgresAuditStore.open(dsn, chain_id="audit-7d9f-fghij")
    try:
        await a.append([_event(i) for i in range(0, 30)])
        await b.append([_event(i) for i in range(30, 50)])
        dump_args = _readme_command(r"exec postgres-0 -- (pg_dump [^>]*?stockade_audit) >")
        restore_args = _readme_command(r"exec -i postgres-0 -- (pg_restore .*?) <")
        dump = subprocess.run(
            [_bin(dump_args[0]), *dump_args[1:]], env=server.env, capture_output=True
        )
        assert dump.returncode == 0, dump.stderr
        # Rows written after the backup are what a restore gives up.
        await a.append([_event(i) for i in range(50, 60)])
    finally:
        await a.close()
        await b.close()
    assert (await _audit_rows(dsn))[:2] == (True, 60)
    restore = subprocess.run(
        [_bin(restore_args[0]), *restore_args[1:]],
        env=server.env,
        input=dump.stdout,
        capture_output=True,
    )
    assert restore.returncode == 0, restore.stderr
    ok, rows, detail = await _audit_rows(dsn)
    assert (ok, rows) == (True, 50), detail
    # The restored objects belong to the service's role, so it keeps migrating them.
    conn = await _connect(dsn)
    try:
        owners = {
            r["tableowner"]
            for r in await conn.fetch(
                "SELECT tableowner FROM pg_tables WHERE schemaname = 'public'"
            )
        }
    finally:
        await conn.close()
    assert owners == {role}
