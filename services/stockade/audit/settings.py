"""Audit service settings (``STOCKADE_AUDIT_*``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from stockade.server.settings import ServerSettings


class AuditSettings(ServerSettings):
    """Settings of the audit service."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="STOCKADE_AUDIT_")

    listen: str = "127.0.0.1:50053"
    retention_days: float = Field(default=0, ge=0)
    """Delete rows stored more than this many days ago (0 keeps everything)."""
    retention_interval_s: float = Field(default=3600.0, gt=0)
    """How often the retention sweep runs when ``retention_days`` is set."""
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    """SQLite ``synchronous``: NORMAL survives a killed process, FULL also power loss."""

    store_dsn: str = Field(default="", repr=False)
    """Where the log lives: empty or ``sqlite:///path`` for SQLite (one replica),
    ``postgresql://…`` for PostgreSQL (several replicas). Not shown in repr: it may hold a
    password."""
    replica_id: str = Field(default_factory=socket.gethostname, min_length=1, max_length=128)
    """This replica's name on PostgreSQL: the hash chain it appends to. Unique per live
    replica (a second process with the same id is refused); the pod name by default."""

    head_signing_key_file: Path | None = None
    """Ed25519 private key (PEM, PKCS#8) that signs this replica's chain head; with it the
    head is exported as a log line every ``head_export_interval_s``."""
    head_export_interval_s: float = Field(default=60.0, gt=0, le=86_400)
    """How often the signed chain head is exported."""

    @property
    def db_path(self) -> str:
        """The SQLite file (when ``store_dsn`` does not name another)."""
        return str(self.state_dir / "audit.db")
