"""``python -m stockade.executor``: run the executor service until SIGTERM."""

from __future__ import annotations

from stockade.executor.app import ExecutorApp
from stockade.executor.settings import ExecutorSettings
from stockade.server import load_settings, serve


def main() -> int:
    """Load settings and serve."""
    settings = load_settings(ExecutorSettings)
    return serve([ExecutorApp(settings)], log_level=settings.log_level)


if __name__ == "__main__":
    raise SystemExit(main())
