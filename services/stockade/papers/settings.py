"""Paper provider settings (``STOCKADE_PAPERS_*``)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from stockade.server.settings import ServerSettings


class PapersSettings(ServerSettings):
    """Settings of the example paper ToolProvider."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="STOCKADE_PAPERS_")

    listen: str = "127.0.0.1:50055"
    """Where to listen (default port 50055)."""
