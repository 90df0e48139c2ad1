"""Shared server plumbing for every Stockade service: settings, telemetry, interceptors,
error mapping, server construction and the signal-driven lifecycle."""

from stockade.server.app import (
    LIVENESS,
    READINESS,
    Registration,
    ServiceApp,
    ServingState,
    create_server,
    run_apps,
    serve,
)
from stockade.server.settings import ServerSettings, SettingsError, load_settings

__all__ = [
    "LIVENESS",
    "READINESS",
    "Registration",
    "ServerSettings",
    "ServiceApp",
    "ServingState",
    "SettingsError",
    "create_server",
    "load_settings",
    "run_apps",
    "serve",
]
