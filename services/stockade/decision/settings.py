"""Decision service settings (``STOCKADE_DECISION_*`` plus the seed's ``AGENT_*`` names)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from stockade.server.settings import ServerSettings


def split_patterns(value: object) -> object:
    """Split a comma-separated rule list, keeping commas inside parentheses."""
    if not isinstance(value, str):
        return value
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


class DecisionSettings(ServerSettings):
    """Settings of the decision service."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="STOCKADE_DECISION_")

    listen: str = "127.0.0.1:50051"
    audit_addr: str = ""
    """The audit service: every Decide and every answered approval is sent there as a
    decision record (status DECIDED), spooled in ``state_dir`` while it is down. Empty:
    the records go to the log only."""
    policy_file: Path | None = None
    """TOML or YAML policy file (reloaded on change or SIGHUP)."""
    project_policy_file: Path | None = None
    """A second policy file whose rules have source PROJECT (after the managed file's)."""
    shadow_policy_file: Path | None = None
    """Shadow mode: a candidate policy (TOML or YAML, in place of ``policy_file``) decided
    beside the live one on every call and never enforced; each verdict it would change is
    logged, counted and noted in the call's audit row. Reloaded like the live file."""
    default_mode: str = Field(
        "default",
        validation_alias=AliasChoices("STOCKADE_DECISION_DEFAULT_MODE", "AGENT_PERMISSION_MODE"),
    )
    """Mode of new sessions: default, acceptEdits, bypassPermissions, dontAsk, plan or auto."""
    deny: Annotated[list[str], NoDecode] = Field(
        [], validation_alias=AliasChoices("STOCKADE_DECISION_DENY", "AGENT_PERMISSIONS_DENY")
    )
    """DENY rule patterns, comma-separated."""
    ask: Annotated[list[str], NoDecode] = Field(
        [], validation_alias=AliasChoices("STOCKADE_DECISION_ASK", "AGENT_PERMISSIONS_ASK")
    )
    """ASK rule patterns, comma-separated."""
    allow: Annotated[list[str], NoDecode] = Field(
        [], validation_alias=AliasChoices("STOCKADE_DECISION_ALLOW", "AGENT_PERMISSIONS_ALLOW")
    )
    """ALLOW rule patterns, comma-separated."""
    grant_private_key_file: Path | None = None
    """Ed25519 private key that signs grants (PEM)."""
    grant_ttl_s: float = 60.0
    """How long a grant stays valid."""
    admin_tokens: Annotated[list[str], NoDecode] = []
    """Bearer tokens allowed to call admin RPCs, comma-separated."""
    admin_identities: Annotated[list[str], NoDecode] = []
    """mTLS client identities (certificate common name or SAN) allowed to call admin RPCs."""
    delegate_identities: Annotated[list[str], NoDecode] = []
    """Authenticated admin callers (``token:NAME``, ``mtls:NAME``) that may name the person
    they act for in ``x-stockade-on-behalf-of`` metadata (the approval console), which then
    becomes the recorded resolver. Empty: any admin caller may."""
    workspace: str = "/"
    """The agent's working directory: relative paths in calls and rules are taken from here."""
    denial_max_consecutive: int | None = Field(
        None,
        validation_alias=AliasChoices(
            "STOCKADE_DECISION_DENIAL_MAX_CONSECUTIVE", "AGENT_DENIAL_MAX_CONSECUTIVE"
        ),
        gt=0,
    )
    """Denials in a row before decisions carry halt (overrides the policy file; default 3)."""
    denial_max_total: int | None = Field(
        None,
        validation_alias=AliasChoices(
            "STOCKADE_DECISION_DENIAL_MAX_TOTAL", "AGENT_DENIAL_MAX_TOTAL"
        ),
        gt=0,
    )
    """Denials per session before decisions carry halt (overrides the policy file; default 20)."""
    approval_timeout_s: float | None = Field(None, gt=0)
    """How long an approval waits for an answer (overrides the policy file; default 120)."""
    policy_poll_s: float = Field(1.0, gt=0)
    """How often the policy file is checked for changes (SIGHUP reloads at once)."""
    store_dsn: str = Field(default="", repr=False)
    """Where sessions, rules, grants, approvals and counters live: empty or
    ``sqlite:///path`` for SQLite (one replica; default ``state_dir/decision.db``),
    ``postgresql://…`` for PostgreSQL (any number of interchangeable replicas, STORE-2).
    Not shown in repr: it may hold a password."""
    store_pool_size: int = Field(10, gt=0, le=200)
    """PostgreSQL connections per replica (plus one that listens for other replicas'
    changes)."""
    session_cache_max: int = Field(10_000, gt=0)
    """Sessions kept in memory (least recently used ones fall out and are read back)."""
    max_session_rules: int = Field(1_000, gt=0)
    """Session rules plus "always allow" grants per session (RESOURCE_EXHAUSTED past it)."""
    max_pending_approvals: int = Field(10_000, gt=0)
    """Pending approvals in the service; an ASK past it is RESOURCE_EXHAUSTED (a denial)."""
    max_pending_approvals_per_session: int = Field(100, gt=0)
    """Pending approvals per session."""
    max_approval_watchers: int = Field(64, gt=0)
    """WatchApprovals streams at once (RESOURCE_EXHAUSTED past it)."""
    approval_watch_queue: int = Field(1_000, gt=0)
    """Changes queued for one watcher; one that falls further behind is dropped
    (RESOURCE_EXHAUSTED) and may reconnect for the current backlog."""
    approval_retention_s: float = Field(86_400.0, gt=0)
    """How long answered and expired approvals are kept before they are deleted."""
    approval_reattach_s: float = Field(30.0, gt=0)
    """How long a pending approval waits for its waiter to re-attach (after the waiter's
    call ended or this service restarted) before it is marked abandoned (expired)."""
    approval_sweep_s: float = Field(5.0, gt=0)
    """How often overdue, abandoned and old approvals are swept."""

    auto_provider: Literal["none", "openai", "scripted"] = "none"
    """auto mode's classifier model (DEC-17): ``openai`` (an OpenAI-compatible endpoint),
    ``scripted`` (replies from AUTO_SCRIPT_FILE, for tests and the demo) or ``none`` (auto
    mode then sends every ask the fast paths leave to a person)."""
    auto_openai_base_url: str = ""
    """The classifier's Chat Completions endpoint, e.g. ``http://127.0.0.1:8000/v1``."""
    auto_openai_model: str = ""
    """The classifier's model name."""
    auto_openai_api_key: str = Field("", repr=False)
    """Bearer token for the classifier's endpoint (never logged)."""
    auto_script_file: Path | None = None
    """Scripted classifier: a YAML/JSON script whose turns' texts are the replies, in order."""
    auto_timeout_s: float = Field(10.0, gt=0, le=120)
    """How long one classification may take; past it the ask goes to a person."""
    auto_prompt_file: Path | None = None
    """A file holding the classifier's system prompt (default: the built-in one)."""
    auto_budget_per_session: int = Field(50, ge=0, le=100_000)
    """Model calls a session may spend on classification; past it asks go to a person."""
    auto_cache_size: int = Field(4096, ge=0, le=1_000_000)
    """Verdicts kept by exact call, findings and task (a repeated call is not re-asked)."""

    _split = field_validator(
        "deny",
        "ask",
        "allow",
        "admin_tokens",
        "admin_identities",
        "delegate_identities",
        mode="before",
    )(classmethod(lambda cls, v: split_patterns(v)))

    @field_validator("default_mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        allowed = {"default", "acceptEdits", "bypassPermissions", "dontAsk", "plan", "auto"}
        if value not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(sorted(allowed))}")
        return value
