"""What pages show: secrets masked in arguments and audit rows, whatever their form."""

from __future__ import annotations

import json

from google.protobuf import struct_pb2

from stockade.console.views import MAX_SHOWN_CHARS, approval_view, audit_row_view, shown_arguments
from stockade.contract.redaction import redact_arguments
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

SECRETS = [
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "a" * 36,
    "xoxb-1234567890-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXZhbHVl",
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----",
]


def test_arguments_are_masked_by_pattern_and_by_name() -> None:
    args = {
        "command": f"curl -H 'Authorization: Bearer {'t' * 30}' https://x",
        "password": "hunter2-is-not-a-pattern",
        "API_KEY": "plainlookingvalue",
        "nested": {"client_secret": "abc", "list": [*SECRETS, {"token": "zzz"}]},
        "harmless": "hello",
        "empty_token": "",
    }
    shown = shown_arguments(args)
    for secret in [*SECRETS, "hunter2-is-not-a-pattern", "plainlookingvalue", "t" * 30, "zzz"]:
        assert secret not in shown, secret
    data = json.loads(shown)
    assert data["harmless"] == "hello" and data["empty_token"] == ""
    assert data["password"] == "[REDACTED:by_name]"


def test_long_arguments_are_cut_with_a_marker() -> None:
    shown = shown_arguments({"content": "x" * (MAX_SHOWN_CHARS * 2)})
    assert len(shown) < MAX_SHOWN_CHARS + 100 and "more characters" in shown


def test_redact_arguments_keeps_shapes() -> None:
    assert redact_arguments([1, True, None, {"a": 2.5}]) == [1, True, None, {"a": 2.5}]


def test_approval_view_masks_arguments_and_reason() -> None:
    args = struct_pb2.Struct()
    args.update({"command": "export AWS_SECRET_ACCESS_KEY=" + "A" * 40, "token": "abc"})
    view = approval_view(
        d_pb2.Approval(
            approval_id="appr-1",
            session_id="s",
            call=c_pb2.ToolCall(tool_name="run_bash", arguments=args, agent_name=""),
            reason="asks because password=supersecretvalue",
            state=d_pb2.APPROVAL_STATE_PENDING,
        )
    )
    assert "A" * 40 not in view.arguments and "abc" not in view.arguments
    assert "supersecretvalue" not in view.reason
    assert view.pending and view.agent_name == "lead"


def test_approval_view_shows_the_asking_rule_masked_and_none_when_unknown() -> None:
    rule = c_pb2.Rule(
        effect=c_pb2.RULE_EFFECT_ASK,
        pattern="run_bash(*ghp_" + "b" * 36 + "*)",
        source=c_pb2.RULE_SOURCE_SESSION,
        reason="token in use: password=supersecretvalue",
        rule_id="rule-7",
    )
    with_rule = approval_view(d_pb2.Approval(approval_id="a", reason="r", rule=rule))
    assert with_rule.rule is not None
    assert (with_rule.rule.effect, with_rule.rule.source, with_rule.rule.rule_id) == (
        "ask",
        "session",
        "rule-7",
    )
    assert "b" * 36 not in with_rule.rule.pattern and "run_bash(" in with_rule.rule.pattern
    assert "supersecretvalue" not in with_rule.rule.reason
    assert approval_view(d_pb2.Approval(approval_id="a", reason="r")).rule is None


def test_audit_row_shows_the_whole_decision_masked() -> None:
    event = a_pb2.AuditEvent(
        session_id="s",
        tool_name="run_bash",
        status=a_pb2.AUDIT_STATUS_DENIED,
        verdict=c_pb2.VERDICT_DENY,
        winning_rule=c_pb2.Rule(pattern="run_bash(rm *)", source=c_pb2.RULE_SOURCE_MANAGED),
        conflicts=[
            d_pb2.Conflict(
                rule=c_pb2.Rule(
                    effect=c_pb2.RULE_EFFECT_ASK, pattern="run_bash", source=c_pb2.RULE_SOURCE_TOOL
                ),
                note="DENY (P0) wins over ASK",
            )
        ],
        policy_version="pv-123",
        output_preview="token=" + "q" * 20,
    )
    event.arguments.update({"command": "echo " + SECRETS[0]})
    row = audit_row_view(a_pb2.AuditRecord(sequence=7, row_hash="ab" * 32, event=event))
    assert row.status == "denied" and row.verdict == "deny" and row.rule_source == "managed"
    assert row.rule == "run_bash(rm *)"
    assert row.conflicts[0].rule == "ask run_bash (tool)"
    assert row.conflicts[0].note == "DENY (P0) wins over ASK"
    assert row.policy_version == "pv-123"
    assert SECRETS[0] not in row.arguments and "q" * 20 not in row.output_preview


def test_audit_rows_with_odd_conflict_logs_still_render() -> None:
    for raw in ("not json", json.dumps({"a": 1}), json.dumps(["plain", 3])):
        row = audit_row_view(a_pb2.AuditRecord(event=a_pb2.AuditEvent(conflict_log=raw)))
        assert row.conflicts == ()
    cut = '{"$stockade_cut":{"reason":"longer than 65536 characters"}}'
    row = audit_row_view(a_pb2.AuditRecord(event=a_pb2.AuditEvent(conflict_log=cut)))
    assert [c.rule for c in row.conflicts] == ["(too many to keep: cut)"]
    # An old server's row without typed arguments still shows them masked, as text.
    old = a_pb2.AuditEvent(arguments_json=json.dumps({"command": "echo " + SECRETS[0]}))
    assert SECRETS[0] not in audit_row_view(a_pb2.AuditRecord(event=old)).arguments


def test_the_approver_comes_from_the_decision_records_settlement() -> None:
    settled = json.dumps({"by": "approval", "approval": "appr-1", "resolver": "token:console-ui"})
    row = audit_row_view(a_pb2.AuditRecord(event=a_pb2.AuditEvent(output_preview=settled)))
    assert row.approver == "token:console-ui"  # an identity, not masked as a token
    via = json.dumps({"by": "approval", "resolver": "alice@example.com", "via": "mtls:console"})
    row = audit_row_view(a_pb2.AuditRecord(event=a_pb2.AuditEvent(output_preview=via)))
    assert row.approver == "alice@example.com via mtls:console"
    for preview in ("", "plain output", "{not json", json.dumps(["x"]), '{"resolver": 5}'):
        row = audit_row_view(a_pb2.AuditRecord(event=a_pb2.AuditEvent(output_preview=preview)))
        assert row.approver == "", preview
