"""Audit service settings (``STOCKADE_AUDIT_*``)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from stockade.server.settings import ServerSettings


class AuditSettings(ServerSettings):
    """Settings of the audit service."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="STOCKADE_AUDIT_")

    listen: str = "127.0.0.1:50053"
    retention_days: int = 0
    """Delete rows older than this many days (0 keeps everything)."""

    @property
    def db_path(self) -> str:
        """The SQLite file."""
        return str(self.state_dir / "audit.db")
