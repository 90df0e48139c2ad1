"""Who may call which RPC (X-3): every servicer declares, per RPC, the access it needs, and
the shared interceptor applies it before the servicer runs.

Each servicer class carries ``ACCESS``, a table from RPC name to :class:`Access`. A table
that misses an RPC of its service stops the server at start-up (``create_server``), and a
test checks that every RPC of every service has an entry, so a new RPC cannot be added
without saying who may call it.

Admin callers are authenticated by :class:`AdminAuth`, from a named bearer token or an
mTLS certificate identity; the identity recorded for what they do (an approval's
resolver, an audit row) is that authenticated identity, never a name the caller types.
"""

from __future__ import annotations

import contextvars
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import grpc

from stockade.errors import InvalidArgument, NotAuthorized

__all__ = [
    "ON_BEHALF_OF",
    "Access",
    "AdminAuth",
    "Caller",
    "current_caller",
    "parse_admin_tokens",
    "peer_identity",
]

Context = grpc.aio.ServicerContext[Any, Any]


class Access(Enum):
    """What a caller needs to call an RPC (declared per RPC in each servicer's ``ACCESS``)."""

    ANY_CALLER = "any caller"
    """Any caller that reaches the service: the network policy and, with mTLS, the RPC's
    allowed certificate identities (``Registration.method_identities``) still apply."""
    ADMIN = "admin"
    """An authorised admin caller only: anyone else is refused with PERMISSION_DENIED
    before the servicer runs. The caller (``current_caller()``) is handed to the core."""
    ADMIN_FOR_SOME_REQUESTS = "admin for some requests"
    """Any caller; the caller's rights are worked out before the servicer runs and handed
    to the core, which asks for admin rights only for some requests (a session created in
    a mode other than the configured default, DEC-6 rev 2)."""
    CALLER_FORWARDED = "caller forwarded"
    """The service passes the caller's own credentials on to the service that owns the
    action, which authorises it (the agent's ResolveApproval forwards to the decision
    service's)."""


ADMIN_KINDS = frozenset({Access.ADMIN, Access.ADMIN_FOR_SOME_REQUESTS})
"""Access kinds that need an ``AdminAuth`` to work out the caller."""

ON_BEHALF_OF = "x-stockade-on-behalf-of"
"""Metadata naming the person a trusted admin caller (the console) acts for."""

_TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]{0,63}")


def peer_identity(context: Context) -> str | None:
    """The common name of the caller's verified client certificate (None without mTLS)."""
    auth = context.auth_context() or {}
    names = list(auth.get("x509_common_name") or [])
    return names[0].decode() if names else None


def parse_admin_tokens(entries: Sequence[str]) -> list[tuple[str, bytes]]:
    """``name=token`` entries (the name is the caller's identity in approvals and audit),
    or a bare token, named ``token-N`` by its position (the old form keeps working).

    A bare token whose text contains ``=`` after a valid name would read as named; write
    such a token with an explicit name.
    """
    out: list[tuple[str, bytes]] = []
    for i, entry in enumerate(e for e in entries if e):
        name, sep, token = entry.partition("=")
        if sep and token and not token.startswith("=") and _TOKEN_NAME.fullmatch(name):
            out.append((name, token.encode()))
        else:
            out.append((f"token-{i + 1}", entry.encode()))
    return out


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one RPC, as the interceptor worked it out."""

    identity: str | None
    """``token:NAME`` for a configured admin token, ``mtls:IDENTITY`` for a verified client
    certificate, None when the caller has neither."""
    admin: bool
    """Whether the caller may use admin RPCs."""
    delegate: bool = False
    """Whether the caller may name the person it acts for (an admin listed among the
    delegate identities, or any admin when none are listed)."""
    on_behalf_of: str = ""
    """The person named in ``x-stockade-on-behalf-of`` metadata, as sent (checked when
    used, and only honoured for a delegate)."""
    configured: bool = True
    """Whether any admin caller is configured at all (for the refusal's message)."""
    configure_hint: str = ""
    """How to configure admin callers (settings names), for the refusal's message."""

    def require_admin(self, rpc: str) -> str:
        """The caller's identity; ``NotAuthorized`` (PERMISSION_DENIED) if not an admin."""
        if self.admin and self.identity is not None:
            return self.identity
        if not self.configured:
            raise NotAuthorized(
                f"{rpc} is an admin RPC and no admin callers are configured"
                + (f" ({self.configure_hint})" if self.configure_hint else ""),
                rpc=rpc,
            )
        raise NotAuthorized(
            f"{rpc} is an admin RPC: send 'authorization: Bearer <token>' with a configured "
            "admin token, or connect with an admin mTLS identity",
            rpc=rpc,
        )

    def resolver(self, rpc: str) -> tuple[str, str]:
        """(who answers, through whom) for an admin RPC that records a person.

        The caller must be an admin. A trusted admin caller (a delegate: the approval
        console, which signed that person in) may name the person it acts for; that person
        is then the resolver and the caller is kept as the "via". Anything else is the
        caller's own authenticated identity; a name typed into the request is never an
        identity.
        """
        caller = self.require_admin(rpc)
        person = self.on_behalf_of
        if not person or not self.delegate:
            return caller, ""
        if len(person) > 256 or not person.isprintable():
            raise InvalidArgument(f"{ON_BEHALF_OF} must be a printable name of at most 256 chars")
        return person, caller


caller_var: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "stockade_caller", default=None
)
"""The current call's caller, set by the interceptor for RPCs whose access needs one."""


def current_caller() -> Caller:
    """The caller of the RPC being served (for RPCs declared ADMIN or
    ADMIN_FOR_SOME_REQUESTS); a servicer asking elsewhere is a wiring error."""
    caller = caller_var.get()
    if caller is None:
        raise RuntimeError(
            "no caller for this RPC: its ACCESS entry is not ADMIN or ADMIN_FOR_SOME_REQUESTS"
        )
    return caller


class AdminAuth:
    """Decides whether a caller may use admin RPCs (X-3), and who the caller is."""

    def __init__(
        self,
        tokens: Sequence[str],
        identities: Sequence[str] = (),
        delegates: Sequence[str] = (),
        *,
        configure_hint: str = "",
    ) -> None:
        """``tokens``: ``name=token`` (or bare) admin tokens; ``identities``: admin mTLS
        identities; ``delegates``: admin callers that may name the person they act for
        (empty: any admin); ``configure_hint``: the settings that configure admins."""
        self._tokens = parse_admin_tokens(tokens)
        self._identities = {i for i in identities if i}
        self._delegates = {d for d in delegates if d}
        self._hint = configure_hint

    def caller_identity(self, context: Context) -> str | None:
        """The caller's authenticated identity, or None when it has none.

        The one place an identity comes from (approval resolvers, audit rows): ``token:NAME``
        for a configured admin token, ``mtls:IDENTITY`` for a verified client certificate,
        never anything the caller merely types.
        """
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):
                scheme, _, token = value.partition(" ")
                if scheme.lower() == "bearer":
                    given = token.strip().encode()
                    for name, want in self._tokens:
                        if hmac.compare_digest(given, want):
                            return f"token:{name}"
        who = peer_identity(context)
        if who is not None:
            return f"mtls:{who}"
        return None

    def caller(self, context: Context) -> Caller:
        """The caller of this call: identity, admin rights, and the person it names."""
        who = self.caller_identity(context)
        admin = who is not None and (
            who.startswith("token:") or who.removeprefix("mtls:") in self._identities
        )
        person = ""
        for key, value in context.invocation_metadata() or ():
            if key == ON_BEHALF_OF and isinstance(value, str):
                person = value.strip()
        return Caller(
            identity=who,
            admin=admin,
            delegate=admin and (not self._delegates or who in self._delegates),
            on_behalf_of=person,
            configured=bool(self._tokens or self._identities),
            configure_hint=self._hint,
        )

    def check(self, context: Context, rpc: str) -> str:
        """Return the caller's identity; raise ``NotAuthorized`` if it may not call ``rpc``."""
        return self.caller(context).require_admin(rpc)

    def resolver_identity(self, context: Context, rpc: str) -> tuple[str, str]:
        """(who answers, through whom): see ``Caller.resolver``."""
        return self.caller(context).resolver(rpc)
