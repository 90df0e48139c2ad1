"""Shadow mode (issue #15 item 3): a candidate policy decided beside the live one on
real Decide traffic, never enforced; each difference logged, counted and noted on the
decision (the agent writes it into the call's audit row)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from stockade.decision.app import DecisionApp
from stockade.decision.core import CallInput, DecisionCore
from stockade.decision.engine import Facts
from stockade.decision.grants import GrantSigner, generate_keypair, load_private_key
from stockade.decision.policy import PolicyStore
from stockade.decision.rules import Effect
from stockade.decision.settings import DecisionSettings
from stockade.decision.shadow import ShadowPolicy
from stockade.decision.store import SQLiteDecisionStore
from stockade.server import create_server, load_settings
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

LIVE = '[permissions]\nallow = ["read_file", "run_bash(git status)"]\n'
CANDIDATE = (
    '[permissions]\ndeny = ["read_file(**/.env)"]\nallow = ["read_file", "run_bash(git status)"]\n'
)


def _call(tool: str, call_id: str, **args: Any) -> c_pb2.ToolCall:
    s = struct_pb2.Struct()
    s.update(args)
    return c_pb2.ToolCall(call_id=call_id, tool_name=tool, arguments=s, session_id="s1")


async def test_differences_are_noted_but_never_enforced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stockade.decision")
    live, candidate = tmp_path / "live.toml", tmp_path / "candidate.toml"
    live.write_text(LIVE)
    candidate.write_text(CANDIDATE)
    settings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        policy_file=live,
        shadow_policy_file=candidate,
        workspace="/w",
    )
    async with DecisionApp(settings).open() as regs:
        srv = await create_server("decision", settings, regs)
        try:
            async with grpc.aio.insecure_channel(srv.address) as ch:
                stub = d_grpc.DecisionServiceStub(ch)
                secret = await stub.Decide(
                    d_pb2.DecideRequest(call=_call("read_file", "c1", file_path="app/.env"))
                )
                same = await stub.Decide(
                    d_pb2.DecideRequest(call=_call("read_file", "c2", file_path="a.txt"))
                )
        finally:
            await srv.server.stop(None)
    # Live policy enforced: the candidate's deny does not take effect ...
    assert secret.verdict == c_pb2.VERDICT_ALLOW and secret.HasField("grant")
    # ... but the decision carries the difference, which the agent records in audit.
    notes = [c.note for c in secret.conflicts if c.note.startswith("shadow policy")]
    assert len(notes) == 1
    assert "would deny (live allow)" in notes[0] and "read_file(**/.env)" in notes[0]
    assert not [c for c in same.conflicts if c.note.startswith("shadow policy")]
    # The agent copies a decision's conflicts into the call's audit row, typed, and the
    # audit service stores them in the row's conflict log.
    from stockade.audit.convert import conflicts_json

    assert "would deny (live allow)" in conflicts_json(secret.conflicts)
    lines = [r.getMessage() for r in caplog.records if "shadow difference" in r.getMessage()]
    assert len(lines) == 1 and "live allow" in lines[0] and "candidate deny" in lines[0]
    assert any("shadow mode: candidate policy" in r.getMessage() for r in caplog.records)


async def test_differences_are_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # the suite disables the SDK
    live, candidate = tmp_path / "live.toml", tmp_path / "candidate.toml"
    live.write_text(LIVE)
    candidate.write_text(CANDIDATE)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    shadow = ShadowPolicy(PolicyStore(candidate, cwd="/w"), provider.get_meter("test"))
    generate_keypair(tmp_path / "keys")
    signer = GrantSigner(load_private_key(tmp_path / "keys" / "grant_signing_key.pem"))
    store = await SQLiteDecisionStore.open(tmp_path / "d.db")
    try:
        core = DecisionCore(PolicyStore(live, cwd="/w"), store, signer, shadow=shadow)
        for i, path in enumerate(["x/.env", "a.txt", "b/.env"]):
            out = await core.decide(
                CallInput(
                    session_id="s1",
                    call_id=f"c{i}",
                    tool_name="read_file",
                    arguments={"file_path": path},
                ),
                Facts(),
            )
            assert out.decision.verdict is Effect.ALLOW
    finally:
        await store.close()
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        m.name: list(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    [diff] = points["stockade.decision.shadow.differences"]
    assert getattr(diff, "value", None) == 2
    assert dict(getattr(diff, "attributes", {})) == {"live": "allow", "candidate": "deny"}
    assert sum(getattr(p, "value", 0) for p in points["stockade.decision.shadow.decisions"]) == 3
    provider.shutdown()


async def test_a_different_deciding_rule_is_a_difference_too(tmp_path: Path) -> None:
    live, candidate = tmp_path / "live.toml", tmp_path / "candidate.toml"
    live.write_text('[permissions]\nallow = ["read_file"]\n')
    candidate.write_text('[permissions]\nallow = ["read_file(**/*.txt)"]\n')
    generate_keypair(tmp_path / "keys")
    signer = GrantSigner(load_private_key(tmp_path / "keys" / "grant_signing_key.pem"))
    store = await SQLiteDecisionStore.open(tmp_path / "d.db")
    try:
        core = DecisionCore(
            PolicyStore(live, cwd="/w"),
            store,
            signer,
            shadow=ShadowPolicy(PolicyStore(candidate, cwd="/w")),
        )
        out = await core.decide(
            CallInput(
                session_id="s1",
                call_id="c1",
                tool_name="read_file",
                arguments={"file_path": "a.txt"},
            ),
            Facts(),
        )
    finally:
        await store.close()
    assert out.decision.verdict is Effect.ALLOW
    [note] = [c.note for c in out.decision.conflicts if c.note.startswith("shadow policy")]
    assert "would allow (live allow) by 'read_file(**/*.txt)'" in note
