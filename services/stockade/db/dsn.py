"""One DSN setting picks a store's backend (STORE-1), and DSNs are redacted for logs.

Unset or ``sqlite:///path`` selects SQLite (the embedded default: one node);
``postgresql://…`` or ``postgres://…`` selects PostgreSQL (many replicas).
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from stockade.errors import InvalidArgument

Kind = Literal["sqlite", "postgresql"]

#: Query parameters of a libpq URI that carry a secret (or point at one).
_SECRET_PARAMS = frozenset({"password", "passfile", "sslpassword"})


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


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password (in the authority or the query), for logs."""
    parts = urlsplit(dsn)
    netloc = parts.netloc
    if parts.password is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{parts.username or ''}:***@{host}"
    query = "&".join(
        f"{key}=***" if key.lower() in _SECRET_PARAMS else item
        for item in parts.query.split("&")
        if item
        for key in [item.partition("=")[0]]
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))
