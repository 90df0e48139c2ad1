"""Console settings (``STOCKADE_CONSOLE_*``).

The console is an HTTP service, but it shares the server settings base: ``listen`` is
where people's browsers (through the auth proxy) reach it, and the ``tls_*`` files are the
console's own mTLS identity towards the decision and audit services (the certificate
``make certs`` issues for ``console``); people's HTTPS ends at the proxy.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from stockade.server.settings import ServerSettings, split_csv

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+\-]{0,127}$")


class ConsoleSettings(ServerSettings):
    """Settings of the approval console."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="STOCKADE_CONSOLE_")

    listen: str = "127.0.0.1:8470"
    """Where the console's HTTP server listens (``HOST:PORT``; port 0 picks a free port)."""
    decision_addr: str = "127.0.0.1:50051"
    """Address of the decision service."""
    audit_addr: str = "127.0.0.1:50053"
    """Address of the audit service."""
    decision_admin_token: SecretStr = SecretStr("")
    """Bearer token for the decision service's admin RPCs, for local use without mTLS (with
    mTLS the console's certificate identity is its credential). Never shown in a page."""
    login_tokens: Annotated[list[SecretStr], NoDecode] = []
    """People's login tokens for local use, ``name=token`` comma-separated: the login form
    accepts the token and signs the person in as ``name``."""
    trusted_proxies: Annotated[list[str], NoDecode] = []
    """Addresses or networks (CIDR) of the auth proxy; ``X-Forwarded-User`` /
    ``X-Forwarded-Email`` / ``X-Forwarded-Groups`` are honoured only from these."""
    admins: Annotated[list[str], NoDecode] = []
    """Who may change modes, session rules and grants (and resolve, and read): user names,
    emails or ``group:NAME``, comma-separated."""
    resolvers: Annotated[list[str], NoDecode] = []
    """Who may answer approvals (and read): same forms as ``admins``."""
    viewers: Annotated[list[str], NoDecode] = []
    """Who may read: same forms; ``*`` lets every authenticated person read."""
    cookie_secret: SecretStr = SecretStr("")
    """Key that signs the session cookie; empty makes a random key per process (sessions
    then end with a restart; set it when several replicas share the cookie)."""
    cookie_secure: bool | None = None
    """Mark the session cookie Secure (HTTPS only); unset: Secure unless ``listen`` is a
    loopback address (local use over plain HTTP)."""
    session_max_age_s: int = Field(8 * 3600, gt=0, le=7 * 24 * 3600)
    """How long a sign-in lasts."""
    max_pending: int = Field(1000, gt=0, le=100_000)
    """Pending approvals the console keeps in memory; beyond it the page says more wait."""
    max_event_clients: int = Field(200, gt=0, le=10_000)
    """Browsers that may follow the live approval stream at once."""
    page_size: int = Field(50, gt=0, le=500)
    """Audit rows per page."""
    rpc_deadline_s: float = Field(10.0, gt=0, le=300)
    """Deadline of each call to the decision and audit services."""

    _split = field_validator(
        "login_tokens", "trusted_proxies", "admins", "resolvers", "viewers", mode="before"
    )(classmethod(lambda cls, v: split_csv(v)))

    @field_validator("login_tokens")
    @classmethod
    def _tokens(cls, value: list[SecretStr]) -> list[SecretStr]:
        for item in value:
            name, sep, token = item.get_secret_value().partition("=")
            if not sep or not _NAME.match(name.strip()):
                raise ValueError("each entry must be name=token (the name: letters, digits, ._@+-)")
            if len(token.strip()) < 16:
                raise ValueError(f"the token of {name.strip()!r} is shorter than 16 characters")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or CIDR network") from None
        return value

    def people_tokens(self) -> dict[str, str]:
        """The login tokens as name -> token."""
        out: dict[str, str] = {}
        for item in self.login_tokens:
            name, _, token = item.get_secret_value().partition("=")
            out[name.strip()] = token.strip()
        return out
