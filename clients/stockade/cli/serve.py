"""``stockade serve {decision|executor|audit|agent|all}``."""

from __future__ import annotations

import argparse
import sys

from stockade.server import ServiceApp, SettingsError, load_settings, serve

SERVICES = ("decision", "executor", "audit", "agent")
EXTRAS = ("papers",)


def build_app(name: str) -> ServiceApp:
    """The ServiceApp for ``name`` with settings from the environment."""
    if name == "decision":
        from stockade.decision.service import DecisionApp
        from stockade.decision.settings import DecisionSettings

        return DecisionApp(load_settings(DecisionSettings))
    if name == "executor":
        from stockade.executor.service import ExecutorApp
        from stockade.executor.settings import ExecutorSettings

        return ExecutorApp(load_settings(ExecutorSettings))
    if name == "audit":
        from stockade.audit.service import AuditApp
        from stockade.audit.settings import AuditSettings

        return AuditApp(load_settings(AuditSettings))
    if name == "papers":
        from stockade.papers.service import PapersApp
        from stockade.papers.settings import PapersSettings

        return PapersApp(load_settings(PapersSettings))
    from stockade.agent.service import AgentApp
    from stockade.agent.settings import AgentSettings

    return AgentApp(load_settings(AgentSettings))


def run(args: argparse.Namespace) -> int:
    """Serve one service, or all four in one process (the agent last, stopped first)."""
    names = SERVICES if args.service == "all" else (args.service,)
    try:
        apps = [build_app(n) for n in names]
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
            "tool provider). Settings come from STOCKADE_<SERVICE>_* environment variables "
            "(see README, Configuration)."
        ),
    )
    p.add_argument("service", choices=[*SERVICES, *EXTRAS, "all"], help="which service to run")
    p.set_defaults(func=run)
