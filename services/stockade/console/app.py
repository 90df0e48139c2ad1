"""The console's composition root: channels, backend, approval feed, people, the ASGI app.

``build_app`` wires everything from ``ConsoleSettings``. The gRPC channels belong to the
event loop that serves the app, so the lifespan opens them (with the console's mTLS
identity when configured), builds the backend and starts following the approvals, and
closes all of it on shutdown.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware

from stockade.client.base import TlsConfig, aio_channel
from stockade.console.backend import Backend
from stockade.console.feed import ApprovalFeed
from stockade.console.people import People
from stockade.console.security import SecurityHeaders
from stockade.console.settings import ConsoleSettings
from stockade.console.web import ConsoleWeb
from stockade.server.app import _is_loopback

COOKIE = "stockade_console"
"""The signed session cookie's name."""


def tls_of(s: ConsoleSettings) -> TlsConfig | None:
    """The console's client identity towards the services (None without mTLS files)."""
    if s.tls_cert_file and s.tls_key_file and s.tls_ca_file:
        return TlsConfig(s.tls_cert_file, s.tls_key_file, s.tls_ca_file)
    return None


def people_of(s: ConsoleSettings) -> People:
    """Sign-in and role mapping from the settings."""
    return People(
        tokens=s.people_tokens(),
        trusted_proxies=s.trusted_proxies,
        admins=s.admins,
        resolvers=s.resolvers,
        viewers=s.viewers,
    )


def build_app(s: ConsoleSettings) -> tuple[Starlette, ConsoleWeb]:
    """The console app for ``s`` and its web layer (whose backend and feed are set while
    the app runs)."""
    web = ConsoleWeb(people_of(s), page_size=s.page_size)
    tls = tls_of(s)
    token = s.decision_admin_token.get_secret_value()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        decision = aio_channel(s.decision_addr, tls=tls)
        audit = aio_channel(s.audit_addr, tls=tls)
        backend = Backend(decision, audit, admin_token=token, deadline_s=s.rpc_deadline_s)
        feed = ApprovalFeed(
            backend.decision,
            metadata=backend.credentials,
            max_pending=s.max_pending,
            max_clients=s.max_event_clients,
        )
        web.attach(backend, feed)
        feed.start()
        try:
            yield
        finally:
            await feed.close()
            await decision.close(None)
            await audit.close(None)

    secure = s.cookie_secure if s.cookie_secure is not None else not _is_loopback(s.listen)
    app = Starlette(
        routes=web.routes(),
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(
                SessionMiddleware,
                secret_key=s.cookie_secret.get_secret_value() or secrets.token_urlsafe(32),
                session_cookie=COOKIE,
                max_age=s.session_max_age_s,
                same_site="strict",
                https_only=secure,
            ),
        ],
        exception_handlers={HTTPException: web.error_page},
        lifespan=lifespan,
    )
    return app, web
