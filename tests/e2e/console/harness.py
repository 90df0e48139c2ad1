"""Real decision and audit servers (port 0, SQLite in tmp), the console on a free port and
headless Chromium (Debian's /usr/bin/chromium) driven by Playwright.

Nothing here is mocked: the console talks gRPC to the servers as in production, the
browser talks HTTP to the console, and tests look at what a person would see.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import uvicorn
from google.protobuf import struct_pb2
from playwright.async_api import Browser, BrowserContext, Page, async_playwright
from playwright.async_api import Error as PlaywrightError

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.console.app import build_app
from stockade.console.settings import ConsoleSettings
from stockade.console.web import ConsoleWeb
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import audit_service_pb2_grpc as a_grpc
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

CHROMIUM = Path(os.environ.get("STOCKADE_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ADMIN_TOKEN = "decision-admin-token-for-console"
TOKENS = {
    "alice@example.com": "alice-login-token-0123456789",
    "bob@example.com": "bob-login-token-0123456789ab",
    "vera@example.com": "vera-login-token-0123456789a",
}
POLICY = """
[permissions]
ask = ["file_write"]
allow = ["read_file"]
[limits]
approval_timeout_seconds = {timeout}
denial_max_consecutive = 50
denial_max_total = 500
"""
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "console"
"""Screenshots for people to look at (git-ignored)."""


def chromium_path() -> Path:
    """Debian's Chromium; a missing browser fails the test with how to install it."""
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: the console's browser tests need Debian's chromium "
            "package (`apt-get install -y chromium`; .ci/run and `make test` install it)",
            pytrace=False,
        )
    return CHROMIUM


@dataclass
class Stack:
    """The running parts of one test."""

    url: str
    decision: d_grpc.DecisionServiceAsyncStub
    audit: a_grpc.AuditServiceAsyncStub
    web: ConsoleWeb
    browser: Browser
    tmp: Path
    _sentinels: int = 0

    async def page_as(self, person: str | None, **context: Any) -> Page:
        """A fresh browser context (own cookies), signed in as ``person`` via the form."""
        ctx: BrowserContext = await self.browser.new_context(**context)
        # Generous waits (conditions, never sleeps): the machine may be busy.
        ctx.set_default_timeout(90_000)
        page = await ctx.new_page()
        if person is not None:
            await page.goto(f"{self.url}/login")
            await page.fill("#token", TOKENS[person])
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{self.url}/approvals")
        return page

    async def ask(self, tool: str = "file_write", call_id: str = "c1", session: str = "s1",
                  **args: Any) -> str:  # fmt: skip
        """Decide a call the policy asks about; return the pending approval's id."""
        s = struct_pb2.Struct()
        s.update(args or {"file_path": "notes.md", "content": "hello"})
        resp = await self.decision.Decide(
            d_pb2.DecideRequest(
                call=c_pb2.ToolCall(
                    call_id=call_id, tool_name=tool, arguments=s, session_id=session,
                    agent_name="lead",
                )
            ),
            timeout=10,
        )  # fmt: skip
        assert resp.verdict == c_pb2.VERDICT_ASK, resp
        return resp.approval_id

    async def decide_bash(
        self, command: str, call_id: str, session: str = "s1"
    ) -> d_pb2.DecideResponse:
        """Decide a bash call that only the executor's tool-level check asks about (so an
        "always allow" answer can take effect, and a grant can allow it next time)."""
        s = struct_pb2.Struct()
        s.update({"command": command})
        tool_ask = c_pb2.Rule(
            effect=c_pb2.RULE_EFFECT_ASK,
            pattern="run_bash",
            source=c_pb2.RULE_SOURCE_TOOL,
            reason="may change files",
        )
        resp: d_pb2.DecideResponse = await self.decision.Decide(
            d_pb2.DecideRequest(
                call=c_pb2.ToolCall(
                    call_id=call_id, tool_name="run_bash", arguments=s, session_id=session,
                    agent_name="lead",
                ),
                inspection=d_pb2.ToolInspection(
                    tool_rules=[tool_ask],
                    analysis=c_pb2.CommandAnalysis(
                        sub_command_texts=[command], sub_commands=[command]
                    ),
                ),
            ),
            timeout=10,
        )  # fmt: skip
        return resp

    async def still_pending(self, approval_id: str, session: str = "s1") -> bool:
        """Whether the decision service still holds ``approval_id`` as pending.

        A sentinel approval is created after it; the session's watch stream lists pending
        approvals oldest first, so reading up to the sentinel shows every pending one."""
        self._sentinels += 1
        sentinel = await self.ask(call_id=f"sentinel-{self._sentinels}", session=session)
        seen: set[str] = set()
        stream = self.decision.WatchApprovals(d_pb2.WatchApprovalsRequest(session_id=session))
        async for change in stream:
            if change.approval.approval_id == sentinel:
                break
            if change.approval.state == d_pb2.APPROVAL_STATE_PENDING:
                seen.add(change.approval.approval_id)
        stream.cancel()
        return approval_id in seen

    async def final(self, approval_id: str) -> d_pb2.Approval:
        """The answered approval (AwaitApproval returns at once once it is answered)."""
        resp = await self.decision.AwaitApproval(
            d_pb2.AwaitApprovalRequest(approval_id=approval_id), timeout=30
        )
        return resp.approval

    async def screenshot(self, page: Page, name: str) -> Path:
        """Save a full-page screenshot under artifacts/console and print where."""
        return await screenshot(page, name)


async def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot under artifacts/console and print where."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


async def until(check: Any, *, timeout_s: float = 90.0, what: str = "condition") -> Any:
    """Poll ``check`` (sync or async) until truthy; fail after a generous deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
        except PlaywrightError:
            value = None  # the page was navigating: look again
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def grpc_server(app: Any, settings: Any) -> AsyncIterator[str]:
    """Serve a ServiceApp in-process; yield its address."""
    async with app.open() as regs:
        running = await create_server(app.name, settings, regs)
        try:
            yield running.address
        finally:
            await stop_server(running)


@asynccontextmanager
async def console_server(settings: ConsoleSettings) -> AsyncIterator[tuple[str, ConsoleWeb]]:
    """The console's ASGI app under uvicorn on a free loopback port."""
    app, web = build_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(
        uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                       timeout_graceful_shutdown=1)
    )  # fmt: skip
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started or task.done(), what="uvicorn to start")
        if task.done():
            task.result()
        await until(lambda: web.feed.connected.is_set(), what="the approvals stream")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", web
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


@asynccontextmanager
async def console_stack(tmp: Path, *, timeout: float = 120, **console: Any) -> AsyncIterator[Stack]:
    """Decision + audit servers, the console and a browser, all torn down after."""
    chromium = chromium_path()
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "policy.toml").write_text(POLICY.format(timeout=timeout))
    dsettings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp / "decision",
        policy_file=tmp / "policy.toml",
        # The console's token is named, and that name is the one delegate: it may name the
        # person it acts for; nobody else may.
        admin_tokens=[f"console={ADMIN_TOKEN}"],
        delegate_identities=["token:console"],
        workspace=str(tmp),
    )
    asettings = load_settings(AuditSettings, listen="127.0.0.1:0", state_dir=tmp / "audit")
    async with AsyncExitStack() as stack:
        daddr = await stack.enter_async_context(grpc_server(DecisionApp(dsettings), dsettings))
        aaddr = await stack.enter_async_context(grpc_server(AuditApp(asettings), asettings))
        options: dict[str, Any] = {
            "listen": "127.0.0.1:0",
            "decision_addr": daddr,
            "audit_addr": aaddr,
            "decision_admin_token": ADMIN_TOKEN,
            "login_tokens": [f"{n}={t}" for n, t in TOKENS.items()],
            "admins": ["alice@example.com"],
            "resolvers": ["bob@example.com"],
            "viewers": ["vera@example.com"],
            "state_dir": tmp / "console",
        }
        options.update(console)
        csettings = load_settings(ConsoleSettings, **options)
        url, web = await stack.enter_async_context(console_server(csettings))
        dch = await stack.enter_async_context(grpc.aio.insecure_channel(daddr))
        ach = await stack.enter_async_context(grpc.aio.insecure_channel(aaddr))
        pw = await stack.enter_async_context(async_playwright())
        browser = await pw.chromium.launch(
            executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
        )
        stack.push_async_callback(browser.close)
        yield Stack(
            url,
            d_grpc.DecisionServiceStub(dch),  # type: ignore[arg-type]
            a_grpc.AuditServiceStub(ach),  # type: ignore[arg-type]
            web,
            browser,
            tmp,
        )
