"""The console's approvals event stream (``/events``, server-sent events) over real decision
and audit servers: it opens with what is pending now, then follows the changes.

The approvals page is rendered before its event stream connects, so an approval raised in
between, or while the browser reconnects, reaches the page only if the stream starts with
the pending set. These tests read the stream as plain HTTP (no browser), so they see the
exact order of the events.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
from google.protobuf import struct_pb2

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.console.settings import ConsoleSettings
from stockade.console.web import ConsoleWeb
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import load_settings
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc
from tests.e2e.console.harness import console_server, grpc_server, until

ADMIN_TOKEN = "decision-admin-token-for-events"
LOGIN = "vera-login-token-0123456789"
POLICY = '[permissions]\nask = ["file_write"]\n[limits]\napproval_timeout_seconds = 120\n'
WAIT_S = 60.0
"""Generous: a busy machine may take long; a missing event fails at this deadline."""


@asynccontextmanager
async def stack(
    tmp: Path,
) -> AsyncIterator[tuple[str, ConsoleWeb, d_grpc.DecisionServiceAsyncStub]]:
    (tmp / "policy.toml").write_text(POLICY)
    dsettings = load_settings(
        DecisionSettings, listen="127.0.0.1:0", state_dir=tmp / "decision",
        policy_file=tmp / "policy.toml", admin_tokens=[f"console={ADMIN_TOKEN}"],
        delegate_identities=["token:console"],
    )  # fmt: skip
    asettings = load_settings(AuditSettings, listen="127.0.0.1:0", state_dir=tmp / "audit")
    async with AsyncExitStack() as es:
        daddr = await es.enter_async_context(grpc_server(DecisionApp(dsettings), dsettings))
        aaddr = await es.enter_async_context(grpc_server(AuditApp(asettings), asettings))
        csettings = load_settings(
            ConsoleSettings, listen="127.0.0.1:0", decision_addr=daddr, audit_addr=aaddr,
            decision_admin_token=ADMIN_TOKEN, login_tokens=[f"vera@example.com={LOGIN}"],
            viewers=["vera@example.com"], state_dir=tmp / "console",
        )  # fmt: skip
        url, web = await es.enter_async_context(console_server(csettings))
        channel = await es.enter_async_context(grpc.aio.insecure_channel(daddr))
        stub: d_grpc.DecisionServiceAsyncStub = d_grpc.DecisionServiceStub(channel)  # type: ignore[assignment]
        yield url, web, stub


async def ask(stub: d_grpc.DecisionServiceAsyncStub, call_id: str) -> str:
    args = struct_pb2.Struct()
    args.update({"file_path": f"{call_id}.md", "content": "x"})
    resp = await stub.Decide(
        d_pb2.DecideRequest(
            call=c_pb2.ToolCall(call_id=call_id, tool_name="file_write", arguments=args,
                                session_id="s1", agent_name="lead")
        ),
        timeout=WAIT_S,
    )  # fmt: skip
    assert resp.verdict == c_pb2.VERDICT_ASK
    return resp.approval_id


async def sign_in(client: httpx.AsyncClient) -> None:
    page = await client.get("/login")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf
    done = await client.post("/login", data={"csrf_token": csrf.group(1), "token": LOGIN})
    assert done.status_code == 303 and done.headers["location"] == "/approvals"


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The ``approval`` events of an SSE response, decoded (pings and comments skipped)."""
    kind = ""
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            kind = line.partition(":")[2].strip()
        elif line.startswith("data:") and kind == "approval":
            yield json.loads(line.partition(":")[2])
        elif not line:
            kind = ""


async def test_the_stream_opens_with_what_is_pending_then_follows_changes(tmp_path: Path) -> None:
    async with stack(tmp_path) as (url, web, stub), httpx.AsyncClient(base_url=url) as client:
        await sign_in(client)
        before = await ask(stub, "before")
        answered = await ask(stub, "answered")
        await stub.ResolveApproval(
            d_pb2.ResolveApprovalRequest(approval_id=answered, resolution=d_pb2.RESOLUTION_DENY),
            metadata=(("authorization", f"Bearer {ADMIN_TOKEN}"),),
            timeout=WAIT_S,
        )
        # The console has seen both (one pending, one answered) before the stream connects.
        await until(lambda: [v.approval_id for v in web.feed.pending()] == [before],
                    what="the feed to hold only the pending approval")  # fmt: skip
        async with client.stream("GET", "/events", timeout=WAIT_S) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = events(response)
            # A new approval once the stream is up: without the opening set it would be the
            # first (and only) event.
            after = await ask(stub, "after")
            first = await asyncio.wait_for(anext(stream), WAIT_S)
            # Pending before the stream connected: it comes first, as a full card.
            assert first["id"] == before and first["state"] == "pending"
            assert f'id="approval-{before}"' in first["html"]
            assert "file_write" in first["html"] and 'data-testid="asking-rule"' in first["html"]
            # A viewer's card has no resolve form (the role is applied to streamed cards too).
            assert "<form" not in first["html"]
            seen = [first]
            while not any(e["id"] == after for e in seen):
                seen.append(await asyncio.wait_for(anext(stream), WAIT_S))
            ids = [e["id"] for e in seen]
            # The answered approval was never pending on this stream; nothing is duplicated
            # but the new one (it may be in the opening set and in the changes both).
            assert answered not in ids
            assert ids.count(before) == 1 and set(ids) == {before, after}
            assert seen[-1]["state"] == "pending" and seen[-1]["html"]
