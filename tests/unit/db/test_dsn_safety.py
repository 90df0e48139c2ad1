"""What a PostgreSQL DSN may do before any byte reaches a server (stockade.db.dsn):

- a DSN that reaches a network host must verify the server's certificate
  (``sslmode=verify-full`` or ``verify-ca``): plaintext and unverified TLS are for unix
  sockets and loopback only (X-3), wherever the host or the mode comes from (the URI's
  host list, its ``host`` parameter, ``PGHOST``, a service file, ``PGSSLMODE``), in any
  spelling of the address;
- the password never shows in a redacted DSN or in an error, however it is written
  (unencoded delimiters, in the query under any spelling of its key), and a DSN that does
  not parse is refused with a message quoting none of it.

The host and mode readings are checked against asyncpg's own parser on a corpus, so a
new asyncpg that reads DSNs differently fails here rather than in production.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from asyncpg import connect_utils

from stockade import devcerts
from stockade.db.dsn import (
    _is_local,
    check_transport,
    effective_sslmode,
    network_hosts,
    redact_dsn,
    scrub,
)
from stockade.db.postgres import connect, open_pool
from stockade.errors import InvalidArgument, StockadeError
from stockade.executor.pg_state import PostgresExecutorState

#: TEST-NET-1 (RFC 5737): routable nowhere, so a test that wrongly let a DSN through would
#: hang on connect instead of passing.
REMOTE = "192.0.2.10"
NO_ENV: dict[str, str] = {}

REFUSED = [
    f"postgresql://u:p@{REMOTE}/db",
    f"postgresql://u:p@{REMOTE}/db?sslmode=prefer",
    f"postgresql://u:p@{REMOTE}/db?sslmode=require",
    f"postgresql://u:p@{REMOTE}/db?sslmode=allow",
    f"postgresql://u:p@{REMOTE}/db?sslmode=disable",
    f"postgres://u:p@{REMOTE}:5432/db?sslmode=require",
    "postgresql://u:p@db.example.internal/db?sslmode=require",
    # another position: the host parameter, a host list, IPv6, a port on each host
    f"postgresql://u:p@/db?host={REMOTE}&sslmode=require",
    f"postgresql://u:p@127.0.0.1,{REMOTE}/db?sslmode=require",
    f"postgresql://u:p@127.0.0.1:5432,{REMOTE}:5433/db",
    "postgresql://u:p@[2001:db8::1]:5432/db?sslmode=require",
    "postgresql://u:p@[::ffff:192.0.2.10]/db?sslmode=require",
    "postgresql://u:p@[fe80::1%25eth0]/db?sslmode=require",
    # look-alikes of local names
    "postgresql://u:p@localhost.example.com/db?sslmode=require",
    "postgresql://u:p@127.0.0.1.nip.io/db?sslmode=require",
    "postgresql://u:p@0.0.0.0/db?sslmode=require",
    "postgresql://u:p@127.1/db?sslmode=require",
    "postgresql://u:p@localhost%2eexample.com/db?sslmode=require",
    # the last sslmode wins (as in asyncpg); modes are case-sensitive there
    f"postgresql://u:p@{REMOTE}/db?sslmode=verify-full&sslmode=require",
    f"postgresql://u:p@{REMOTE}/db?sslmode=VERIFY-FULL",
    f"postgresql://u:p@{REMOTE}/db?sslmode=verify_full",
    f"postgresql://u:p@{REMOTE}/db?sslmode=",
    f"postgresql://u:p@{REMOTE}/db?sslmode=verify-full%20",
    f"postgresql://u:p@{REMOTE}/db?SSLMODE=verify-full",
    f"postgresql://u:p@{REMOTE}/db?sslmode=require&sslrootcert=/ca.crt",
    f"postgresql://u:p@{REMOTE}/db?sslmode=require&sslnegotiation=direct",
    # other spellings of addresses that are not loopback, or not obviously so
    "postgresql://u:p@2130706433/db?sslmode=require",
    "postgresql://u:p@0x7f.0.0.1/db?sslmode=require",
    "postgresql://u:p@127.0.0.1./db?sslmode=require",
    "postgresql://u:p@localhost./db?sslmode=require",
    "postgresql://u:p@[::]/db?sslmode=require",
    f"postgresql://u:p@{REMOTE}%2c127.0.0.1/db?sslmode=require",
    # a host hidden from one reading of the URI but not from the other
    f"postgresql://u@{REMOTE}?x=@127.0.0.1/db",
    # a local URI host with a remote host parameter: stricter than asyncpg, on purpose
    f"postgresql://u:p@127.0.0.1/db?host={REMOTE}",
    # a service file may name any host
    "postgresql://u:p@/db?service=prod",
]

ACCEPTED = [
    "postgresql://u:p@/db?host=/run/postgresql",
    "postgresql://u:p@/db",
    "postgresql://u:p@localhost/db?sslmode=disable",
    "postgresql://u:p@LOCALHOST:5432/db",
    "postgresql://u:p@127.0.0.1:5432/db?sslmode=disable",
    "postgresql://u:p@127.8.9.10/db",
    "postgresql://u:p@[::1]:5432/db?sslmode=prefer",
    "postgresql://u:p@[::ffff:127.0.0.1]/db",
    "postgresql://u:p@[::ffff:7f00:1]/db",
    "postgresql://u:p@[0:0:0:0:0:0:0:1]/db",
    f"postgresql://u:p@{REMOTE}/db?ssl%6Dode=verify-full",
    "postgresql://u:p@127.0.0.1,[::1]:5433/db",
    f"postgresql://u:p@{REMOTE}/db?sslmode=verify-full&sslrootcert=/ca.crt",
    f"postgresql://u:p@{REMOTE}/db?sslmode=verify-ca&sslrootcert=/ca.crt",
    f"postgresql://u:p@{REMOTE},db.example/db?sslmode=verify-full",
    f"postgresql://u:p@/db?host={REMOTE}&sslmode=verify-full",
    f"postgresql://u:p@{REMOTE}/db?sslmode=require&sslmode=verify-full",
]


@pytest.mark.parametrize("dsn", REFUSED)
def test_a_network_host_without_verification_is_refused(dsn: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_transport(dsn, what="decision", environ=NO_ENV)
    message = caught.value.message
    assert "the decision database DSN reaches" in message
    assert "sslmode=verify-full" in message and "sslrootcert" in message
    assert ":p@" not in message


@pytest.mark.parametrize("dsn", ACCEPTED)
def test_local_or_verified_dsns_pass(dsn: str) -> None:
    check_transport(dsn, what="decision", environ=NO_ENV)


def test_the_environment_counts_as_asyncpg_reads_it() -> None:
    hostless = "postgresql://u:p@/db"
    # PGHOST applies when the DSN names no host.
    with pytest.raises(InvalidArgument, match=REMOTE):
        check_transport(hostless, what="audit", environ={"PGHOST": REMOTE})
    check_transport(hostless, what="audit", environ={"PGHOST": "/run/postgresql"})
    # PGSSLMODE applies when the DSN names no mode, and never overrides the DSN's.
    remote = f"postgresql://u:p@{REMOTE}/db"
    check_transport(remote, what="audit", environ={"PGSSLMODE": "verify-full"})
    with pytest.raises(InvalidArgument, match="sslmode=require"):
        check_transport(remote, what="audit", environ={"PGSSLMODE": "require"})
    with pytest.raises(InvalidArgument, match="sslmode=require"):
        check_transport(
            f"{remote}?sslmode=require", what="audit", environ={"PGSSLMODE": "verify-full"}
        )
    # A service named by the environment may point anywhere.
    with pytest.raises(InvalidArgument, match="service file"):
        check_transport(hostless, what="audit", environ={"PGSERVICE": "prod"})


def _asyncpg_reading(dsn: str) -> tuple[set[str], str]:
    """(the network hosts, sslmode) as asyncpg itself parses ``dsn``."""
    addrs, params = connect_utils._parse_connect_dsn_and_args(
        dsn=dsn,
        host=None,
        port=None,
        user=None,
        password=None,
        passfile=None,
        database=None,
        ssl=None,
        service=None,
        servicefile=None,
        direct_tls=None,
        server_settings=None,
        target_session_attrs=None,
        krbsrvname=None,
        gsslib=None,
    )
    hosts = {addr if isinstance(addr, str) else addr[0] for addr in addrs}
    return {h for h in hosts if not _is_local(h)}, params.sslmode.name.replace("_", "-")


#: Where our reading is deliberately stricter than asyncpg's (see network_hosts).
STRICTER = ("service=", "x=@", "127.0.0.1/db?host=")


@pytest.mark.parametrize(
    "dsn",
    [d for d in [*ACCEPTED, *REFUSED] if "/ca.crt" not in d and not any(x in d for x in STRICTER)],
)
def test_our_reading_agrees_with_asyncpgs(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where asyncpg accepts the DSN, it goes to the network hosts we see, with the mode
    we see. (DSNs with a CA file are checked below: asyncpg loads it while parsing.)"""
    for name in list(os.environ):
        if name.startswith("PG"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    try:
        remote, mode = _asyncpg_reading(dsn)
    except Exception:  # asyncpg refuses it too (a bad mode, a bad address): no comparison
        return
    assert set(network_hosts(dsn, NO_ENV)) == remote, dsn
    if remote:  # (with unix sockets only, asyncpg does not even try TLS: no matter)
        assert effective_sslmode(dsn, NO_ENV) == mode, dsn


def test_a_dsn_asyncpg_refuses_is_in_the_corpus() -> None:
    """The early return above must not swallow the whole corpus: most DSNs parse."""
    parsed = 0
    for dsn in [*ACCEPTED, *REFUSED]:
        if "/ca.crt" in dsn or any(x in dsn for x in STRICTER):
            continue
        try:
            _asyncpg_reading(dsn)
        except Exception:
            continue
        parsed += 1
    assert parsed >= 25


def test_verifying_modes_read_the_same_in_asyncpg(tmp_path: Path) -> None:
    devcerts.generate(tmp_path, ["postgres"])
    ca = quote(str(tmp_path / "ca.crt"), safe="")
    for mode in ("verify-full", "verify-ca"):
        dsn = f"postgresql://u:p@{REMOTE}/db?sslmode={mode}&sslrootcert={ca}"
        assert _asyncpg_reading(dsn) == ({REMOTE}, mode)
        assert effective_sslmode(dsn, NO_ENV) == mode
        check_transport(dsn, what="audit", environ=NO_ENV)


# --- passwords stay out ------------------------------------------------------------------

SECRET = "Xy7-secret-Qz9"
#: A password written into a DSN every way an operator might, encoded or not.
LEAKY = [
    f"postgresql://u:{SECRET}@db/x",
    f"postgresql://u:{quote(SECRET + '/?#@:[]%&=', safe='')}@db/x",
    f"postgresql://u:{SECRET}/more@db/x",
    f"postgresql://u:{SECRET}?more@db/x",
    f"postgresql://u:{SECRET}#more@db/x",
    f"postgresql://u:{SECRET}@more@db/x",
    f"postgresql://u:{SECRET}[more@db/x",
    f"postgresql://u:ab:{SECRET}@db/x",
    f"postgresql://u@db/x?password={SECRET}",
    f"postgresql://u@db/x?PASSWORD={SECRET}",
    f"postgresql://u@db/x?pass%77ord={SECRET}",
    f"postgresql://u@db/x?sslpassword={SECRET}",
    f"postgresql://u@db/x?passfile=/run/{SECRET}",
    f"postgresql://u@db/x?password=ab&{SECRET}",
    f"postgresql://u@db/x?sslmode=require&password={SECRET}#frag",
    f"postgresql://u@db/x#password={SECRET}",
    f"postgresql://u@db/x?password={SECRET}&password={SECRET}2",
    f"host=db password={SECRET}",
]


@pytest.mark.parametrize("dsn", LEAKY)
def test_redaction_never_shows_a_password(dsn: str) -> None:
    shown = redact_dsn(dsn)
    assert SECRET not in shown
    assert quote(SECRET, safe="") not in shown
    assert "Xy7" not in shown and "Qz9" not in shown


def test_redaction_keeps_what_an_operator_needs() -> None:
    dsn = (
        "postgresql://stockade_audit:pw@db.example:5432/stockade_audit"
        "?sslmode=verify-full&sslrootcert=/etc/stockade/tls/ca.crt&application_name=a"
    )
    assert redact_dsn(dsn) == (
        "postgresql://stockade_audit:***@db.example:5432/stockade_audit"
        "?sslmode=verify-full&sslrootcert=/etc/stockade/tls/ca.crt&application_name=a"
    )
    assert redact_dsn("postgresql://u@/db?host=/tmp/s") == "postgresql://u@/db?host=/tmp/s"


@pytest.mark.parametrize("dsn", LEAKY)
def test_scrub_masks_a_password_quoted_in_a_drivers_words(dsn: str) -> None:
    for quoted in (SECRET, quote(SECRET, safe="")):
        message = f"invalid literal for int() with base 10: {quoted!r}"
        if quoted in dsn:
            assert quoted not in scrub(message, dsn), (dsn, quoted)


@pytest.mark.parametrize("dsn", [d for d in LEAKY if not d.startswith("host=")])
async def test_opening_a_malformed_or_leaky_dsn_names_no_password(dsn: str) -> None:
    """Local DSNs go as far as the driver: its errors (a password read as a port, nothing
    listening) come back as Stockade errors (a clear line at start-up, never a
    traceback's ValueError) with nothing secret in them."""
    local = dsn.replace("@db/", "@127.0.0.1:1/")
    openers: list[Callable[[], Awaitable[object]]] = [
        lambda: connect(local, what="audit"),
        lambda: open_pool(local, what="audit"),
        lambda: PostgresExecutorState.open(local),
    ]
    for opener in openers:
        with pytest.raises(StockadeError) as caught:
            await opener()
        text = str(caught.value)
        assert SECRET not in text and quote(SECRET, safe="") not in text, text
        assert "Xy7" not in text and "Qz9" not in text, text


OPENERS: dict[str, Callable[[str], Awaitable[object]]] = {
    "connect": lambda dsn: connect(dsn, what="decision"),
    "open_pool": lambda dsn: open_pool(dsn, what="decision"),
    "executor-state": PostgresExecutorState.open,
}


@pytest.mark.parametrize("opener", OPENERS.values(), ids=OPENERS.keys())
async def test_every_opener_refuses_before_connecting(
    opener: Callable[[str], Awaitable[object]],
) -> None:
    """TEST-NET is unroutable: a refusal that came after a connection attempt would take
    the connect timeout and say so, not return at once with this message."""
    with pytest.raises(InvalidArgument, match="over the network with sslmode=require") as caught:
        await opener(f"postgresql://u:{SECRET}@{REMOTE}/db?sslmode=require")
    assert SECRET not in caught.value.message
