"""``python -m stockade.audit``: run the audit service until SIGTERM."""

from __future__ import annotations

from stockade.audit.app import AuditApp
from stockade.audit.settings import AuditSettings
from stockade.server import load_settings, serve


def main() -> int:
    """Load settings and serve."""
    settings = load_settings(AuditSettings)
    return serve([AuditApp(settings)], log_level=settings.log_level)


if __name__ == "__main__":
    raise SystemExit(main())
