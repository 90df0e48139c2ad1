"""The manifests' environment is what the services' settings classes accept: every
``STOCKADE_<SERVICE>_*`` variable names a real setting (a typo would be silently ignored,
since the settings ignore unknown variables), and each container's environment loads
into its settings class without a validation error."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from stockade.server.settings import ServerSettings, load_settings

from .conftest import OVERLAYS, STOCKADE_SERVICES, Manifest, env_of, main_container

SETTINGS_CLASSES = {
    "decision": "stockade.decision.settings:DecisionSettings",
    "executor": "stockade.executor.settings:ExecutorSettings",
    "audit": "stockade.audit.settings:AuditSettings",
    "agent": "stockade.agent.settings:AgentSettings",
    "papers": "stockade.papers.settings:PapersSettings",
}


def _settings_class(service: str) -> type[ServerSettings]:
    module, _, name = SETTINGS_CLASSES[service].partition(":")
    cls: object = getattr(importlib.import_module(module), name)
    assert isinstance(cls, type) and issubclass(cls, ServerSettings)
    return cls


def _accepted_names(cls: type[BaseSettings]) -> set[str]:
    """Every environment variable name the class reads."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for field_name, info in cls.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {str(choice).upper() for choice in alias.choices}
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(f"{prefix}{field_name}".upper())
    return names


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("service", STOCKADE_SERVICES)
def test_every_stockade_variable_is_a_setting(
    rendered: dict[str, list[Manifest]], overlay: str, service: str
) -> None:
    accepted = _accepted_names(_settings_class(service))
    env = env_of(main_container(rendered[overlay], service))
    for name in env:
        if name.startswith("STOCKADE_") or name.startswith("AGENT_"):
            assert name in accepted, f"{overlay}/{service}: {name} is not a setting"


def test_accepted_names_follow_aliases() -> None:
    """The helper sees the seed's AGENT_* aliases, so the check above is not too strict."""
    names = _accepted_names(_settings_class("decision"))
    assert {"AGENT_PERMISSION_MODE", "STOCKADE_DECISION_LISTEN"} <= names
    assert "STOCKADE_DECISION_NO_SUCH_THING" not in names


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("service", STOCKADE_SERVICES)
def test_container_environment_loads(
    rendered: dict[str, list[Manifest]],
    overlay: str,
    service: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name in list(os.environ):
        if name.startswith(("STOCKADE_", "AGENT_")):
            monkeypatch.delenv(name)
    env = env_of(main_container(rendered[overlay], service))
    for name, entry in env.items():
        if "valueFrom" in entry:
            value = "from-the-cluster"
        else:
            value = entry["value"]
        if name.endswith("_FILE"):
            # Settings check that certificate files exist: stand in for the mounted file.
            stand_in = tmp_path / Path(value).name
            stand_in.write_text("placeholder")
            value = str(stand_in)
        monkeypatch.setenv(name, value)
    settings = load_settings(_settings_class(service))
    up = service.upper()
    assert settings.listen == env[f"STOCKADE_{up}_LISTEN"]["value"]
    assert settings.grace_seconds == float(env[f"STOCKADE_{up}_GRACE_SECONDS"]["value"])
    tls = f"STOCKADE_{up}_TLS_CERT_FILE" in env
    assert settings.tls_enabled is tls
    if tls:
        assert settings.health_listen == env[f"STOCKADE_{up}_HEALTH_LISTEN"]["value"]
    else:
        assert settings.allow_plaintext is True
