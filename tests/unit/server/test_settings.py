"""Settings are validated at start-up with messages that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.agent.settings import AgentSettings
from stockade.decision.settings import DecisionSettings
from stockade.executor.settings import ExecutorSettings
from stockade.server.settings import ServerSettings, SettingsError, load_settings


def test_defaults_are_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STOCKADE_EXECUTOR_LISTEN", raising=False)
    assert load_settings(ExecutorSettings).listen == "127.0.0.1:50052"


@pytest.mark.parametrize(
    "value", ["nonsense", "127.0.0.1", "host:99999", "unix://relative/path", ":50051"]
)
def test_bad_listen_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("STOCKADE_DECISION_LISTEN", value)
    with pytest.raises(SettingsError) as info:
        load_settings(DecisionSettings)
    assert "STOCKADE_DECISION_LISTEN" in str(info.value)


@pytest.mark.parametrize("value", ["0.0.0.0:50051", "[::1]:1", "unix:///run/x.sock", "a-b.c:0"])
def test_good_listen_accepted(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("STOCKADE_DECISION_LISTEN", value)
    assert load_settings(DecisionSettings).listen == value


def test_bad_number_is_reported_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOCKADE_AGENT_MAX_STEPS", "0")
    monkeypatch.setenv("STOCKADE_AGENT_PROVIDER", "gpt")
    with pytest.raises(SettingsError) as info:
        load_settings(AgentSettings)
    text = str(info.value)
    assert "STOCKADE_AGENT_MAX_STEPS" in text and "between 1 and 1000" in text
    assert "STOCKADE_AGENT_PROVIDER" in text and "scripted" in text


def test_tls_files_must_come_together(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(SettingsError, match="must be set together"):
        load_settings(ServerSettings, tls_cert_file=cert)


def test_tls_file_must_exist(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(
            ServerSettings, tls_cert_file=missing, tls_key_file=missing, tls_ca_file=missing
        )


def test_seed_variable_names_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_PERMISSIONS_DENY", "run_bash(rm *), read_file(a,b)")
    monkeypatch.setenv("AGENT_PERMISSION_MODE", "plan")
    s = load_settings(DecisionSettings)
    assert s.deny == ["run_bash(rm *)", "read_file(a,b)"]
    assert s.default_mode == "plan"


def test_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_PERMISSION_MODE", "yolo")
    with pytest.raises(SettingsError, match="not one of"):
        load_settings(DecisionSettings)


def test_settings_are_frozen() -> None:
    s = load_settings(ExecutorSettings)
    with pytest.raises(Exception, match="frozen"):
        s.network_enabled = True  # type: ignore[misc]
