"""Agent settings (``STOCKADE_AGENT_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from stockade.server.settings import ServerSettings


class AgentSettings(ServerSettings):
    """Settings of the agent service."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="STOCKADE_AGENT_")

    listen: str = "127.0.0.1:50054"
    decision_addr: str = "127.0.0.1:50051"
    """Address of the decision service."""
    executor_addr: str = "127.0.0.1:50052"
    """Address of the executor service."""
    audit_addr: str = "127.0.0.1:50053"
    """Address of the audit service."""
    provider: str = "scripted"
    """``scripted`` or ``openai``."""
    script_dir: Path = Path("scripts")
    """Folder of scripted-provider scripts (RunTurnRequest.script names a file in it)."""
    default_script: str = "demo"
    """Script used when a RunTurn request names none."""
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    """Base URL of an OpenAI-compatible Chat Completions endpoint."""
    openai_model: str = "gpt-4o-mini"
    """Model name sent to the endpoint."""
    openai_api_key: str = ""
    """API key for the endpoint (never logged)."""
    spool_dir: Path = Path(".stockade/spool")
    """Where audit events wait while the audit service is unreachable."""
    tool_providers: Annotated[list[str], NoDecode] = []
    """Addresses of remote ToolProvider services, comma-separated."""
    max_steps: int = 8
    """Model steps per turn before one forced final answer."""
    decide_deadline_s: float = 2.0
    """A decision that takes longer is a denial (fail closed)."""

    @field_validator("tool_providers", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("provider")
    @classmethod
    def _provider(cls, value: str) -> str:
        if value not in {"scripted", "openai"}:
            raise ValueError("must be 'scripted' or 'openai'")
        return value

    @field_validator("max_steps")
    @classmethod
    def _steps(cls, value: int) -> int:
        if not 1 <= value <= 1000:
            raise ValueError("must be between 1 and 1000")
        return value
