"""The decision service over real gRPC (in-process server on port 0, real SQLite in tmp_path)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.contract.grant import load_public_key
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.executor.grants import GrantVerifier
from stockade.server import create_server, load_settings
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

TOKEN = "s3cret-admin"
ADMIN = (("authorization", f"Bearer {TOKEN}"),)
POLICY = """
[permissions]
deny  = ["run_bash(rm *)", "read_file(**/.env)"]
ask   = ["file_write"]
allow = ["run_bash(git status)", "run_bash(git log *)", "read_file"]
[limits]
denial_max_consecutive = 3
denial_max_total = 20
approval_timeout_seconds = {timeout}
"""


@asynccontextmanager
async def decision_server(
    tmp_path: Path, *, timeout: float = 30, policy: str | None = None
) -> AsyncIterator[d_grpc.DecisionServiceAsyncStub]:
    pfile = tmp_path / "policy.toml"
    pfile.write_text(policy if policy is not None else POLICY.format(timeout=timeout))
    settings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        policy_file=pfile,
        admin_tokens=[TOKEN],
        workspace="/w",
    )
    async with DecisionApp(settings).open() as regs:
        srv = await create_server("decision", settings, regs)
        try:
            async with grpc.aio.insecure_channel(srv.address) as ch:
                yield d_grpc.DecisionServiceStub(ch)
        finally:
            await srv.server.stop(None)


def call(tool: str, call_id: str = "c1", session: str = "s1", **args: Any) -> c_pb2.ToolCall:
    s = struct_pb2.Struct()
    s.update(args)
    return c_pb2.ToolCall(call_id=call_id, tool_name=tool, arguments=s, session_id=session)


def bash_request(command: str, subs: list[str], call_id: str = "c1") -> d_pb2.DecideRequest:
    return d_pb2.DecideRequest(
        call=call("run_bash", call_id, command=command),
        inspection=d_pb2.ToolInspection(
            tool_rules=[
                c_pb2.Rule(
                    effect=c_pb2.RULE_EFFECT_ASK,
                    pattern="run_bash",
                    source=c_pb2.RULE_SOURCE_TOOL,
                    reason="not read-only",
                )
            ],
            analysis=c_pb2.CommandAnalysis(sub_command_texts=subs, sub_commands=subs),
        ),
    )


async def test_decide_allow_carries_a_verifiable_grant(tmp_path: Path) -> None:
    async with decision_server(tmp_path) as stub:
        resp = await stub.Decide(bash_request("git status", ["git status"]))
        assert resp.verdict == c_pb2.VERDICT_ALLOW
        assert resp.winning_rule.pattern == "run_bash(git status)"
        assert resp.winning_rule.source == c_pb2.RULE_SOURCE_MANAGED
        assert [c.rule.source for c in resp.conflicts] == [c_pb2.RULE_SOURCE_TOOL]
        rules = await stub.ListRules(d_pb2.ListRulesRequest(include_policy=True))
        assert resp.policy_version == rules.policy_version and resp.policy_version
        verifier = GrantVerifier(load_public_key(tmp_path / "state" / "grant_public_key.pem"))
        verifier.verify(
            resp.grant.payload,
            resp.grant.signature,
            session_id="s1",
            call_id="c1",
            tool_name="run_bash",
            arguments={"command": "git status"},
        )


@pytest.mark.parametrize(
    ("command", "subs", "verdict"),
    [
        ("git status; rm -rf ~", ["git status", "rm -rf ~"], c_pb2.VERDICT_DENY),
        ("git log && curl x | sh", ["git log", "curl x", "sh"], c_pb2.VERDICT_ASK),
        ("git status && git log -3", ["git status", "git log -3"], c_pb2.VERDICT_ALLOW),
    ],
)
async def test_compound_commands_over_grpc(
    tmp_path: Path, command: str, subs: list[str], verdict: int
) -> None:
    """DEC-2 with the executor's analysis carried in DecideRequest.inspection."""
    async with decision_server(tmp_path) as stub:
        resp = await stub.Decide(bash_request(command, subs))
        assert resp.verdict == verdict, resp.reason
        assert resp.explanation.summary and resp.explanation.risk != c_pb2.RISK_LEVEL_UNSPECIFIED
        assert bool(resp.approval_id) == (verdict == c_pb2.VERDICT_ASK)
        assert resp.HasField("grant") == (verdict == c_pb2.VERDICT_ALLOW)


async def test_two_watchers_two_resolvers_first_answer_wins(tmp_path: Path) -> None:
    """DEC-8: many watchers see the approval; of two racing resolvers exactly one wins."""
    async with decision_server(tmp_path) as stub:
        watches: list[Any] = [stub.WatchApprovals(d_pb2.WatchApprovalsRequest()) for _ in range(2)]
        resp = await stub.Decide(d_pb2.DecideRequest(call=call("file_write", file_path="a.txt")))
        assert resp.verdict == c_pb2.VERDICT_ASK
        seen = [await w.read() for w in watches]
        assert all(s.approval.approval_id == resp.approval_id for s in seen)
        assert all(s.approval.state == d_pb2.APPROVAL_STATE_PENDING for s in seen)

        async def wait() -> d_pb2.AwaitApprovalResponse:
            req = d_pb2.AwaitApprovalRequest(approval_id=resp.approval_id)
            out: d_pb2.AwaitApprovalResponse = await stub.AwaitApproval(req)
            return out

        waiter = asyncio.create_task(wait())

        async def resolve(who: str, res: d_pb2.Resolution.ValueType) -> Any:
            req = d_pb2.ResolveApprovalRequest(
                approval_id=resp.approval_id, resolution=res, resolver=who
            )
            try:
                return await stub.ResolveApproval(req, metadata=ADMIN)
            except grpc.aio.AioRpcError as err:
                return err

        results = await asyncio.gather(
            resolve("ui", d_pb2.RESOLUTION_ALLOW_ONCE), resolve("bot", d_pb2.RESOLUTION_DENY)
        )
        winners = [r for r in results if isinstance(r, d_pb2.ResolveApprovalResponse)]
        losers = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(winners) == 1 and len(losers) == 1
        assert losers[0].code() == grpc.StatusCode.FAILED_PRECONDITION
        final = await waiter
        winner = winners[0].approval
        expected = (
            c_pb2.VERDICT_ALLOW
            if winner.state == d_pb2.APPROVAL_STATE_ALLOWED
            else c_pb2.VERDICT_DENY
        )
        assert final.verdict == expected and final.approval.resolver == winner.resolver
        assert final.HasField("grant") == (expected == c_pb2.VERDICT_ALLOW)
        updates = [await w.read() for w in watches]
        assert all(u.approval.state == winner.state for u in updates)
        for w in watches:
            w.cancel()


async def test_await_approval_times_out_to_deny(tmp_path: Path) -> None:
    async with decision_server(tmp_path, timeout=0.2) as stub:
        resp = await stub.Decide(d_pb2.DecideRequest(call=call("file_write", file_path="a")))
        out = await stub.AwaitApproval(d_pb2.AwaitApprovalRequest(approval_id=resp.approval_id))
        assert out.verdict == c_pb2.VERDICT_DENY
        assert out.approval.state == d_pb2.APPROVAL_STATE_EXPIRED
        assert not out.HasField("grant")
        late = d_pb2.ResolveApprovalRequest(
            approval_id=resp.approval_id, resolution=d_pb2.RESOLUTION_ALLOW_ONCE
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ResolveApproval(late, metadata=ADMIN)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        session = await stub.GetSession(d_pb2.GetSessionRequest(session_id="s1"))
        assert session.session.total_denials == 1  # a timeout counts as a denial


async def test_always_allow_is_scoped_listed_and_revocable(tmp_path: Path) -> None:
    async with decision_server(tmp_path) as stub:
        first = await stub.Decide(d_pb2.DecideRequest(call=call("file_write", file_path="a")))
        # file_write is an explicit ASK rule (P5), so use a tool-level ASK instead:
        req = bash_request("make test", ["make test"])
        asked = await stub.Decide(req)
        assert first.verdict == asked.verdict == c_pb2.VERDICT_ASK
        resolved = await stub.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=asked.approval_id,
                resolution=d_pb2.RESOLUTION_ALWAYS_ALLOW,
                scope=d_pb2.GrantScope(remaining_uses=1),
                resolver="alice",
            ),
            metadata=ADMIN,
        )
        grant = resolved.session_grant
        assert grant.rule.pattern == "run_bash(make test)" and grant.remaining_uses == 1
        listed = await stub.ListGrants(d_pb2.ListGrantsRequest(session_id="s1"))
        assert [g.grant_id for g in listed.grants] == [grant.grant_id]
        again = await stub.Decide(bash_request("make test", ["make test"], "c2"))
        assert again.verdict == c_pb2.VERDICT_ALLOW and again.winning_rule.rule_id
        # the one use is spent: the next identical call asks again, and the grant is gone
        third = await stub.Decide(bash_request("make test", ["make test"], "c3"))
        assert third.verdict == c_pb2.VERDICT_ASK
        assert not (await stub.ListGrants(d_pb2.ListGrantsRequest(session_id="s1"))).grants
        # an unlimited grant, then revoked
        resolved = await stub.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=third.approval_id, resolution=d_pb2.RESOLUTION_ALWAYS_ALLOW
            ),
            metadata=ADMIN,
        )
        other = await stub.Decide(bash_request("make test && rm -rf /", ["make test", "rm -rf /"]))
        assert other.verdict == c_pb2.VERDICT_DENY  # the grant is for that exact content only
        revoked = await stub.RevokeGrant(
            d_pb2.RevokeGrantRequest(grant_id=resolved.session_grant.grant_id), metadata=ADMIN
        )
        assert revoked.revoked
        after = await stub.Decide(bash_request("make test", ["make test"], "c9"))
        assert after.verdict == c_pb2.VERDICT_ASK


async def test_always_allow_on_an_explicit_ask_allows_once_and_says_why(tmp_path: Path) -> None:
    """An explicit ask rule outranks allow rules (DEC-3), so an "always allow" for the call
    it asks about could never take effect: the answer allows this call once, creates no
    grant, and says so; resolvers are told beforehand (always_allow_applies)."""
    async with decision_server(tmp_path) as stub:
        asked = await stub.Decide(d_pb2.DecideRequest(call=call("file_write", file_path="a")))
        assert asked.verdict == c_pb2.VERDICT_ASK and not asked.always_allow_applies
        tool_ask = await stub.Decide(bash_request("make test", ["make test"], "c2"))
        assert tool_ask.always_allow_applies  # a tool's own ask gives way to an allow rule
        watched = stub.WatchApprovals(d_pb2.WatchApprovalsRequest(session_id="s1"))
        pending = {}
        for _ in range(2):
            ap = (await watched.read()).approval
            pending[ap.approval_id] = ap.always_allow_applies
        watched.cancel()
        assert pending == {asked.approval_id: False, tool_ask.approval_id: True}
        resolved = await stub.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=asked.approval_id,
                resolution=d_pb2.RESOLUTION_ALWAYS_ALLOW,
                resolver="alice",
            ),
            metadata=ADMIN,
        )
        assert not resolved.HasField("session_grant")
        assert "allowed once" in resolved.note and "file_write" in resolved.note
        assert resolved.approval.state == d_pb2.APPROVAL_STATE_ALLOWED
        waited = await stub.AwaitApproval(d_pb2.AwaitApprovalRequest(approval_id=asked.approval_id))
        assert waited.verdict == c_pb2.VERDICT_ALLOW and waited.grant.signature
        assert not (await stub.ListGrants(d_pb2.ListGrantsRequest(session_id="s1"))).grants
        again = await stub.Decide(d_pb2.DecideRequest(call=call("file_write", "c3", file_path="a")))
        assert again.verdict == c_pb2.VERDICT_ASK  # the policy still asks, as it says


async def test_an_approval_carries_the_rule_that_asked_on_every_rpc(tmp_path: Path) -> None:
    """The resolver sees which rule asked, not only its reason: WatchApprovals,
    ResolveApproval and AwaitApproval all return it, as stored (it survives a restart)."""
    policy = (
        '[permissions]\nask = [{pattern = "file_write(**/deploy/**)", '
        'reason = "deploy files need a second pair of eyes"}]\n'
        "[limits]\napproval_timeout_seconds = 30\n"
    )
    async with decision_server(tmp_path, policy=policy) as stub:
        asked = await stub.Decide(
            d_pb2.DecideRequest(call=call("file_write", file_path="deploy/prod.yaml"))
        )
        assert asked.verdict == c_pb2.VERDICT_ASK
        tool_ask = await stub.Decide(bash_request("make test", ["make test"], "c2"))
        watched = stub.WatchApprovals(d_pb2.WatchApprovalsRequest(session_id="s1"))
        seen = {}
        for _ in range(2):
            ap = (await watched.read()).approval
            seen[ap.approval_id] = ap.rule
        watched.cancel()
    want_policy = c_pb2.Rule(
        effect=c_pb2.RULE_EFFECT_ASK,
        pattern="file_write(**/deploy/**)",
        source=c_pb2.RULE_SOURCE_MANAGED,
        reason="deploy files need a second pair of eyes",
    )
    assert seen[asked.approval_id] == want_policy == asked.winning_rule
    assert seen[tool_ask.approval_id].source == c_pb2.RULE_SOURCE_TOOL
    assert seen[tool_ask.approval_id].pattern == "run_bash"
    assert seen[tool_ask.approval_id].reason == "not read-only"
    # A restart reads the rule back from the database.
    async with decision_server(tmp_path, policy=policy) as stub:
        resolved = await stub.ResolveApproval(
            d_pb2.ResolveApprovalRequest(
                approval_id=asked.approval_id, resolution=d_pb2.RESOLUTION_DENY
            ),
            metadata=ADMIN,
        )
        assert resolved.approval.rule == want_policy
        waited = await stub.AwaitApproval(d_pb2.AwaitApprovalRequest(approval_id=asked.approval_id))
        assert waited.verdict == c_pb2.VERDICT_DENY and waited.approval.rule == want_policy


async def test_admin_rpcs_need_a_token_and_decide_does_not(tmp_path: Path) -> None:
    async with decision_server(tmp_path) as stub:
        await stub.CreateSession(d_pb2.CreateSessionRequest(session_id="s1"))
        add = d_pb2.AddRuleRequest(
            session_id="s1",
            rule=c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, pattern="read_file(*.md)"),
            request_id="r1",
        )
        for metadata in [(), (("authorization", "Bearer wrong"),), (("authorization", TOKEN),)]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.AddRule(add, metadata=metadata)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SetMode(
                d_pb2.SetModeRequest(session_id="s1", mode=c_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS)
            )
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        added = await stub.AddRule(add, metadata=ADMIN)
        retried = await stub.AddRule(add, metadata=ADMIN)
        assert added.rule.rule_id == retried.rule.rule_id  # idempotent by request_id
        assert added.rule.source == c_pb2.RULE_SOURCE_SESSION
        resp = await stub.Decide(d_pb2.DecideRequest(call=call("read_file", file_path="x.md")))
        assert resp.verdict == c_pb2.VERDICT_DENY
        assert resp.winning_rule.source == c_pb2.RULE_SOURCE_SESSION
        bad = d_pb2.AddRuleRequest(
            session_id="s1",
            rule=c_pb2.Rule(effect=c_pb2.RULE_EFFECT_ALLOW, pattern="run_bash(git *"),
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.AddRule(bad, metadata=ADMIN)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "run_bash(git *" in (err.value.details() or "")
        removed = await stub.RemoveRule(
            d_pb2.RemoveRuleRequest(session_id="s1", rule_id=added.rule.rule_id), metadata=ADMIN
        )
        assert removed.removed
        resp = await stub.Decide(d_pb2.DecideRequest(call=call("read_file", file_path="x.md")))
        assert resp.verdict == c_pb2.VERDICT_ALLOW


async def test_modes_and_denial_halt(tmp_path: Path) -> None:
    async with decision_server(tmp_path) as stub:
        await stub.CreateSession(
            d_pb2.CreateSessionRequest(session_id="s2", mode=c_pb2.PERMISSION_MODE_DONT_ASK),
            metadata=ADMIN,
        )
        halts = []
        for i in range(3):
            resp = await stub.Decide(
                d_pb2.DecideRequest(call=call("file_write", f"c{i}", "s2", file_path="a"))
            )
            assert resp.verdict == c_pb2.VERDICT_DENY
            assert resp.mode == c_pb2.PERMISSION_MODE_DONT_ASK
            halts.append(resp.halt)
        assert halts == [False, False, True]
        assert "3 denials in a row" in resp.halt_reason
        ok = await stub.Decide(
            d_pb2.DecideRequest(call=call("read_file", "c9", "s2", file_path="b"))
        )
        assert ok.verdict == c_pb2.VERDICT_ALLOW and not ok.halt
        session = (await stub.GetSession(d_pb2.GetSessionRequest(session_id="s2"))).session
        assert (session.consecutive_denials, session.total_denials) == (0, 3)


async def test_subagent_and_hook_signals(tmp_path: Path) -> None:
    async with decision_server(tmp_path) as stub:
        sub = call("file_write", file_path="a")
        sub.from_subagent = True
        resp = await stub.Decide(d_pb2.DecideRequest(call=sub))
        assert resp.verdict == c_pb2.VERDICT_DENY and not resp.approval_id
        assert "subagents cannot ask" in resp.reason
        block = d_pb2.HookSignal(kind=d_pb2.HookSignal.KIND_BLOCK, hook_name="g", message="no")
        resp = await stub.Decide(
            d_pb2.DecideRequest(call=call("read_file", file_path="a"), hook_signals=[block])
        )
        assert resp.verdict == c_pb2.VERDICT_DENY
        assert resp.winning_rule.source == c_pb2.RULE_SOURCE_HOOK


async def test_lint_policy_rpc(tmp_path: Path) -> None:
    async with decision_server(tmp_path) as stub:
        text = '[permissions]\ndeny = ["run_bash(git *)"]\nallow = ["run_bash(git status)"]\n'
        resp = await stub.LintPolicy(d_pb2.LintPolicyRequest(policy_text=text))
        [finding] = resp.findings
        assert finding.rule.pattern == "run_bash(git status)"
        assert finding.shadowed_by.pattern == "run_bash(git *)" and finding.fix
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.LintPolicy(d_pb2.LintPolicyRequest(policy_text="[permissions]\ndeny=['(']"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        loaded = await stub.LintPolicy(d_pb2.LintPolicyRequest())
        assert list(loaded.findings) == []
        # Patterns that never match are findings too, without a shadowing rule.
        text = '[permissions]\ndeny = ["Bash(rm *)"]\nallow = ["run_bash(git (status|log))"]\n'
        never = await stub.LintPolicy(d_pb2.LintPolicyRequest(policy_text=text))
        assert [f.rule.pattern for f in never.findings] == [
            "Bash(rm *)",
            "run_bash(git (status|log))",
        ]
        assert not never.findings[0].HasField("shadowed_by")
        assert "run_bash(rm *)" in never.findings[0].fix


async def test_bad_requests_are_invalid_argument(tmp_path: Path) -> None:
    async with decision_server(tmp_path) as stub:
        for req in [
            d_pb2.DecideRequest(call=call("", file_path="a")),
            d_pb2.DecideRequest(call=call("read_file", session="")),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Decide(req)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetSession(d_pb2.GetSessionRequest(session_id="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.AwaitApproval(d_pb2.AwaitApprovalRequest(approval_id="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
