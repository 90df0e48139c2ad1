"""``python -m stockade.decision``: run the decision service until SIGTERM."""

from __future__ import annotations

from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import load_settings, serve


def main() -> int:
    """Load settings and serve."""
    settings = load_settings(DecisionSettings)
    return serve([DecisionApp(settings)], log_level=settings.log_level)


if __name__ == "__main__":
    raise SystemExit(main())
