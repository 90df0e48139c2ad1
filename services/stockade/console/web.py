"""The console's pages and form handlers (Starlette).

Every request is authenticated first (``_person``): through the trusted proxy's headers or
the signed session of a token sign-in. Every POST goes through ``_form``, which refuses a
cross-site request or a missing or wrong CSRF token with 403 before anything else runs, and
every change checks the person's role. What a person may see is rendered on the server;
the static script only follows the live stream and updates the approvals list.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from stockade.console.backend import (
    EFFECTS,
    RESOLUTIONS,
    STATUSES,
    VERDICTS,
    AuditFilters,
    Backend,
    BackendError,
    Resolution,
)
from stockade.console.feed import ApprovalFeed, TooManyClients
from stockade.console.people import HeaderError, People, Person, Role
from stockade.console.security import (
    CSRF_FIELD,
    LoginThrottle,
    csrf_ok,
    csrf_token,
    reset_csrf,
    same_origin,
)
from stockade.console.views import MODES, ApprovalView

log = logging.getLogger("stockade.console")

HERE = Path(__file__).parent
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$")
MAX_NOTE = 500
MAX_PATTERN = 1000
MAX_USES = 100_000
MAX_GRANT_DAYS = 90
MAX_FLASH = 5


def _valid_id(value: str, what: str) -> str:
    if not _ID.match(value):
        raise HTTPException(400, f"{what} must be 1-128 letters, digits or ._:-")
    return value


def _text(form: FormData, name: str, limit: int) -> str:
    value = form.get(name, "")
    if not isinstance(value, str):
        raise HTTPException(400, f"{name} must be text")
    value = value.strip()
    if len(value) > limit:
        raise HTTPException(400, f"{name} is longer than {limit} characters")
    return value


def _utc(value: str, what: str) -> dt.datetime | None:
    """A ``datetime-local`` value, read as UTC (the pages say so)."""
    if not value:
        return None
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise HTTPException(400, f"{what} is not a date and time (YYYY-MM-DDTHH:MM)") from None
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


def _fmt_time(value: dt.datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "—"


def _iso(value: dt.datetime | None) -> str:
    return value.isoformat() if value is not None else ""


class ConsoleWeb:
    """Holds the collaborators and serves the routes."""

    backend: Backend
    """Set by ``attach`` when the app starts."""
    feed: ApprovalFeed
    """Set by ``attach`` when the app starts."""

    def __init__(
        self,
        people: People,
        *,
        page_size: int = 50,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.people = people
        self.throttle = LoginThrottle()
        self.page_size = page_size
        self.clock = clock
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        env.autoescape = True
        env.filters["t"] = _fmt_time
        env.filters["iso"] = _iso
        env.globals["Role"] = Role
        env.globals["MODES"] = list(MODES)
        env.globals["STATUSES"] = list(STATUSES)
        env.globals["VERDICTS"] = list(VERDICTS)
        env.globals["EFFECTS"] = list(EFFECTS)
        env.globals["CSRF_FIELD"] = CSRF_FIELD

    def attach(self, backend: Backend, feed: ApprovalFeed) -> None:
        """Give the pages their backend and feed (the app's lifespan opens them)."""
        self.backend = backend
        self.feed = feed

    def routes(self) -> list[Route | Mount]:
        """The URL map."""
        return [
            Route("/", self.home),
            Route("/healthz", self.healthz),
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/approvals", self.approvals),
            Route("/approvals/{approval_id}/resolve", self.resolve, methods=["POST"]),
            Route("/events", self.events),
            Route("/grants", self.grants),
            Route("/grants/{grant_id}/revoke", self.revoke, methods=["POST"]),
            Route("/audit", self.audit),
            Route("/sessions", self.sessions),
            Route("/sessions/{session_id}/mode", self.set_mode, methods=["POST"]),
            Route("/sessions/{session_id}/rules", self.add_rule, methods=["POST"]),
            Route(
                "/sessions/{session_id}/rules/{rule_id}/remove", self.remove_rule, methods=["POST"]
            ),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]

    # -- who is asking ------------------------------------------------------------------

    def _person(self, request: Request) -> Person | None:
        peer = request.client.host if request.client else None
        try:
            proxied = self.people.from_proxy(peer, request.headers)
        except HeaderError as exc:
            raise HTTPException(400, str(exc)) from None
        session = request.session
        if proxied is not None:
            if session.get("proxy_user") != proxied.name:
                # Another person behind the same browser session: nothing carries over.
                session.clear()
                session["proxy_user"] = proxied.name
            return proxied
        name = session.get("user")
        if isinstance(name, str) and name in self.people.token_names:
            return Person(name)
        if name is not None:
            session.clear()  # the token was removed from the settings: signed out
        return None

    def _require(self, request: Request, role: Role) -> Person:
        person = self._person(request)
        if person is None:
            raise HTTPException(401, "sign in first")
        if self.people.role_of(person) < role:
            raise HTTPException(
                403, f"{person.name} may not do this (it needs the {role.name.lower()} role)"
            )
        return person

    async def _form(self, request: Request, role: Role) -> tuple[Person | None, FormData]:
        """The POSTed form, after the origin and CSRF checks (403 when either fails) and
        the role check."""
        if not same_origin(request.headers, request.headers.get("host", "")):
            raise HTTPException(403, "cross-site request refused")
        form = await request.form(max_files=0, max_fields=20, max_part_size=64 * 1024)
        if not csrf_ok(request.session, form.get(CSRF_FIELD)):
            raise HTTPException(403, "the form's CSRF token is missing or wrong: reload the page")
        person = self._require(request, role) if role is not Role.NONE else None
        return person, form

    def _flash(self, request: Request, kind: str, text: str) -> None:
        flashes = list(request.session.get("flash", []))[-(MAX_FLASH - 1) :]
        flashes.append([kind, text[:500]])
        request.session["flash"] = flashes

    def _render(
        self, request: Request, template: str, person: Person | None, status: int = 200, **ctx: Any
    ) -> Response:
        flashes = request.session.pop("flash", [])
        context = {
            "person": person,
            "role": self.people.role_of(person),
            "csrf": csrf_token(request.session),
            "flashes": flashes,
            "token_login": self.people.token_login,
            **ctx,
        }
        return self.templates.TemplateResponse(request, template, context, status_code=status)

    # -- sign-in ----------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        """``/`` → the approvals page."""
        return RedirectResponse("/approvals", 303)

    async def healthz(self, request: Request) -> Response:
        """Liveness/readiness for probes: 200 while the approvals stream is connected."""
        if self.feed.connected.is_set():
            return PlainTextResponse("ok")
        return PlainTextResponse("decision service stream not connected", 503)

    async def login_page(self, request: Request) -> Response:
        """The token sign-in form."""
        return self._render(request, "login.html", self._person(request))

    async def login(self, request: Request) -> Response:
        """Check a login token; start a fresh signed session for its person."""
        _, form = await self._form(request, Role.NONE)
        address = request.client.host if request.client else "unknown"
        if self.throttle.blocked(address):
            raise HTTPException(429, "too many failed sign-ins from this address: wait a while")
        person = self.people.from_token(_text(form, "token", 4096))
        if person is None:
            self.throttle.failed(address)
            log.info("console sign-in refused (wrong token) from %s", address)
            self._flash(request, "error", "That token is not valid.")
            return RedirectResponse("/login", 303)
        request.session.clear()  # no fixation: a new session (and CSRF token) per sign-in
        reset_csrf(request.session)
        request.session["user"] = person.name
        log.info("console sign-in: %s", person.name)
        return RedirectResponse("/approvals", 303)

    async def logout(self, request: Request) -> Response:
        """End the session."""
        await self._form(request, Role.NONE)
        request.session.clear()
        return RedirectResponse("/login", 303)

    # -- approvals ------------------------------------------------------------------------

    async def approvals(self, request: Request) -> Response:
        """Pending approvals across sessions (the page then follows ``/events``)."""
        person = self._require(request, Role.VIEWER)
        return self._render(
            request,
            "approvals.html",
            person,
            approvals=self.feed.pending(),
            overflow=self.feed.overflow,
            connected=self.feed.connected.is_set(),
            now=self.clock(),
        )

    async def resolve(self, request: Request) -> Response:
        """Answer an approval as the signed-in person."""
        approval_id = _valid_id(request.path_params["approval_id"], "approval id")
        person, form = await self._form(request, Role.RESOLVER)
        assert person is not None
        action = _text(form, "action", 32)
        if action not in RESOLUTIONS:
            raise HTTPException(400, f"action must be one of {', '.join(RESOLUTIONS)}")
        uses, until = 0, None
        if action == "always_allow":
            try:
                uses, until = self._scope(form)
            except HTTPException as exc:
                # A mistyped scope: say why on the approvals page, where the card still is.
                self._flash(request, "error", f"Not answered: {exc.detail}")
                return RedirectResponse("/approvals", 303)
        resolution = Resolution(approval_id, action, uses, until, _text(form, "note", MAX_NOTE))
        try:
            done = await self.backend.resolve(person, resolution)
        except BackendError as exc:
            if exc.code == "FAILED_PRECONDITION":
                self._flash(request, "warn", f"Someone else answered first: {exc.message}")
            else:
                self._flash(request, "error", f"Not answered: {exc.message}")
            return RedirectResponse("/approvals", 303)
        self.feed.forget_pending(approval_id, done.state, done.resolver)
        text = f"Approval {approval_id}: {done.state} by {done.resolver}."
        if done.grant is not None:
            text += f" Grant {done.grant.grant_id} added for {done.grant.rule.pattern}."
        if done.note:
            text += f" {done.note}"
        self._flash(request, "ok", text)
        return RedirectResponse("/approvals", 303)

    def _scope(self, form: FormData) -> tuple[int, dt.datetime | None]:
        scope = _text(form, "scope", 16) or "session"
        if scope == "session":
            return 0, None
        if scope == "uses":
            raw = _text(form, "uses", 10)
            if not raw.isdigit() or not 1 <= int(raw) <= MAX_USES:
                raise HTTPException(400, f"uses must be a whole number from 1 to {MAX_USES}")
            return int(raw), None
        if scope == "until":
            until = _utc(_text(form, "until", 40), "until")
            now = self.clock()
            if until is None or until <= now:
                raise HTTPException(400, "until must be a time in the future (UTC)")
            if until > now + dt.timedelta(days=MAX_GRANT_DAYS):
                raise HTTPException(400, f"until must be within {MAX_GRANT_DAYS} days")
            return 0, until
        raise HTTPException(400, "scope must be session, uses or until")

    async def events(self, request: Request) -> Response:
        """Server-sent events: every change to the approvals, rendered for this person."""
        person = self._require(request, Role.VIEWER)
        role = self.people.role_of(person)
        csrf = csrf_token(request.session)
        try:
            changes = self.feed.follow()
        except TooManyClients as exc:
            raise HTTPException(503, str(exc)) from None
        template = self.templates.env.get_template("_approval.html")

        def event(view: ApprovalView) -> ServerSentEvent:
            html = (
                template.render(a=view, role=role, csrf=csrf, Role=Role, CSRF_FIELD=CSRF_FIELD)
                if view.pending
                else ""
            )
            return ServerSentEvent(
                event="approval",
                data=json.dumps(
                    {
                        "id": view.approval_id,
                        "state": view.state,
                        "resolver": view.resolver,
                        "tool": view.tool_name,
                        "html": html,
                    }
                ),
            )

        async def stream() -> AsyncIterator[ServerSentEvent]:
            # The page was rendered before this stream registered (and a reconnect starts
            # over): send what is pending now first — the follower is already registered,
            # so nothing created in between is lost, and the page skips cards it has.
            for view in self.feed.pending():
                yield event(view)
            async for change in changes:
                yield event(change.approval)

        return EventSourceResponse(stream(), ping=15, send_timeout=30)

    # -- grants -----------------------------------------------------------------------------

    async def grants(self, request: Request) -> Response:
        """A session's "always allow" grants."""
        person = self._require(request, Role.VIEWER)
        session_id = request.query_params.get("session", "").strip()
        grants, error = [], ""
        if session_id:
            _valid_id(session_id, "session")
            try:
                grants = await self.backend.grants(session_id)
            except BackendError as exc:
                error = exc.message
        return self._render(
            request, "grants.html", person, session_id=session_id, grants=grants, error=error
        )

    async def revoke(self, request: Request) -> Response:
        """Revoke a grant (admins)."""
        grant_id = _valid_id(request.path_params["grant_id"], "grant id")
        person, form = await self._form(request, Role.ADMIN)
        assert person is not None
        session_id = _valid_id(_text(form, "session", 128), "session")
        try:
            revoked = await self.backend.revoke_grant(person, grant_id)
            self._flash(
                request,
                "ok" if revoked else "warn",
                f"Grant {grant_id} revoked." if revoked else f"Grant {grant_id} was already gone.",
            )
        except BackendError as exc:
            self._flash(request, "error", f"Not revoked: {exc.message}")
        return RedirectResponse("/grants?" + urlencode({"session": session_id}), 303)

    # -- audit -----------------------------------------------------------------------------

    async def audit(self, request: Request) -> Response:
        """The trail with filters and paging, and the hash chain's state."""
        person = self._require(request, Role.VIEWER)
        q = request.query_params
        status = q.get("status", "")
        if status and status not in STATUSES:
            raise HTTPException(400, f"status must be one of {', '.join(STATUSES)}")
        verdict = q.get("verdict", "")
        if verdict and verdict not in VERDICTS:
            raise HTTPException(400, f"verdict must be one of {', '.join(VERDICTS)}")
        filters = AuditFilters(
            session_id=_valid_id(q["session"], "session") if q.get("session") else "",
            tool_name=q.get("tool", "")[:128],
            status=status,
            agent_name=q.get("agent", "")[:128],
            verdict=verdict,
            since=_utc(q.get("since", ""), "since"),
            until=_utc(q.get("until", ""), "until"),
        )
        token = q.get("page", "")[:2048]
        error = ""
        rows: tuple[Any, ...] = ()
        next_token = ""
        try:
            page = await self.backend.audit_page(filters, self.page_size, token)
            rows, next_token = page.rows, page.next_token
        except BackendError as exc:
            error = exc.message
        verified = await self.backend.verify()
        base = {k: v for k, v in q.items() if k != "page" and v}
        return self._render(
            request,
            "audit.html",
            person,
            filters=filters,
            query=base,
            rows=rows,
            next_url=("/audit?" + urlencode({**base, "page": next_token})) if next_token else "",
            first_url="/audit?" + urlencode(base) if token else "",
            error=error,
            verified=verified,
        )

    # -- sessions --------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        """One session's mode and rules (changeable by admins); recent sessions to pick."""
        person = self._require(request, Role.VIEWER)
        session_id = request.query_params.get("session", "").strip()
        session, rules, error = None, [], ""
        recent: list[str] = []
        try:
            if session_id:
                _valid_id(session_id, "session")
                session = await self.backend.session(session_id)
                rules = await self.backend.rules(session_id)
            recent = await self.backend.recent_sessions()
        except BackendError as exc:
            error = exc.message
        return self._render(
            request,
            "sessions.html",
            person,
            session_id=session_id,
            session=session,
            rules=rules,
            recent=recent,
            error=error,
        )

    async def _admin_change(
        self,
        request: Request,
        change: Callable[[Person, FormData, str], Awaitable[str]],
    ) -> Response:
        session_id = _valid_id(request.path_params["session_id"], "session")
        person, form = await self._form(request, Role.ADMIN)
        assert person is not None
        try:
            self._flash(request, "ok", await change(person, form, session_id))
        except BackendError as exc:
            self._flash(request, "error", f"Not changed: {exc.message}")
        return RedirectResponse("/sessions?" + urlencode({"session": session_id}), 303)

    async def set_mode(self, request: Request) -> Response:
        """Change a session's mode (admins)."""

        async def change(person: Person, form: FormData, session_id: str) -> str:
            mode = _text(form, "mode", 32)
            if mode not in MODES:
                raise HTTPException(400, f"mode must be one of {', '.join(MODES)}")
            done = await self.backend.set_mode(person, session_id, mode)
            return f"Session {session_id} is now in {done.mode} mode."

        return await self._admin_change(request, change)

    async def add_rule(self, request: Request) -> Response:
        """Add a session rule (admins)."""

        async def change(person: Person, form: FormData, session_id: str) -> str:
            effect = _text(form, "effect", 8)
            if effect not in EFFECTS:
                raise HTTPException(400, f"effect must be one of {', '.join(EFFECTS)}")
            pattern = _text(form, "pattern", MAX_PATTERN)
            if not pattern:
                raise HTTPException(400, "pattern is required")
            rule = await self.backend.add_rule(
                person, session_id, effect, pattern, _text(form, "reason", MAX_NOTE)
            )
            return f"Rule {rule.rule_id} added: {rule.effect} {rule.pattern}."

        return await self._admin_change(request, change)

    async def remove_rule(self, request: Request) -> Response:
        """Remove a session rule (admins)."""
        rule_id = _valid_id(request.path_params["rule_id"], "rule id")

        async def change(person: Person, form: FormData, session_id: str) -> str:
            removed = await self.backend.remove_rule(person, session_id, rule_id)
            return f"Rule {rule_id} removed." if removed else f"Rule {rule_id} was already gone."

        return await self._admin_change(request, change)

    async def error_page(self, request: Request, exc: Exception) -> Response:
        """HTTP errors as a page (401 → the sign-in page when tokens are configured)."""
        assert isinstance(exc, HTTPException)
        if exc.status_code == 401 and request.method == "GET" and request.url.path != "/events":
            if self.people.token_login:
                return RedirectResponse("/login", 303)
        person = None
        try:
            person = self._person(request)
        except HTTPException:
            pass
        return self._render(
            request, "error.html", person, status=exc.status_code, message=exc.detail
        )
