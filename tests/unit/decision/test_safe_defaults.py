"""Safe defaults (DEC-3 rev 2, DEC-1): undeclared tools are never allowed by default; the
declared primary content field is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.contract.tools import EXECUTOR_TOOLS, SEED_TOOLS
from stockade.decision.engine import DecisionRequest, Facts, decide
from stockade.decision.facts import facts_from_inspection
from stockade.decision.modes import Mode
from stockade.decision.policy import compile_policy, load_policy, parse_policy_text
from stockade.decision.rules import Effect
from stockade.errors import InvalidArgument
from stockade.v1 import decision_service_pb2 as d_pb2

UNKNOWN_IN_MODE = {
    Mode.DEFAULT: Effect.ASK,
    Mode.ACCEPT_EDITS: Effect.ASK,
    Mode.DONT_ASK: Effect.DENY,
    Mode.PLAN: Effect.DENY,
    Mode.BYPASS_PERMISSIONS: Effect.ALLOW,  # the user accepted every ask in this mode
    Mode.AUTO: Effect.ASK,  # classifiable; without a classifier the ask stands
}


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("tool", ["web_fetch", "fetch", "rm_everything", "Read"])
def test_unknown_tools_in_every_mode(mode: Mode, tool: str) -> None:
    p = compile_policy(parse_policy_text(""), cwd="/ws")
    d = decide(p, DecisionRequest(tool, {"url": "http://x"}, mode=mode))
    assert d.verdict is UNKNOWN_IN_MODE[mode], d
    if mode is Mode.DEFAULT:
        assert "unknown tool" in d.reason and d.step == "P8"
    # subagents: DENY in every mode, bypass included
    sub = decide(p, DecisionRequest(tool, {}, mode=mode, from_subagent=True))
    assert sub.verdict is Effect.DENY, sub


@pytest.mark.parametrize("tool", sorted(set(SEED_TOOLS) - set(EXECUTOR_TOOLS)))
def test_declared_tools_keep_the_implicit_allow(tool: str) -> None:
    d = decide(compile_policy(parse_policy_text(""), cwd="/ws"), DecisionRequest(tool, {}))
    assert d.verdict is Effect.ALLOW and d.step == "P8"


def test_an_explicit_allow_rule_still_allows_an_undeclared_tool() -> None:
    p = compile_policy(parse_policy_text('[permissions]\nallow = ["web_fetch"]\n'), cwd="/ws")
    d = decide(p, DecisionRequest("web_fetch", {"url": "http://x"}))
    assert d.verdict is Effect.ALLOW and d.step == "P7"


def test_deny_on_the_declared_primary_field_matches() -> None:
    p = compile_policy(
        parse_policy_text('[permissions]\ndeny = ["search_papers(secret)"]\n'), cwd="/ws"
    )
    hit = decide(p, DecisionRequest("search_papers", {"query": "top secret plans"}))
    assert hit.verdict is Effect.DENY and hit.step == "P0"
    miss = decide(p, DecisionRequest("search_papers", {"query": "galaxies"}))
    assert miss.verdict is Effect.ALLOW


def test_allow_on_the_declared_primary_field_is_exact() -> None:
    p = compile_policy(
        parse_policy_text('[permissions]\nallow = ["rag_search(dark matter)"]\n'), cwd="/ws"
    )
    req = DecisionRequest("rag_search", {"query": "dark matter"}, mode=Mode.DONT_ASK)
    assert decide(p, req).step == "P7"


@pytest.mark.parametrize("tool", EXECUTOR_TOOLS)
def test_missing_or_empty_inspection_of_an_executor_tool_is_an_ask(tool: str) -> None:
    p = compile_policy(parse_policy_text(""), cwd="/ws")
    for insp in (None, d_pb2.ToolInspection()):
        facts = facts_from_inspection(tool, insp)
        assert facts.findings == ""
        d = decide(p, DecisionRequest(tool, {"file_path": "a", "command": "ls"}, facts=facts))
        assert d.verdict is Effect.ASK and "unknown" in d.reason


def test_a_caller_cannot_make_a_remote_tool_read_only_for_plan_mode() -> None:
    p = compile_policy(parse_policy_text(""), cwd="/ws")
    facts = facts_from_inspection("save_note", d_pb2.ToolInspection(read_only=True))
    assert facts.read_only is None
    d = decide(p, DecisionRequest("save_note", {"content": "x"}, mode=Mode.PLAN, facts=facts))
    assert d.verdict is Effect.DENY
    ok = decide(p, DecisionRequest("search_papers", {"query": "x"}, mode=Mode.PLAN, facts=Facts()))
    assert ok.verdict is Effect.ALLOW


def test_tools_declared_in_the_policy_file_get_the_implicit_allow(tmp_path: Path) -> None:
    text = "[tools.web_fetch]\nread_only = true\n[tools.post_note]\n"
    p = compile_policy(parse_policy_text(text), cwd="/ws")
    assert decide(p, DecisionRequest("web_fetch", {"url": "u"})).verdict is Effect.ALLOW
    assert decide(p, DecisionRequest("web_fetch", {}, mode=Mode.PLAN)).verdict is Effect.ALLOW
    assert decide(p, DecisionRequest("post_note", {})).verdict is Effect.ALLOW
    assert decide(p, DecisionRequest("post_note", {}, mode=Mode.PLAN)).verdict is Effect.DENY
    assert decide(p, DecisionRequest("other", {})).verdict is Effect.ASK
    assert p.version != compile_policy(parse_policy_text(""), cwd="/ws").version
    # a project file cannot declare tools (it could loosen plan mode or P8)
    managed, project = tmp_path / "m.toml", tmp_path / "p.toml"
    managed.write_text("")
    project.write_text(text)
    merged = load_policy(managed, {}, cwd="/ws", project_path=project)
    assert decide(merged, DecisionRequest("web_fetch", {})).verdict is Effect.ASK


@pytest.mark.parametrize(
    "text",
    [
        "[tools.run_bash]\nread_only = true\n",  # the seed's traits are fixed
        "[tools.x]\nread_only = 'yes'\n",
        "[tools.x]\nprimary = 'q'\n",
        "tools = 3\n",
        '[tools."bad name"]\n',
    ],
)
def test_bad_tool_declarations_are_refused(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_policy_text(text)
