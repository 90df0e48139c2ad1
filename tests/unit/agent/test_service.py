"""AgentApp wiring: configured tools, providers and settings validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.agent.app import AgentApp
from stockade.agent.registry import Location, ToolSpec, offered_registry
from stockade.agent.settings import AgentSettings
from stockade.errors import InvalidArgument
from stockade.llm.openai import OpenAIProvider
from stockade.server import SettingsError, load_settings


def test_configured_tools_join_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "STOCKADE_AGENT_TOOLS",
        '[{"name": "lookup_orbit", "provider": "127.0.0.1:7000", "read_only": true,'
        ' "concurrency_safe": true, "interrupt_behavior": "cancel"}]',
    )
    app = AgentApp(load_settings(AgentSettings))
    registry = app.registry()
    spec = registry.get("lookup_orbit")
    assert spec.location is Location.REMOTE and spec.provider == "127.0.0.1:7000"
    assert "search_papers" not in registry  # product tools are not defaults
    # A remote tool nobody serves is never offered.
    registry.register(ToolSpec(name="unserved", description="", location=Location.REMOTE))
    offered = offered_registry(registry).names()
    assert "lookup_orbit" in offered
    assert "unserved" not in offered
    assert "load_skill" not in offered  # a built-in that needs STOCKADE_AGENT_SKILLS_DIR
    assert {"read_file", "run_bash", "subagent", "ask_user"} <= set(offered)


async def test_openai_provider_is_shared_and_scripts_are_refused(tmp_path: Path) -> None:
    app = AgentApp(
        AgentSettings(
            provider="openai", openai_base_url="http://127.0.0.1:1/v1", state_dir=tmp_path
        )
    )
    first = app.provider_for("")
    assert isinstance(first, OpenAIProvider) and app.provider_for("") is first
    with pytest.raises(InvalidArgument, match="scripted provider only"):
        app.provider_for("demo")
    await first.aclose()


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("STOCKADE_AGENT_TOKEN_HARD_LIMIT", "10", "token_soft_limit"),
        (
            "STOCKADE_AGENT_REMOTE_HOOKS",
            '[{"address": "x:1", "failure_policy": "maybe"}]',
            "REMOTE_HOOKS.0.FAILURE_POLICY",
        ),
        (
            "STOCKADE_AGENT_REMOTE_HOOKS",
            '[{"address": "x:1", "timeout_s": 0}]',
            "REMOTE_HOOKS.0.TIMEOUT_S",
        ),
    ],
)
def test_bad_settings_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=fragment):
        load_settings(AgentSettings)
