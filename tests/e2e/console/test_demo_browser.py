"""The issue's "done": a person keeps the console open during `stockade demo --no-bot`,
answers the demo's approvals in the page, sees the agent go on, and finds the decision in
the audit page. The demo runs as a user runs it (a subprocess starting six processes)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from tests.e2e.console.harness import CHROMIUM_ARGS, chromium_path, screenshot, until

CONSOLE_LINE = re.compile(
    r"console: (http://127\.0\.0\.1:\d+)\s+\(sign in as (\S+) with token (\S+)\)"
)


# Six processes start and a person answers twice: on a loaded 2-core machine this takes
# longer than the suite's default per-test timeout.
@pytest.mark.timeout(400)
async def test_a_person_answers_the_demo_in_the_console(tmp_path: Path) -> None:
    chromium = chromium_path()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stockade.cli.main", "demo", "--no-color", "--no-bot",
        "--state-dir", str(tmp_path / "demo"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "USER": "dana", "PYTHONUNBUFFERED": "1", "OTEL_SDK_DISABLED": "true"},
    )  # fmt: skip
    assert proc.stdout is not None
    out: list[str] = []

    async def read() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            out.append(raw.decode(errors="replace"))

    reader = asyncio.create_task(read())
    try:
        found = await until(lambda: CONSOLE_LINE.search("".join(out)), timeout_s=150,
                            what="the console's address in the demo output")  # fmt: skip
        url, person, token = found.group(1), found.group(2), found.group(3)
        assert person == "dana"
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
            )
            page = await browser.new_page()
            await page.goto(f"{url}/login")
            await page.fill("#token", token)
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{url}/approvals")
            write = page.locator("article.approval", has_text="file_write")
            await write.wait_for(timeout=150_000)
            await screenshot(page, "demo-approval")
            await write.locator("button[value=allow_once]").click()
            await page.wait_for_url(f"{url}/approvals")
            # The agent goes on: the demo's output shows the approval and the write.
            await until(lambda: "approval ALLOW: approved by" in "".join(out), timeout_s=150,
                        what="the agent to continue")  # fmt: skip
            npm = page.locator("article.approval", has_text="npm install")
            await npm.wait_for(timeout=150_000)
            await npm.locator("input[name=note]").fill("not in the demo")
            await npm.locator("button[value=deny]").click()
            await page.wait_for_url(f"{url}/approvals")
            await until(lambda: "the console stays up" in "".join(out), timeout_s=150,
                        what="the demo run to finish")  # fmt: skip
            await page.goto(f"{url}/audit?session=demo-session")
            table = await page.locator("[data-testid=audit]").inner_text()
            assert "file_write" in table and "npm" not in table.split("run_bash")[0]
            chain = await page.locator("[data-testid=chain]").inner_text()
            assert "intact" in chain
            await screenshot(page, "demo-audit")
            await browser.close()
        text = "".join(out)
        assert re.search(r"approval ALLOW: approved by dana", text), text[-3000:]
        assert re.search(r"approval DENY: denied by dana", text), text[-3000:]
        assert "demo-secret-do-not-read" not in text
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            reader.cancel()
    assert proc.returncode == 0, "".join(out)[-3000:]
