"""``python -m stockade.papers``: serve the example paper ToolProvider until SIGTERM."""

from __future__ import annotations

from stockade.papers.app import PapersApp
from stockade.papers.settings import PapersSettings
from stockade.server import load_settings, serve


def main() -> int:
    """Load settings and serve."""
    settings = load_settings(PapersSettings)
    return serve([PapersApp(settings)], log_level=settings.log_level)


if __name__ == "__main__":
    raise SystemExit(main())
