"""``python -m stockade.agent``: run the agent service until SIGTERM."""

from __future__ import annotations

from stockade.agent.app import AgentApp
from stockade.agent.settings import AgentSettings
from stockade.server import load_settings, serve


def main() -> int:
    """Load settings and serve."""
    settings = load_settings(AgentSettings)
    return serve([AgentApp(settings)], log_level=settings.log_level)


if __name__ == "__main__":
    raise SystemExit(main())
