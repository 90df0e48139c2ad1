"""One DSN setting picks a store's backend (STORE-1); DSNs are redacted for logs; and a
PostgreSQL DSN must verify the server's certificate before it sends a password over a
network (X-3: plaintext only on loopback or unix sockets).

Unset or ``sqlite:///path`` selects SQLite (the embedded default: one node);
``postgresql://…`` or ``postgres://…`` selects PostgreSQL (many replicas).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from stockade.errors import InvalidArgument

Kind = Literal["sqlite", "postgresql"]

#: Query parameters whose values a redacted DSN shows: every other value is masked, so a
#: secret under any name (``password``, ``sslpassword``, a percent-encoded or misspelt
#: key, a stray fragment of a password holding an unencoded ``&``) stays out of logs.
_SHOWN_PARAMS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslcrl",
        "sslnegotiation",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "host",
        "port",
        "dbname",
        "database",
        "user",
        "application_name",
        "connect_timeout",
        "target_session_attrs",
        "service",
    }
)
#: ``sslmode`` values that check the server's certificate chain (``verify-full`` also
#: its name); anything less lets whoever sits on the path read the login.
VERIFYING_SSLMODES = frozenset({"verify-ca", "verify-full"})
#: Characters that end a URI's user-info when unencoded: a user name shown holding one of
#: these is more likely a misplaced part of something else, so it is masked too.
_DELIMITERS = re.compile(r"[/?#&=@:\[\]]")


def parse_store_dsn(
    dsn: str, default_sqlite_path: str, *, setting: str = "the store DSN"
) -> tuple[Kind, str]:
    """Which backend ``dsn`` selects and what to open it with (a file or a libpq DSN).

    ``setting`` names the environment variable in the error, so an operator knows which
    one to fix. Raises ``InvalidArgument`` for any other scheme.
    """
    dsn = dsn.strip()
    if not dsn:
        return "sqlite", default_sqlite_path
    scheme = urlsplit(dsn).scheme.lower()
    if scheme == "sqlite":
        # sqlite:///abs/path (three slashes: no host); sqlite:// alone is the default file.
        path = dsn[len("sqlite://") :]
        return "sqlite", path or default_sqlite_path
    if scheme in {"postgresql", "postgres"}:
        return "postgresql", dsn
    raise InvalidArgument(
        f"{setting} must be empty, sqlite:///path or postgresql://…", field="store_dsn"
    )


def _split(dsn: str) -> tuple[str, str, str] | None:
    """(scheme, user-info, the rest) of a URI DSN, or None when it is not one.

    The user-info runs to the *last* ``@``: a password written with an unencoded ``/``,
    ``?``, ``#`` or ``@`` (a mistake, but one that must not leak) then stays inside it. An
    ``@`` in a query value moves more into the user-info, which is only ever masked.
    """
    scheme, sep, rest = dsn.strip().partition("://")
    if not sep or not scheme:
        return None
    userinfo, at, tail = rest.rpartition("@")
    return (scheme, userinfo, tail) if at else (scheme, "", rest)


def _secrets(userinfo: str, query: str, fragment: str = "") -> list[str]:
    """What in a DSN may be secret: the password (as written and decoded), every query
    value not shown, the fragment (asyncpg ignores it: whatever is there is a stray), and
    their pieces between URI delimiters; longest first."""
    found: set[str] = {fragment, unquote(fragment)} - {""}
    _, colon, password = userinfo.partition(":")
    if colon and password:
        found |= {password, unquote(password)}
    found |= {value for _, value in _masked_params(query) if value}
    pieces = {p for s in found for p in _DELIMITERS.split(s) if len(p) >= 3}
    return sorted(found | pieces, key=len, reverse=True)


def _masked_params(query: str) -> list[tuple[str, str]]:
    """(name, value) of the query items whose values are not shown (raw value text)."""
    masked = []
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        if not eq:
            masked.append(("", key))  # a bare item may be half of a value holding '&'
        elif unquote(key).strip().lower() not in _SHOWN_PARAMS:
            masked.append((key, value))
            masked.append((key, unquote(value)))
    return masked


def redact_dsn(dsn: str) -> str:
    """``dsn`` for a log line: the password (in the user-info or the query) and every
    query value not known to be harmless replaced by ``***``, the fragment dropped.

    Never raises: a DSN that does not parse as a URI is shown as a placeholder."""
    split = _split(dsn)
    if split is None:
        return "<a DSN that is not a postgresql:// URI>"
    scheme, userinfo, tail = split
    shown_user = ""
    if userinfo:
        user, colon, _ = userinfo.partition(":")
        user = "***" if _DELIMITERS.search(user) else user
        shown_user = f"{user}:***@" if colon else f"{user}@"
    head, _, _fragment = tail.partition("#")
    location, qmark, query = head.partition("?")
    if not qmark:
        return f"{scheme}://{shown_user}{location}"
    items = []
    for item in query.split("&"):
        if not item:
            continue
        key, eq, _value = item.partition("=")
        shown = eq and unquote(key).strip().lower() in _SHOWN_PARAMS
        items.append(item if shown else f"{key}=***" if eq else "***")
    return f"{scheme}://{shown_user}{location}?{'&'.join(items)}"


def scrub(text: str, dsn: str) -> str:
    """``text`` (a driver's error message, say) with anything secret in ``dsn`` masked:
    belt and braces for messages that may quote a piece of a malformed DSN."""
    split = _split(dsn)
    if split is None:
        # Not a URI (a libpq key=value string, say): every value may be the password.
        values = [token.partition("=")[2] for token in dsn.split()]
        secrets = sorted({v for v in values if v}, key=len, reverse=True)
    else:
        _, userinfo, tail = split
        head, _, fragment = tail.partition("#")
        secrets = _secrets(userinfo, head.partition("?")[2], fragment)
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _is_local(host: str) -> bool:
    """A unix socket folder or a loopback address: traffic that never leaves the host."""
    if host.startswith("/"):
        return True
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.partition("%")[0])  # an IPv6 zone: fe80::1%eth0
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _hosts(spec: str) -> list[str]:
    """The hosts of a libpq host list (``h1:5432,[::1]:5433,/socket/dir``)."""
    hosts = []
    for item in spec.split(","):
        item = unquote(item)
        if item.startswith("["):
            hosts.append(item[1:].partition("]")[0])
        elif item.startswith("/"):
            hosts.append(item)
        else:
            hosts.append(item.partition(":")[0])
    return hosts


def _asyncpg_view(dsn: str) -> tuple[str, str]:
    """(host list, query) as asyncpg reads the URI: ``urlparse``'s authority up to its
    *first* ``@``. ``InvalidArgument`` when it does not parse (the message quotes none of
    it: a malformed DSN is most often a password with an unencoded delimiter)."""
    try:
        parts = urlsplit(dsn.strip())
    except ValueError:
        raise InvalidArgument(
            "the DSN does not parse as a URI: percent-encode the user and password "
            "(urllib.parse.quote(value, safe=''))",
            field="store_dsn",
        ) from None
    netloc = parts.netloc
    hostspec = netloc.partition("@")[2] if "@" in netloc else netloc
    return hostspec, parts.query


def network_hosts(dsn: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """The hosts a PostgreSQL DSN may reach over a network (not a unix socket, not
    loopback): the URI's hosts (read both as asyncpg reads them and with the user-info
    running to the last ``@``), every ``host`` parameter, else ``PGHOST``; a service file
    (``service=`` or ``PGSERVICE``) may name any host, so it counts as one. No host at all
    means asyncpg's local default (unix sockets, then localhost). Stricter than asyncpg
    where the two readings differ, never looser."""
    env = os.environ if environ is None else environ
    hostspec, query = _asyncpg_view(dsn)
    split = _split(dsn)
    # An '@' left in asyncpg's host is a password's unencoded '@': never name that host.
    hosts = [
        "<a host holding '@': percent-encode the password>" if "@" in h else h
        for h in (_hosts(hostspec) if hostspec else [])
    ]
    if split is not None:
        location = split[2].partition("#")[0].partition("?")[0]
        netloc = location.partition("/")[0]
        hosts += _hosts(netloc) if netloc else []
    params = parse_qsl(query, keep_blank_values=True)
    for key, value in params:
        if key.strip().lower() == "host" and value:
            hosts += _hosts(value)
    if not hosts and env.get("PGHOST"):
        hosts = _hosts(env["PGHOST"])
    remote = list(dict.fromkeys(h for h in hosts if not _is_local(h)))
    if any(key.strip().lower() == "service" for key, _ in params) or env.get("PGSERVICE"):
        remote.append("<the service file's host>")
    return remote


def effective_sslmode(dsn: str, environ: Mapping[str, str] | None = None) -> str:
    """The ``sslmode`` asyncpg will use: the DSN's last one, else ``PGSSLMODE``, else
    libpq's default ``prefer`` (TLS if offered, the certificate unchecked)."""
    env = os.environ if environ is None else environ
    _, query = _asyncpg_view(dsn)
    modes = [value for key, value in parse_qsl(query, keep_blank_values=True) if key == "sslmode"]
    # Exactly as written: asyncpg refuses "verify-full " or "VERIFY-FULL", so must we.
    return (modes[-1] if modes else env.get("PGSSLMODE", "")) or "prefer"


def check_transport(dsn: str, *, what: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a PostgreSQL DSN that would log in over a network without verifying the
    server (X-3): a host that is not a unix socket or loopback needs ``sslmode=verify-full``
    (or ``verify-ca``). Otherwise whoever sits on the path could pose as the database and
    be handed the password (a server may ask for it in clear) and every decision, grant
    and audit row. Raises ``InvalidArgument`` naming ``what`` and the fix; the message
    names the hosts and the mode, never the password."""
    remote = network_hosts(dsn, environ)
    if not remote:
        return
    mode = effective_sslmode(dsn, environ)
    if mode in VERIFYING_SSLMODES:
        return
    where = scrub(", ".join(sorted(set(remote))), dsn)
    raise InvalidArgument(
        f"the {what} database DSN reaches {where} over the network with sslmode={mode}: "
        "add sslmode=verify-full and sslrootcert=<the CA file> to it (plaintext and "
        "unverified TLS are for unix sockets and loopback only)",
        field="store_dsn",
    )
