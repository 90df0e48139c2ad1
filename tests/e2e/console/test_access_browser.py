"""Who may do what in the console, CSRF, sign-in paths and headers, in real Chromium."""

from __future__ import annotations

from pathlib import Path

from stockade.console.security import CSRF_FIELD
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from tests.e2e.console.harness import ADMIN_TOKEN, TOKENS, console_stack, until


async def _csrf(page: object) -> str:
    token = await page.locator(f"input[name={CSRF_FIELD}]").first.get_attribute("value")  # type: ignore[attr-defined]
    assert token
    return str(token)


async def test_a_viewer_sees_approvals_but_cannot_resolve(tmp_path: Path) -> None:
    async with console_stack(tmp_path) as s:
        page = await s.page_as("vera@example.com")
        await page.wait_for_selector("#live.on")
        approval_id = await s.ask(call_id="viewer")
        card = page.locator(f"#approval-{approval_id}")
        await card.wait_for()
        assert await card.locator("form.resolve").count() == 0
        assert "needs the resolver role" in await card.inner_text()
        await s.screenshot(page, "approvals-viewer")
        # A forged POST with the viewer's own valid CSRF token is still refused by role.
        token = await _csrf(page)
        resp = await page.request.post(
            f"{s.url}/approvals/{approval_id}/resolve",
            form={CSRF_FIELD: token, "action": "allow_once"},
            max_redirects=0,
        )
        assert resp.status == 403
        assert "resolver role" in await resp.text()
        assert await s.still_pending(approval_id)


async def test_a_form_without_its_csrf_token_is_refused(tmp_path: Path) -> None:
    async with console_stack(tmp_path) as s:
        page = await s.page_as("alice@example.com")
        approval_id = await s.ask(call_id="csrf")
        token = await _csrf(page)
        url = f"{s.url}/approvals/{approval_id}/resolve"
        for form in (
            {"action": "allow_once"},  # no token
            {CSRF_FIELD: "", "action": "allow_once"},  # empty
            {CSRF_FIELD: token[:-1] + ("A" if token[-1] != "A" else "B"), "action": "allow_once"},
            {CSRF_FIELD: TOKENS["alice@example.com"], "action": "allow_once"},  # another secret
        ):
            resp = await page.request.post(url, form=form, max_redirects=0)
            assert resp.status == 403, form
            assert "CSRF" in await resp.text()
        # The right token from another site is refused too (Origin check).
        resp = await page.request.post(
            url,
            form={CSRF_FIELD: token, "action": "allow_once"},
            headers={"Origin": "https://evil.example"},
            max_redirects=0,
        )
        assert resp.status == 403
        assert await s.still_pending(approval_id)
        # Every POST route of the app checks the token before anything else.
        posts = [
            "/login",
            "/logout",
            f"/approvals/{approval_id}/resolve",
            "/grants/g1/revoke",
            "/sessions/s1/mode",
            "/sessions/s1/rules",
            "/sessions/s1/rules/r1/remove",
        ]
        routes = {
            getattr(r, "path", "")
            for r in s.web.routes()
            if "POST" in (getattr(r, "methods", None) or ())
        }
        assert len(routes) == len(posts)
        for path in posts:
            resp = await page.request.post(f"{s.url}{path}", form={"x": "1"}, max_redirects=0)
            assert resp.status == 403, path
        # With its token the same form works.
        resp = await page.request.post(
            url, form={CSRF_FIELD: token, "action": "deny"}, max_redirects=0
        )
        assert resp.status == 303
        assert (await s.final(approval_id)).state == d_pb2.APPROVAL_STATE_DENIED


async def test_sessions_are_changed_by_admins_only(tmp_path: Path) -> None:
    async with console_stack(tmp_path) as s:
        await s.ask(call_id="mk-session", session="sess-a")
        bob = await s.page_as("bob@example.com")
        await bob.goto(f"{s.url}/sessions?session=sess-a")
        assert await bob.locator("[data-testid=mode]").inner_text() == "default"
        assert await bob.locator("form[action$='/mode']").count() == 0
        resp = await bob.request.post(
            f"{s.url}/sessions/sess-a/mode",
            form={CSRF_FIELD: await _csrf(bob), "mode": "bypassPermissions"},
            max_redirects=0,
        )
        assert resp.status == 403
        alice = await s.page_as("alice@example.com")
        await alice.goto(f"{s.url}/sessions?session=sess-a")
        await alice.select_option("select[name=mode]", "plan")
        await alice.click("form[action$='/mode'] button")
        await alice.wait_for_url(f"{s.url}/sessions?session=sess-a")
        assert await alice.locator("[data-testid=mode]").inner_text() == "plan"
        await alice.select_option("select[name=effect]", "deny")
        await alice.fill("input[name=pattern]", "run_bash(curl *)")
        await alice.fill("input[name=reason]", "no downloads")
        await alice.click("form[action$='/rules'] button")
        await alice.wait_for_url(f"{s.url}/sessions?session=sess-a")
        rules = alice.locator("[data-testid=rules] tbody tr")
        assert "run_bash(curl *)" in await rules.first.inner_text()
        await s.screenshot(alice, "sessions")
        await rules.first.locator("button", has_text="Remove").click()
        await alice.wait_for_url(f"{s.url}/sessions?session=sess-a")
        assert await alice.locator("[data-testid=rules]").count() == 0
        got = await s.decision.GetSession(d_pb2.GetSessionRequest(session_id="sess-a"), timeout=5)
        assert got.session.mode == c_pb2.PERMISSION_MODE_PLAN


async def test_proxy_headers_count_only_from_the_trusted_proxy(tmp_path: Path) -> None:
    headers = {"X-Forwarded-Email": "pat@example.com", "X-Forwarded-Groups": "secops,dev"}
    async with console_stack(
        tmp_path / "trusted", trusted_proxies=["127.0.0.1/32"], resolvers=["group:secops"]
    ) as s:
        page = await s.page_as(None, extra_http_headers=headers)
        await page.goto(f"{s.url}/approvals")
        assert await page.locator("[data-testid=person]").inner_text() == "pat@example.com"
        approval_id = await s.ask(call_id="proxy")
        card = page.locator(f"#approval-{approval_id}")
        await card.wait_for()
        await card.locator("button[value=allow_once]").click()
        await page.wait_for_url(f"{s.url}/approvals")
        answer = await s.decision.AwaitApproval(
            d_pb2.AwaitApprovalRequest(approval_id=approval_id), timeout=30
        )
        assert answer.approval.resolver.startswith("pat@example.com")
    async with console_stack(tmp_path / "untrusted", trusted_proxies=["10.9.9.9"]) as s:
        page = await s.page_as(None, extra_http_headers=headers)
        await page.goto(f"{s.url}/approvals")
        assert page.url == f"{s.url}/login"  # the headers were ignored: not signed in
        assert await page.locator("[data-testid=person]").count() == 0
        resp = await page.request.get(f"{s.url}/events", max_redirects=0)
        assert resp.status == 401


async def test_pages_carry_security_headers_and_no_secrets(tmp_path: Path) -> None:
    async with console_stack(tmp_path) as s:
        await s.ask(call_id="headers")
        page = await s.page_as("alice@example.com")
        cookies = await page.context.cookies()
        session = next(c for c in cookies if c["name"] == "stockade_console")
        assert session["httpOnly"] and session["sameSite"] == "Strict"
        secrets = [ADMIN_TOKEN, *TOKENS.values()]
        for path in (
            "/approvals",
            "/grants?session=s1",
            "/audit",
            "/sessions?session=s1",
            "/login",
        ):
            resp = await page.goto(f"{s.url}{path}")
            assert resp is not None and resp.status == 200, path
            h = await resp.all_headers()
            csp = h["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp
            assert h["x-content-type-options"] == "nosniff"
            assert h["referrer-policy"] in ("same-origin", "no-referrer")
            assert h["cache-control"] == "no-store"
            html = await page.content()
            assert not any(secret in html for secret in secrets), path
            assert "<script>" not in html  # no inline script anywhere
        # An inline script injected into the page is blocked by the CSP.
        ran = await page.evaluate(
            "() => { const s = document.createElement('script'); s.textContent = "
            "'window.__ran = true'; document.body.append(s); return window.__ran === true; }"
        )
        assert ran is False


async def test_signing_in_needs_a_valid_token(tmp_path: Path) -> None:
    async with console_stack(tmp_path) as s:
        page = await s.page_as(None)
        await page.goto(f"{s.url}/approvals")
        assert page.url == f"{s.url}/login"
        await page.fill("#token", "not-a-token-of-anyone-here")
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{s.url}/login")
        assert "not valid" in await page.locator("[data-testid=flash]").inner_text()
        await s.screenshot(page, "login")
        await page.fill("#token", TOKENS["vera@example.com"])
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{s.url}/approvals")
        await until(lambda: page.locator("[data-testid=person]").inner_text())
        assert await page.locator("[data-testid=person]").inner_text() == "vera@example.com"
        await page.click("text=Sign out")
        await page.wait_for_url(f"{s.url}/login")
        await page.goto(f"{s.url}/audit")
        assert page.url == f"{s.url}/login"
        # Guessing is throttled per address: after ten failures even the right token waits.
        token = await _csrf(page)
        for _ in range(9):  # one failure above already
            resp = await page.request.post(
                f"{s.url}/login", form={CSRF_FIELD: token, "token": "guess-" + "x" * 20},
                max_redirects=0,
            )  # fmt: skip
            assert resp.status == 303
        resp = await page.request.post(
            f"{s.url}/login", form={CSRF_FIELD: token, "token": TOKENS["vera@example.com"]},
            max_redirects=0,
        )  # fmt: skip
        assert resp.status == 429
