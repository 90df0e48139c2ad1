"""Human output of the CLI: enums as words (`medium`, not `risk 2`), tables for lists,
and `--json` as proto-named JSON."""

from __future__ import annotations

import io
import json

from stockade.cli._render import enum_word, write_message
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2


def test_enum_values_are_words() -> None:
    risk = c_pb2.RiskLevel.DESCRIPTOR
    assert [enum_word(risk, v) for v in (1, 2, 3)] == ["low", "medium", "high"]
    assert enum_word(c_pb2.RuleEffect.DESCRIPTOR, c_pb2.RULE_EFFECT_DENY) == "deny"
    mode = c_pb2.PermissionMode.DESCRIPTOR
    assert enum_word(mode, c_pb2.PERMISSION_MODE_ACCEPT_EDITS) == "acceptEdits"
    assert enum_word(mode, c_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS) == "bypassPermissions"
    assert enum_word(d_pb2.ApprovalState.DESCRIPTOR, d_pb2.APPROVAL_STATE_PENDING) == "pending"
    assert enum_word(risk, 99) == "99"  # a value from a newer server is still shown


def test_human_form_is_a_table_of_words_and_json_is_proto_json() -> None:
    msg = d_pb2.ListRulesResponse(
        rules=[
            c_pb2.Rule(effect=c_pb2.RULE_EFFECT_DENY, pattern="run_bash(rm *)"),
            c_pb2.Rule(effect=c_pb2.RULE_EFFECT_ALLOW, pattern="read_file"),
        ],
        policy_version="v1",
    )
    human = io.StringIO()
    write_message(msg, human, as_json=False)
    lines = human.getvalue().splitlines()
    assert lines[0] == "rules:"
    assert lines[1].split() == ["EFFECT", "PATTERN"]
    assert lines[2].split() == ["deny", "run_bash(rm", "*)"]
    assert lines[-1] == "policy_version: v1"
    machine = io.StringIO()
    write_message(msg, machine, as_json=True)
    data = json.loads(machine.getvalue())
    assert data["rules"][0] == {"effect": "RULE_EFFECT_DENY", "pattern": "run_bash(rm *)"}


def test_an_explanation_reads_as_words() -> None:
    out = io.StringIO()
    write_message(
        c_pb2.Explanation(risk=c_pb2.RISK_LEVEL_MEDIUM, summary="Runs x"), out, as_json=False
    )
    assert "risk:    medium" in out.getvalue() and "2" not in out.getvalue()
