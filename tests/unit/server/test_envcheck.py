"""Strict configuration: unknown STOCKADE_* variables and unsupported OTEL_* values are
named at start-up, with the closest known name."""

from __future__ import annotations

import pytest

from stockade.server.envcheck import (
    CLIENT_VARIABLES,
    check_environment,
    known_variables,
    otel_problems,
    settings_classes,
    unknown_variable_problems,
)
from stockade.server.settings import ServerSettings, SettingsError


def test_every_service_settings_class_is_found() -> None:
    prefixes = {c.model_config.get("env_prefix") for c in settings_classes()}
    for service in ("DECISION", "EXECUTOR", "AUDIT", "AGENT", "PAPERS"):
        assert f"STOCKADE_{service}_" in prefixes


def test_known_names_cover_every_field_and_the_client_list() -> None:
    known = known_variables()
    assert "STOCKADE_DECISION_POLICY_FILE" in known
    assert "STOCKADE_AGENT_TOOL_PROVIDERS" in known
    assert "STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE" in known
    assert "STOCKADE_AUDIT_RETENTION_DAYS" in known
    assert set(CLIENT_VARIABLES) <= known
    # The shared base class's own prefix is not a service: STOCKADE_LISTEN is nobody's.
    assert "STOCKADE_LISTEN" not in known


def test_known_names_include_the_apps_own_classes() -> None:
    assert "STOCKADE_LISTEN" in known_variables([ServerSettings])


@pytest.mark.parametrize(
    ("typo", "fix"),
    [
        ("STOCKADE_DECISION_POLCY_FILE", "STOCKADE_DECISION_POLICY_FILE"),
        ("STOCKADE_DECISON_POLICY_FILE", "STOCKADE_DECISION_POLICY_FILE"),
        ("stockade_decision_polcy_file", "STOCKADE_DECISION_POLICY_FILE"),
        ("STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY", "STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE"),
        ("STOCKADE_ADMIN_TOKENS", "STOCKADE_ADMIN_TOKEN"),
        ("STOCKADE_AUDIT_RETENTION_DAY", "STOCKADE_AUDIT_RETENTION_DAYS"),
    ],
)
def test_a_typo_is_named_with_the_closest_name(typo: str, fix: str) -> None:
    problems = unknown_variable_problems({typo: "x"}, known_variables())
    assert problems == [f"unknown variable {typo}: did you mean {fix}?"]


def test_a_name_far_from_every_known_one_says_so() -> None:
    problems = unknown_variable_problems({"STOCKADE_ZZZ": "1"}, known_variables())
    assert len(problems) == 1 and "no Stockade service or command reads it" in problems[0]


def test_known_and_foreign_variables_pass() -> None:
    env = {
        "STOCKADE_DECISION_POLICY_FILE": "/p.toml",
        "STOCKADE_AGENT_DECISION_ADDR": "x:1",  # another service's, as in `serve all`
        "STOCKADE_DECISION_ADDR": "x:1",  # the CLI's
        "PATH": "/bin",
        "OTEL_TRACES_EXPORTER": "otlp,console",
        "OTEL_METRICS_EXPORTER": "none",
    }
    check_environment(env)


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("OTEL_TRACES_EXPORTER", "jaeger", "OTEL_TRACES_EXPORTER=jaeger is not supported"),
        ("OTEL_TRACES_EXPORTER", "otlp,zipkin", "OTEL_TRACES_EXPORTER=zipkin"),
        ("OTEL_METRICS_EXPORTER", "prometheus", "OTEL_METRICS_EXPORTER=prometheus"),
        ("OTEL_LOGS_EXPORTER", "syslog", "OTEL_LOGS_EXPORTER=syslog"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "only the OTLP/gRPC exporter"),
        ("OTEL_SDK_DISABLED", "yes", "must be true or false"),
    ],
)
def test_unsupported_otel_values_are_named(var: str, value: str, says: str) -> None:
    problems = otel_problems({var: value})
    assert len(problems) == 1 and says in problems[0]


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as err:
        check_environment({"STOCKADE_DECISION_POLCY_FILE": "x", "OTEL_TRACES_EXPORTER": "jaeger"})
    text = str(err.value)
    assert "STOCKADE_DECISION_POLICY_FILE" in text and "jaeger" in text
