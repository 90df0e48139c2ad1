"""The interface between the agent loop and an LLM provider (AGT-9)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class ModelToolCall:
    """One tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One chat message in OpenAI Chat Completions shape."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ModelToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""


@dataclass(frozen=True)
class ToolSchema:
    """A tool as offered to the model."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelTurn:
    """One answer of the model: text and/or tool calls, with token usage."""

    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ProviderError(Exception):
    """The provider failed (after its retries); the turn ends with reason ERROR."""


class Provider(Protocol):
    """An LLM provider."""

    async def complete(
        self, messages: list[Message], tools: list[ToolSchema], *, allow_tools: bool = True
    ) -> ModelTurn:
        """Return the model's next turn; ``allow_tools=False`` forces a text-only answer."""
        ...
