"""``stockade serve {decision|executor|audit|agent|papers|console|all}``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from stockade.server import ServiceApp, SettingsError, load_settings, serve

SERVICES = ("decision", "executor", "audit", "agent")
EXTRAS = ("papers", "console")


def build_app(name: str, **overrides: Any) -> ServiceApp:
    """The ServiceApp for ``name`` with settings from the environment (and ``overrides``)."""
    if name == "decision":
        from stockade.decision.app import DecisionApp
        from stockade.decision.settings import DecisionSettings

        return DecisionApp(load_settings(DecisionSettings, **overrides))
    if name == "executor":
        from stockade.executor.app import ExecutorApp
        from stockade.executor.settings import ExecutorSettings

        return ExecutorApp(load_settings(ExecutorSettings, **overrides))
    if name == "audit":
        from stockade.audit.app import AuditApp
        from stockade.audit.settings import AuditSettings

        return AuditApp(load_settings(AuditSettings))
    if name == "papers":
        from stockade.papers.app import PapersApp
        from stockade.papers.settings import PapersSettings

        return PapersApp(load_settings(PapersSettings))
    from stockade.agent.app import AgentApp
    from stockade.agent.settings import AgentSettings

    return AgentApp(load_settings(AgentSettings))


def _write_public_half(private_key: Path, public: Path) -> None:
    """Write the public half of the Ed25519 signing key ``private_key`` to ``public``."""
    from cryptography.hazmat.primitives import serialization

    from stockade.decision.grants import load_private_key
    from stockade.errors import StockadeError

    try:
        key = load_private_key(private_key)
    except StockadeError as exc:
        raise SettingsError(f"STOCKADE_DECISION_GRANT_PRIVATE_KEY_FILE: {exc.message}") from None
    public.parent.mkdir(parents=True, exist_ok=True)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _all_apps() -> list[ServiceApp]:
    """The four apps of ``serve all``, with the grant keys wired between them.

    The executor accepts only calls with a grant the decision service signed (DEC-12).
    When neither key is configured, the decision service's key pair in its state folder
    is used and the executor is given its public half; a configured private key without
    a configured public key gives the executor that key's public half.
    """
    from stockade.decision.grants import PUBLIC_KEY_NAME, generate_keypair
    from stockade.decision.settings import DecisionSettings
    from stockade.executor.settings import ExecutorSettings

    decision = load_settings(DecisionSettings)
    executor = load_settings(ExecutorSettings)
    overrides: dict[str, Any] = {}
    if executor.grant_public_key_file is None and not executor.allow_ungranted:
        state = Path(decision.state_dir)
        if decision.grant_private_key_file is not None:
            # The configured signing key's public half, derived (never guessed).
            public = state / "grant_public_key.from-configured-key.pem"
            _write_public_half(decision.grant_private_key_file, public)
        else:
            public = state / PUBLIC_KEY_NAME
            if not public.is_file():
                generate_keypair(state)
        overrides["grant_public_key_file"] = public
    return [build_app(n, **overrides) if n == "executor" else build_app(n) for n in SERVICES]


def run_console() -> int:
    """Serve the approval console (an HTTP service, not a gRPC one)."""
    from stockade.console.server import run as run_http
    from stockade.console.settings import ConsoleSettings

    try:
        settings = load_settings(ConsoleSettings)
    except SettingsError as exc:
        print(f"stockade serve: {exc}", file=sys.stderr)
        return 2
    return run_http(settings)


def run(args: argparse.Namespace) -> int:
    """Serve one service, or all four in one process (the agent last, stopped first)."""
    if args.service == "console":
        return run_console()
    from stockade.server.envcheck import check_environment

    try:
        check_environment(os.environ)
        apps = _all_apps() if args.service == "all" else [build_app(args.service)]
    except SettingsError as exc:
        print(f"stockade serve: {exc}", file=sys.stderr)
        return 2
    return serve(apps, log_level=apps[0].settings.log_level)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve``."""
    p = sub.add_parser(
        "serve",
        help="run a service until SIGTERM/SIGINT",
        description=(
            "Run one Stockade service, or all four in one process ('papers' is the example "
            "tool provider, 'console' the approval web console). Settings come from "
            "STOCKADE_<SERVICE>_* environment variables (see README, Configuration)."
        ),
    )
    p.add_argument("service", choices=[*SERVICES, *EXTRAS, "all"], help="which service to run")
    p.set_defaults(func=run)
