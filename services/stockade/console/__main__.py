"""``python -m stockade.console``: run the approval console until SIGTERM."""

from __future__ import annotations

import sys

from stockade.console.server import run
from stockade.console.settings import ConsoleSettings
from stockade.server import SettingsError, load_settings


def main() -> int:
    """Load settings and serve."""
    try:
        settings = load_settings(ConsoleSettings)
    except SettingsError as exc:
        print(f"stockade console: {exc}", file=sys.stderr)
        return 2
    return run(settings)


if __name__ == "__main__":
    raise SystemExit(main())
