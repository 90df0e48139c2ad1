"""Who is asking, and what they may do: people, roles and the two ways to sign in.

Pure logic, no web framework: the web layer hands in the peer address, the request
headers and the signed session's contents; this module says who that is and which role
they hold. Two ways in:

- **The auth proxy** (oauth2-proxy convention): ``X-Forwarded-User`` / ``X-Forwarded-Email``
  / ``X-Forwarded-Groups``, honoured only when the TCP peer is one of the configured proxy
  addresses. From anywhere else these headers are ignored, so a browser or a pod that
  reaches the console directly cannot claim to be someone.
- **A login token** (local use): the login form compares the token with the configured
  ones in constant time and the signed session cookie then carries the person's name.

Roles are ordered: viewers read; resolvers also answer approvals; admins also change
modes, session rules and grants. A person with no role is refused (fail closed).
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_HEADER_CHARS = 256
"""Longest user, email or groups header honoured; longer values are refused, not cut."""
MAX_GROUPS = 64
"""Most groups read from ``X-Forwarded-Groups``."""


class Role(enum.IntEnum):
    """What a person may do; each role includes the ones below it."""

    NONE = 0
    VIEWER = 1
    RESOLVER = 2
    ADMIN = 3


@dataclass(frozen=True)
class Person:
    """An authenticated person."""

    name: str
    """The name recorded as resolver: the proxy's email (else its user), or the token's name."""
    groups: tuple[str, ...] = ()
    """Groups the proxy reported."""
    via: str = "token"
    """``proxy`` or ``token``: how the person signed in."""


class HeaderError(Exception):
    """A trusted proxy sent identity headers the console will not accept."""


class People:
    """Authenticates people and maps them to roles, from the console's settings."""

    def __init__(
        self,
        *,
        tokens: Mapping[str, str],
        trusted_proxies: Sequence[str],
        admins: Sequence[str],
        resolvers: Sequence[str],
        viewers: Sequence[str],
    ) -> None:
        self._tokens = [(name, token.encode()) for name, token in tokens.items()]
        self._proxies = [ipaddress.ip_network(p, strict=False) for p in trusted_proxies]
        self._grants = (
            (Role.ADMIN, frozenset(admins)),
            (Role.RESOLVER, frozenset(resolvers)),
            (Role.VIEWER, frozenset(viewers)),
        )

    @property
    def token_login(self) -> bool:
        """Whether the login form is offered (tokens are configured)."""
        return bool(self._tokens)

    @property
    def token_names(self) -> frozenset[str]:
        """The names that have a login token (a session of a removed name is ended)."""
        return frozenset(name for name, _ in self._tokens)

    def is_trusted_proxy(self, peer: str | None) -> bool:
        """Whether ``peer`` (the TCP peer's address) is a configured auth proxy."""
        if not peer or not self._proxies:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in net for net in self._proxies)

    def from_proxy(self, peer: str | None, headers: Mapping[str, str]) -> Person | None:
        """The person the trusted proxy names, or None (untrusted peer, or no header).

        Raises ``HeaderError`` when a trusted proxy sends an oversized or malformed
        identity: the request is refused rather than attributed to a cut-down name.
        """
        if not self.is_trusted_proxy(peer):
            return None
        email = _header(headers, "x-forwarded-email")
        user = _header(headers, "x-forwarded-user")
        name = email or user
        if not name:
            return None
        raw_groups = _header(headers, "x-forwarded-groups")
        groups = tuple(g.strip() for g in raw_groups.split(",") if g.strip())
        if len(groups) > MAX_GROUPS:
            raise HeaderError(f"X-Forwarded-Groups lists more than {MAX_GROUPS} groups")
        return Person(name, groups, "proxy")

    def from_token(self, token: str) -> Person | None:
        """The person whose login token this is, or None. Every configured token is
        compared (constant time each), so the time taken does not say which one matched."""
        given = token.strip().encode()
        found: str | None = None
        for name, expected in self._tokens:
            if hmac.compare_digest(given, expected) and found is None:
                found = name
        return Person(found) if found is not None and given else None

    def role_of(self, person: Person | None) -> Role:
        """The highest role the settings give ``person`` (NONE when none does)."""
        if person is None:
            return Role.NONE
        names = _names(person)
        for role, members in self._grants:
            if names & members or (role is Role.VIEWER and "*" in members):
                return role
        return Role.NONE


def _names(person: Person) -> frozenset[str]:
    return frozenset([person.name, *(f"group:{g}" for g in person.groups)])


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name, "")
    if len(value) > MAX_HEADER_CHARS:
        raise HeaderError(f"{name} is longer than {MAX_HEADER_CHARS} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise HeaderError(f"{name} holds control characters")
    return value.strip()
