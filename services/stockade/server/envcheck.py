"""Strict start-up configuration: every ``STOCKADE_*`` variable must be one someone reads.

pydantic-settings ignores variables it does not know, so a typo such as
``STOCKADE_DECISION_POLCY_FILE`` used to start the decision service with no policy at all.
At start-up every ``STOCKADE_*`` variable in the environment is checked against the
names every Stockade settings class reads (all services: ``stockade serve all`` and a
shared ``.env`` file put several services' variables in one process) plus the variables
the command line and the local stack read (``CLIENT_VARIABLES``); an unknown one stops
the service with the closest known name. Unsupported ``OTEL_*`` exporter choices are
refused the same way instead of being ignored.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic_settings import BaseSettings

from stockade.server.settings import ServerSettings, SettingsError

CLIENT_VARIABLES: Mapping[str, str] = {
    "STOCKADE_DECISION_ADDR": "CLI: address of the decision service",
    "STOCKADE_EXECUTOR_ADDR": "CLI: address of the executor service",
    "STOCKADE_AUDIT_ADDR": "CLI: address of the audit service",
    "STOCKADE_AGENT_ADDR": "CLI: address of the agent service",
    "STOCKADE_ADMIN_TOKEN": "CLI: bearer token for the decision service's admin RPCs",
    "STOCKADE_TLS_CERT": "CLI: client certificate (PEM) for mTLS",
    "STOCKADE_TLS_KEY": "CLI: client private key (PEM) for mTLS",
    "STOCKADE_TLS_CA": "CLI: CA bundle (PEM) the servers' certificates chain to",
    "STOCKADE_TLS_SERVER_NAME": "CLI: name checked against the server certificate",
    "STOCKADE_READY_FILE": "servers: write the bound addresses here once serving",
}
"""Variables read outside the settings classes (command line, local stack), documented."""

SUPPORTED_EXPORTERS: Mapping[str, frozenset[str]] = {
    "OTEL_TRACES_EXPORTER": frozenset({"otlp", "console", "none"}),
    "OTEL_METRICS_EXPORTER": frozenset({"otlp", "console", "none"}),
    # Logs go to stderr as JSON lines; the OTel logs signal carries only the audit
    # service's signed chain heads (STORE-4), not the process's log lines.
    "OTEL_LOGS_EXPORTER": frozenset({"otlp", "console", "none"}),
}
SUPPORTED_OTLP_PROTOCOLS = frozenset({"grpc"})
"""Only the OTLP/gRPC exporter is installed (opentelemetry-exporter-otlp-proto-grpc)."""

_OTLP_PROTOCOL_VARS = (
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
)


def settings_classes() -> list[type[BaseSettings]]:
    """Every service's settings class: each ``stockade.<service>.settings`` module is
    imported, so a service added later is known without editing a list here."""
    import stockade

    # A folder scan, not pkgutil: some service packages are PEP 420 namespace folders
    # (no __init__.py), which pkgutil.iter_modules does not list.
    for root in stockade.__path__:
        for module in sorted(Path(root).glob("*/settings.py")):
            if module.parent.name.isidentifier():
                importlib.import_module(f"stockade.{module.parent.name}.settings")
    found: list[type[BaseSettings]] = []
    # Every pydantic-settings class, not only ServerSettings subclasses: a service may
    # keep part of its settings in a class of its own.
    todo = list(BaseSettings.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def _names_of(cls: type[BaseSettings]) -> set[str]:
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    names: set[str] = set()
    for field_name, field in cls.model_fields.items():
        names.add(f"{prefix}{field_name}".upper())
        alias = field.validation_alias
        choices = getattr(alias, "choices", None)
        for a in choices if choices is not None else [alias]:
            if isinstance(a, str):
                names.add(a.upper())
    return names


def known_variables(extra: Iterable[type[ServerSettings]] = ()) -> set[str]:
    """Every ``STOCKADE_*`` name some part of Stockade reads (plus those of ``extra``,
    the settings classes of the apps being served, whatever their prefix)."""
    known = set(CLIENT_VARIABLES)
    for cls in extra:
        known |= {n for n in _names_of(cls) if n.startswith("STOCKADE_")}
    for found in settings_classes():
        # The base class's own prefix (``STOCKADE_``) is never used to load settings.
        prefix = str(found.model_config.get("env_prefix") or "").upper()
        if prefix.startswith("STOCKADE_") and prefix != "STOCKADE_":
            known |= {n for n in _names_of(found) if n.startswith("STOCKADE_")}
    return known


def unknown_variable_problems(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """One line per ``STOCKADE_*`` variable nobody reads, with the closest known name."""
    known_list = sorted(set(known))
    problems = []
    for var in sorted(environ):
        upper = var.upper()
        if not upper.startswith("STOCKADE_") or upper in known_list:
            continue
        close = difflib.get_close_matches(upper, known_list, n=1, cutoff=0.75)
        hint = (
            f"did you mean {close[0]}?"
            if close
            else "no Stockade service or command reads it (README, Configuration)"
        )
        problems.append(f"unknown variable {var}: {hint}")
    return problems


def otel_problems(environ: Mapping[str, str]) -> list[str]:
    """One line per ``OTEL_*`` exporter choice this installation cannot honour."""
    problems = []
    for var, supported in SUPPORTED_EXPORTERS.items():
        raw = environ.get(var, "")
        for value in (v.strip().lower() for v in raw.split(",")):
            if value and value not in supported:
                problems.append(
                    f"{var}={value} is not supported (use {', '.join(sorted(supported))})"
                )
    for var in _OTLP_PROTOCOL_VARS:
        value = environ.get(var, "").strip().lower()
        if value and value not in SUPPORTED_OTLP_PROTOCOLS:
            problems.append(
                f"{var}={value} is not supported: only the OTLP/gRPC exporter is installed "
                "(use grpc, or leave it unset)"
            )
    sdk = environ.get("OTEL_SDK_DISABLED", "").strip().lower()
    if sdk and sdk not in {"true", "false"}:
        problems.append(f"OTEL_SDK_DISABLED={sdk} must be true or false")
    return problems


def check_environment(
    environ: Mapping[str, str], extra: Iterable[type[ServerSettings]] = ()
) -> None:
    """Raise ``SettingsError`` naming every unknown ``STOCKADE_*`` variable and every
    unsupported ``OTEL_*`` value (all at once, so one restart fixes them all)."""
    problems = unknown_variable_problems(environ, known_variables(extra)) + otel_problems(environ)
    if problems:
        raise SettingsError("invalid environment:\n" + "\n".join(f"  {p}" for p in problems))
