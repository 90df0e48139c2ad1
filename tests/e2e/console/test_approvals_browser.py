"""The approvals page in real headless Chromium over real decision and audit servers."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from tests.e2e.console.harness import ADMIN_TOKEN, console_stack, until


async def test_pending_approval_appears_live_and_allow_once_lets_the_waiter_proceed(
    tmp_path: Path,
) -> None:
    async with console_stack(tmp_path) as s:
        page = await s.page_as("bob@example.com")
        await page.wait_for_selector("#live.on")
        assert await page.locator("article.approval").count() == 0
        approval_id = await s.ask(file_path="notes.md", content="api_key=sk-live-0123456789abcdef")
        waiter = asyncio.ensure_future(
            s.decision.AwaitApproval(
                d_pb2.AwaitApprovalRequest(approval_id=approval_id), timeout=60
            )
        )
        card = page.locator(f"#approval-{approval_id}")
        await card.wait_for()  # no reload: the page follows /events
        text = await card.inner_text()
        assert "file_write" in text and "s1" in text and "lead" in text
        assert "sk-live-0123456789abcdef" not in text and "REDACTED" in text
        # The rule that asked is on the card: the policy's `ask = ["file_write"]`.
        rule = card.locator("[data-testid=asking-rule]")
        assert await rule.locator("code.pattern").inner_text() == "file_write"
        rule_text = await rule.inner_text()
        assert "ask" in rule_text and "managed" in rule_text
        await s.screenshot(page, "approvals-pending")
        await card.locator("button[value=allow_once]").click()
        await page.wait_for_url(f"{s.url}/approvals")
        flash = await page.locator("[data-testid=flash]").inner_text()
        assert "allowed by bob@example.com" in flash
        answer = await asyncio.wait_for(waiter, 30)
        assert answer.verdict == c_pb2.VERDICT_ALLOW
        assert answer.grant.signature
        assert answer.approval.resolver.startswith("bob@example.com")
        assert await page.locator(f"#approval-{approval_id}").count() == 0


async def test_two_browsers_answer_at_once_exactly_one_wins_and_the_other_is_told_who(
    tmp_path: Path,
) -> None:
    async with console_stack(tmp_path) as s:
        alice = await s.page_as("alice@example.com")
        bob = await s.page_as("bob@example.com")
        for page in (alice, bob):
            await page.wait_for_selector("#live.on")
        approval_id = await s.ask(call_id="race")
        for page in (alice, bob):
            await page.locator(f"#approval-{approval_id}").wait_for()
        click = (
            "id => { const b = document.querySelector("
            "`#approval-${id} button[value=allow_once]`); if (!b) return false; "
            "b.click(); return true; }"
        )
        # Both clicks are sent to the two browsers in the same instant.
        clicked = await asyncio.gather(
            alice.evaluate(click, approval_id), bob.evaluate(click, approval_id)
        )
        assert clicked[0] or clicked[1]
        waiter = await s.decision.AwaitApproval(
            d_pb2.AwaitApprovalRequest(approval_id=approval_id), timeout=30
        )
        assert waiter.verdict == c_pb2.VERDICT_ALLOW
        winner = waiter.approval.resolver.split(" ")[0]
        assert winner in ("alice@example.com", "bob@example.com")
        won, lost = (alice, bob) if winner == "alice@example.com" else (bob, alice)

        async def confirmed() -> bool:
            flashes = await won.locator("[data-testid=flash]").all_inner_texts()
            return any(f"allowed by {winner}" in t for t in flashes)

        await until(confirmed, what="the winning browser's confirmation")

        async def told() -> bool:
            flashes = " ".join(await lost.locator("[data-testid=flash]").all_inner_texts())
            answered = await lost.locator("#answered-list").inner_text()
            return winner in flashes or winner in answered

        # Either its own click lost (the page says who answered first) or the live stream
        # removed the approval before its click landed (the list says who answered).
        await until(told, what="the losing browser to name the winner")
        await s.screenshot(lost, "approvals-race-lost")


async def test_an_approval_answered_elsewhere_disappears_with_who_answered(
    tmp_path: Path,
) -> None:
    async with console_stack(tmp_path) as s:
        page = await s.page_as("vera@example.com")
        await page.wait_for_selector("#live.on")
        approval_id = await s.ask(call_id="elsewhere")
        await page.locator(f"#approval-{approval_id}").wait_for()
        # Another resolver (the CLI, a bot) answers through the decision service.
        await s.decision.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=approval_id, resolution=d_pb2.RESOLUTION_DENY, resolver="cli-user"
            ),
            metadata=(("authorization", f"Bearer {ADMIN_TOKEN}"),),
            timeout=10,
        )
        await page.locator(f"#approval-{approval_id}").wait_for(state="detached")
        line = await page.locator(f"#answered-list li[data-approval='{approval_id}']").inner_text()
        assert "denied by" in line
        await s.screenshot(page, "approvals-answered-elsewhere")


async def test_a_timed_out_approval_says_so(tmp_path: Path) -> None:
    async with console_stack(tmp_path, timeout=2) as s:
        page = await s.page_as("bob@example.com")
        await page.wait_for_selector("#live.on")
        approval_id = await s.ask(call_id="slow")
        await page.locator(f"#approval-{approval_id}").wait_for()
        # The agent's waiter sees the deadline pass; the page says the approval timed out.
        answer = await s.decision.AwaitApproval(
            d_pb2.AwaitApprovalRequest(approval_id=approval_id), timeout=30
        )
        assert answer.verdict == c_pb2.VERDICT_DENY
        line = page.locator(f"#answered-list li[data-approval='{approval_id}']")
        await line.wait_for()
        assert "timed out" in await line.inner_text()
        assert await page.locator(f"#approval-{approval_id}").count() == 0


async def test_always_allow_with_a_scope_shows_under_grants_and_revoke_asks_again(
    tmp_path: Path,
) -> None:
    async with console_stack(tmp_path) as s:
        page = await s.page_as("alice@example.com")
        await page.wait_for_selector("#live.on")
        first = await s.decide_bash("npm install", "npm-1")
        assert first.verdict == c_pb2.VERDICT_ASK and first.always_allow_applies
        card = page.locator(f"#approval-{first.approval_id}")
        await card.wait_for()
        await card.locator("input[name=scope][value=uses]").check()
        await card.locator("input[name=uses]").fill("3")
        await card.locator("input[name=note]").fill("npm install is fine this week")
        await card.locator("button[value=always_allow]").click()
        await page.wait_for_url(f"{s.url}/approvals")
        assert "Grant" in await page.locator("[data-testid=flash]").inner_text()

        await page.goto(f"{s.url}/grants?session=s1")
        rows = page.locator("[data-testid=grants] tbody tr")
        await until(lambda: rows.count(), what="the grant row")
        row_text = await rows.first.inner_text()
        assert "run_bash(npm install)" in row_text
        assert "3" in row_text and "alice@example.com" in row_text
        await s.screenshot(page, "grants")

        second = await s.decide_bash("npm install", "npm-2")
        assert second.verdict == c_pb2.VERDICT_ALLOW  # the grant applies (2 uses left now)

        await rows.first.locator("button", has_text="Revoke").click()
        await page.wait_for_url(f"{s.url}/grants?session=s1")
        assert "revoked" in await page.locator("[data-testid=flash]").inner_text()
        assert await page.locator("[data-testid=grants]").count() == 0

        third = await s.decide_bash("npm install", "npm-3")
        assert third.verdict == c_pb2.VERDICT_ASK  # revoked: it asks again


async def test_always_allow_until_a_time_records_the_expiry(tmp_path: Path) -> None:
    async with console_stack(tmp_path) as s:
        page = await s.page_as("bob@example.com")
        await page.wait_for_selector("#live.on")
        asked = await s.decide_bash("make build", "make-1")
        card = page.locator(f"#approval-{asked.approval_id}")
        await card.wait_for()
        await card.locator("input[name=scope][value=until]").check()
        await card.locator("input[name=until]").fill("2099-01-02T03:04")
        await card.locator("button[value=always_allow]").click()
        await page.wait_for_url(f"{s.url}/approvals")
        # Past the 90-day bound: refused with why; nothing granted, still pending.
        assert "within 90 days" in await page.locator("[data-testid=flash]").inner_text()
        listed = await s.decision.ListGrants(d_pb2.ListGrantsRequest(session_id="s1"), timeout=10)
        assert not listed.grants
        until_at = (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).replace(second=0, microsecond=0)
        card = page.locator(f"#approval-{asked.approval_id}")
        await card.locator("input[name=scope][value=until]").check()
        await card.locator("input[name=until]").fill(until_at.strftime("%Y-%m-%dT%H:%M"))
        await card.locator("button[value=always_allow]").click()
        await page.wait_for_url(f"{s.url}/approvals")
        listed = await s.decision.ListGrants(d_pb2.ListGrantsRequest(session_id="s1"), timeout=10)
        assert len(listed.grants) == 1
        assert listed.grants[0].expire_time.ToDatetime(tzinfo=dt.UTC) == until_at
        assert listed.grants[0].remaining_uses == 0
        await page.goto(f"{s.url}/grants?session=s1")
        row = await page.locator("[data-testid=grants] tbody tr").first.inner_text()
        assert until_at.strftime("%Y-%m-%d %H:%M") in row and "unlimited" in row
        # Bob is a resolver, not an admin: no revoke button for him.
        assert await page.locator("button", has_text="Revoke").count() == 0
