"""Browser-facing protections: security headers on every response and CSRF tokens.

The headers are added by a pure ASGI middleware (it wraps ``send``), so streaming
responses such as the server-sent events are not buffered. The CSP allows scripts and
styles only from the console's own ``/static`` files: no inline script can run even if
some text slipped through the templates' escaping.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, MutableMapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    # "same-origin", not "no-referrer": under no-referrer Chromium sends "Origin: null" on
    # form posts, and the Origin check below needs the real origin.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
)
CSRF_FIELD = "csrf_token"
"""The hidden form field every POST must carry."""
_SESSION_KEY = "csrf"


class SecurityHeaders:
    """Adds the security headers (and ``Cache-Control: no-store`` for pages) to every
    HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"
                ] if not static else list(message.get("headers", []))  # fmt: skip
                headers.extend(HEADERS)
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, wrapped)


def csrf_token(session: MutableMapping[str, Any]) -> str:
    """The session's CSRF token, made on first use (a random 32-byte value)."""
    token = session.get(_SESSION_KEY)
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        session[_SESSION_KEY] = token
    return token


def reset_csrf(session: MutableMapping[str, Any]) -> None:
    """Forget the token (at sign-in and sign-out, so a token never spans two people)."""
    session.pop(_SESSION_KEY, None)


def csrf_ok(session: MutableMapping[str, Any], given: object) -> bool:
    """Whether ``given`` is this session's token (constant-time compare)."""
    expected = session.get(_SESSION_KEY)
    if not isinstance(expected, str) or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def same_origin(headers: MutableMapping[str, str] | Any, host: str) -> bool:
    """False when the browser says the request comes from another site: ``Origin`` with a
    host other than ours, or ``Sec-Fetch-Site: cross-site``. Absent headers pass (older
    clients); the CSRF token is the check that always applies."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    if origin == "null":
        return False
    return bool(origin.split("://", 1)[-1].rstrip("/") == host)


class LoginThrottle:
    """Failed sign-ins per client address, bounded: after ``limit`` failures within
    ``window_s`` an address is refused until the window passes (tokens are long and random;
    this keeps a guesser from trying many, and the log from filling)."""

    def __init__(
        self,
        *,
        limit: int = 10,
        window_s: float = 300.0,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limit = limit
        self._window = window_s
        self._max = max_addresses
        self._clock = clock
        self._failures: OrderedDict[str, list[float]] = OrderedDict()

    def _recent(self, address: str, now: float) -> list[float]:
        times = [t for t in self._failures.get(address, []) if now - t < self._window]
        if times:
            self._failures[address] = times
        else:
            self._failures.pop(address, None)
        return times

    def blocked(self, address: str) -> bool:
        """Whether ``address`` has used up its failures for now."""
        return len(self._recent(address, self._clock())) >= self._limit

    def failed(self, address: str) -> None:
        """Count one failed sign-in from ``address``."""
        now = self._clock()
        times = self._recent(address, now)
        times.append(now)
        self._failures[address] = times[-self._limit :]
        self._failures.move_to_end(address)
        while len(self._failures) > self._max:
            self._failures.popitem(last=False)  # the oldest address is forgotten first
