"""The audit page in real Chromium: filters (session, verdict), paging, a row's full
decision with its approver, and the hash chain's state."""

from __future__ import annotations

import json
from pathlib import Path

from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from tests.e2e.console.harness import console_stack

SETTLED = json.dumps(
    {"by": "approval", "approval": "appr-7", "resolver": "bob@example.com via mtls:console"}
)


async def _record(s: object, n: int, **fields: object) -> None:
    event = a_pb2.AuditEvent(
        event_id=f"e{n}", session_id="sess-1" if n % 2 else "sess-2", tool_name="run_bash",
        call_id=f"call-{n}", agent_name="lead", status=a_pb2.AUDIT_STATUS_OK,
        verdict=c_pb2.VERDICT_ALLOW, matched_rule="run_bash(git status)",
        rule_source=c_pb2.RULE_SOURCE_MANAGED, policy_version="pv-42",
    )  # fmt: skip
    for key, value in fields.items():
        setattr(event, key, value)
    await s.audit.Record(a_pb2.RecordRequest(event=event), timeout=10)  # type: ignore[attr-defined]


async def test_the_audit_page_filters_pages_and_shows_the_whole_decision(tmp_path: Path) -> None:
    async with console_stack(tmp_path, page_size=3) as s:
        for n in range(1, 6):
            await _record(s, n)
        await _record(
            s, 7, verdict=c_pb2.VERDICT_DENY, status=a_pb2.AUDIT_STATUS_DENIED,
            matched_rule="run_bash(rm *)", arguments_json=json.dumps({"command": "rm -rf /"}),
            conflict_log=json.dumps([{"pattern": "run_bash(git *)", "effect": "RULE_EFFECT_ALLOW",
                                      "source": "RULE_SOURCE_SESSION", "note": "DENY wins"}]),
        )  # fmt: skip
        await _record(s, 9, output_preview=SETTLED, arguments_json='{"password": "pw-12345678"}')
        page = await s.page_as("vera@example.com")
        await page.goto(f"{s.url}/audit")
        assert "intact" in await page.locator("[data-testid=chain]").inner_text()
        rows = page.locator("[data-testid=audit] tbody.row")
        assert await rows.count() == 3  # page size 3, newest first
        first = await rows.first.inner_text()
        assert "bob@example.com via mtls:console" in first
        assert "pw-12345678" not in await page.content()
        await rows.first.locator("summary").click()
        await s.screenshot(page, "audit")
        await page.click("a[rel=next]")
        assert await rows.count() == 3
        await page.click("a[rel=next]")
        assert await rows.count() == 1 and await page.locator("a[rel=next]").count() == 0
        # Filters: one verdict, one session.
        await page.goto(f"{s.url}/audit")
        await page.select_option("select[name=verdict]", "deny")
        await page.click("form.filters button")
        assert await rows.count() == 1
        denied = rows.first
        await denied.locator("summary").click()
        detail = await denied.inner_text()
        assert "run_bash(rm *)" in detail and "pv-42" in detail
        assert "allow run_bash(git *) (session)" in detail and "DENY wins" in detail
        await page.goto(f"{s.url}/audit?session=sess-2")
        texts = await rows.all_inner_texts()
        assert len(texts) == 2 and all("sess-2" in t for t in texts)
        resp = await page.goto(f"{s.url}/audit?verdict=maybe")
        assert resp is not None and resp.status == 400
