"""Agent settings (``STOCKADE_AGENT_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from stockade.agent.limits import LimitSettings
from stockade.agent.registry import ToolConfig
from stockade.agent.remote_hooks import RemoteHookConfig
from stockade.server.settings import ServerSettings, split_csv


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
    """Where audit events are written ahead (before a call's result is released) and
    wait while the audit service is unreachable."""
    audit_fsync: bool = False
    """Also fsync the audit spool (one group fsync for concurrent calls) before a call's
    result is released: survives power loss, not only a killed agent."""
    audit_disk_full_action: Literal["refuse", "backlog"] = "refuse"
    """While the audit spool cannot be written (full disk): ``refuse`` further tool calls
    (fail closed, the default), or keep up to ``audit_max_backlog`` events in memory
    (``backlog``), written when space returns, and refuse calls only past that."""
    audit_max_backlog: int = Field(default=10_000, ge=1, le=1_000_000)
    """Audit events kept in memory while the spool cannot be written."""
    tool_providers: Annotated[list[str], NoDecode] = []
    """Addresses of remote ToolProvider services, comma-separated."""
    max_steps: int = LimitSettings.max_steps
    """Model steps per turn before one forced final answer."""
    decide_deadline_s: float = 2.0
    """A decision that takes longer is a denial (fail closed)."""

    openai_stream: bool = False
    """Stream answers from the endpoint (server-sent events)."""
    openai_timeout_s: float = 120.0
    """Per-request timeout of the OpenAI-compatible endpoint."""
    openai_max_retries: int = 3
    """Retries for 429, 5xx and connection errors."""
    approval_wait_s: float = 130.0
    """How long a call waits for an approval answer (the decision service's own approval
    timeout, default 120 s, normally decides first: a timeout is a denial)."""
    tool_timeout_s: float = 130.0
    """Agent-side cap on one tool execution (the executor enforces its own limits)."""
    max_subagent_depth: int = LimitSettings.max_subagent_depth
    """How deep subagents may nest."""
    token_soft_limit: int = LimitSettings.token_soft_limit
    """Context tokens at which the model is nudged to conclude."""
    token_hard_limit: int = LimitSettings.token_hard_limit
    """Context tokens at which the context is compacted (or the turn ends)."""
    duplicate_threshold: int = LimitSettings.duplicate_threshold
    """Consecutive identical calls at which the call is refused."""
    diminishing_steps: int = LimitSettings.diminishing_steps
    """Steps in a row without new information that end the turn."""
    tree_max_steps: int = LimitSettings.tree_max_steps
    """Model steps the lead and all its subagents may spend in one turn."""
    tree_max_tokens: int = LimitSettings.tree_max_tokens
    """Tokens the lead and all its subagents may spend in one turn."""
    max_tool_output_chars: int = 16_000
    """Outputs of remote and built-in tools longer than this keep only head and tail."""
    tool_results_dir: Path | None = None
    """Where cut outputs are saved in full (unset: not saved)."""
    remote_hooks: list[RemoteHookConfig] = []
    """Remote HookService endpoints, as JSON: ``[{"address": "...", "timeout_s": 2,
    "failure_policy": "fail_closed"}]``."""
    tools: list[ToolConfig] = []
    """Extra tools, as JSON ``ToolConfig`` objects (remote tools name their provider)."""
    skills_dir: Path | None = None
    """Folder of skills for ``load_skill`` (``x.md`` or ``x/SKILL.md``); unset: the tool is
    not offered."""
    memory_dir: Path | None = None
    """Folder of the durable ``save_memory`` file (shared by every session of this agent);
    unset: memory stays in the session and is lost on restart."""

    @field_validator("tool_providers", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return split_csv(value)

    @field_validator("skills_dir")
    @classmethod
    def _skills_dir(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(f"{str(value)!r} is not a directory")
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

    @field_validator("token_hard_limit")
    @classmethod
    def _hard(cls, value: int, info: ValidationInfo) -> int:
        soft = info.data.get("token_soft_limit", 0)
        if value < soft:
            raise ValueError(f"must be at least token_soft_limit ({soft})")
        return value

    def limit_settings(self) -> LimitSettings:
        """The loop's limits from these settings."""
        return LimitSettings(
            max_steps=self.max_steps,
            duplicate_threshold=self.duplicate_threshold,
            token_soft_limit=self.token_soft_limit,
            token_hard_limit=self.token_hard_limit,
            diminishing_steps=self.diminishing_steps,
            max_subagent_depth=self.max_subagent_depth,
            tree_max_steps=self.tree_max_steps,
            tree_max_tokens=self.tree_max_tokens,
        )
