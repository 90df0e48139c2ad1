"""The console talks to decision and audit over mTLS with its own certificate (CN
``console`` from devcerts): it follows approvals, answers one as the signed-in person,
and reads the audit service; without ``console`` among the decision service's admin
identities its answers are refused and the page says why."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
from google.protobuf import struct_pb2

from stockade import devcerts
from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.client.base import TlsConfig, aio_channel
from stockade.console.settings import ConsoleSettings
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import load_settings
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc
from tests.e2e.console.harness import console_server, grpc_server, until

TOKEN = "bob-login-token-0123456789"
POLICY = '[permissions]\nask = ["file_write"]\n[limits]\napproval_timeout_seconds = 120\n'


@asynccontextmanager
async def mtls_stack(
    tmp: Path, admin_identities: list[str], delegates: list[str] | None = None
) -> AsyncIterator[tuple[str, Path, str]]:
    pki = tmp / "pki"
    devcerts.generate(pki)
    (tmp / "policy.toml").write_text(POLICY)

    def tls(name: str) -> dict[str, Path]:
        return {
            "tls_cert_file": pki / f"{name}.crt",
            "tls_key_file": pki / f"{name}.key",
            "tls_ca_file": pki / "ca.crt",
        }

    dsettings = load_settings(
        DecisionSettings, listen="127.0.0.1:0", state_dir=tmp / "decision",
        policy_file=tmp / "policy.toml", admin_identities=admin_identities,
        delegate_identities=delegates if delegates is not None else ["mtls:console"],
        **tls("decision"),
    )  # fmt: skip
    asettings = load_settings(
        AuditSettings, listen="127.0.0.1:0", state_dir=tmp / "audit", **tls("audit")
    )
    async with AsyncExitStack() as stack:
        daddr = await stack.enter_async_context(grpc_server(DecisionApp(dsettings), dsettings))
        aaddr = await stack.enter_async_context(grpc_server(AuditApp(asettings), asettings))
        csettings = load_settings(
            ConsoleSettings, listen="127.0.0.1:0", decision_addr=daddr, audit_addr=aaddr,
            login_tokens=[f"bob@example.com={TOKEN}"], resolvers=["bob@example.com"],
            state_dir=tmp / "console", **tls("console"),
        )  # fmt: skip
        url, _ = await stack.enter_async_context(console_server(csettings))
        yield url, pki, daddr


async def _signed_in(client: httpx.AsyncClient) -> str:
    page = await client.get("/login")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf
    done = await client.post("/login", data={"csrf_token": csrf.group(1), "token": TOKEN})
    assert done.status_code == 303 and done.headers["location"] == "/approvals"
    page = await client.get("/approvals")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf
    return csrf.group(1)


async def test_the_console_answers_over_mtls_as_the_signed_in_person(tmp_path: Path) -> None:
    async with mtls_stack(tmp_path, ["admin", "console"]) as (url, pki, decision_addr):
        tls = TlsConfig(pki / "agent.crt", pki / "agent.key", pki / "ca.crt")
        async with aio_channel(decision_addr, tls=tls) as ch:
            stub: d_grpc.DecisionServiceAsyncStub = d_grpc.DecisionServiceStub(ch)  # type: ignore[assignment]
            args = struct_pb2.Struct()
            args.update({"file_path": "a.md", "content": "x"})
            asked = await stub.Decide(
                d_pb2.DecideRequest(call=c_pb2.ToolCall(
                    call_id="c1", tool_name="file_write", arguments=args, session_id="s1")),
                timeout=10,
            )  # fmt: skip
            assert asked.verdict == c_pb2.VERDICT_ASK
            async with httpx.AsyncClient(base_url=url) as client:
                csrf = await _signed_in(client)

                async def listed() -> bool:
                    return asked.approval_id in (await client.get("/approvals")).text

                await until(listed, what="the approval in the page")
                done = await client.post(
                    f"/approvals/{asked.approval_id}/resolve",
                    data={"csrf_token": csrf, "action": "allow_once"},
                )
                assert done.status_code == 303
                answer = await stub.AwaitApproval(
                    d_pb2.AwaitApprovalRequest(approval_id=asked.approval_id), timeout=30
                )
                assert answer.verdict == c_pb2.VERDICT_ALLOW
                # The person the console signed in, authenticated through the console.
                assert answer.approval.resolver == "bob@example.com"
                audit = await client.get("/audit")
                assert audit.status_code == 200 and "hash chain intact" in audit.text


async def test_without_the_console_among_admin_identities_answers_are_refused(
    tmp_path: Path,
) -> None:
    async with mtls_stack(tmp_path, ["admin"]) as (url, pki, decision_addr):
        tls = TlsConfig(pki / "agent.crt", pki / "agent.key", pki / "ca.crt")
        async with aio_channel(decision_addr, tls=tls) as ch:
            stub: d_grpc.DecisionServiceAsyncStub = d_grpc.DecisionServiceStub(ch)  # type: ignore[assignment]
            args = struct_pb2.Struct()
            args.update({"file_path": "a.md", "content": "x"})
            asked = await stub.Decide(
                d_pb2.DecideRequest(call=c_pb2.ToolCall(
                    call_id="c1", tool_name="file_write", arguments=args, session_id="s1")),
                timeout=10,
            )  # fmt: skip
            async with httpx.AsyncClient(base_url=url) as client:
                csrf = await _signed_in(client)
                done = await client.post(
                    f"/approvals/{asked.approval_id}/resolve",
                    data={"csrf_token": csrf, "action": "allow_once"},
                )
                assert done.status_code == 303
                page = await client.get("/approvals")
                assert "Not answered" in page.text and "admin RPC" in page.text


async def test_a_console_that_is_not_the_delegate_cannot_name_a_person(tmp_path: Path) -> None:
    # An admin caller, but the delegate is someone else: its header does not make the
    # answer bob's; the resolver recorded is the console's own identity.
    async with mtls_stack(tmp_path, ["admin", "console"], ["mtls:other-ui"]) as (
        url, pki, decision_addr,
    ):  # fmt: skip
        tls = TlsConfig(pki / "agent.crt", pki / "agent.key", pki / "ca.crt")
        async with aio_channel(decision_addr, tls=tls) as ch:
            stub: d_grpc.DecisionServiceAsyncStub = d_grpc.DecisionServiceStub(ch)  # type: ignore[assignment]
            args = struct_pb2.Struct()
            args.update({"file_path": "a.md", "content": "x"})
            asked = await stub.Decide(
                d_pb2.DecideRequest(call=c_pb2.ToolCall(
                    call_id="c1", tool_name="file_write", arguments=args, session_id="s1")),
                timeout=10,
            )  # fmt: skip
            async with httpx.AsyncClient(base_url=url) as client:
                csrf = await _signed_in(client)
                await client.post(
                    f"/approvals/{asked.approval_id}/resolve",
                    data={"csrf_token": csrf, "action": "allow_once"},
                )
                answer = await stub.AwaitApproval(
                    d_pb2.AwaitApprovalRequest(approval_id=asked.approval_id), timeout=30
                )
                assert answer.approval.resolver == "mtls:console"
