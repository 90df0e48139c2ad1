"""The interface between a caller (the agent loop, the auto-mode classifier) and an LLM
provider (AGT-9)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from stockade.contract.audit_bounds import value_depth_exceeds

#: Deepest nesting of objects/arrays in a tool call's arguments. A call nested deeper
#: fails alone with an error result the model sees (it could not cross a gRPC hop: the
#: protobuf decoders stop near 33 levels of Struct), the turn goes on.
MAX_ARGUMENT_DEPTH = 16


#: The system prompt of a request to summarise a conversation (context compaction). It
#: lives with the providers because the scripted provider answers such a request itself,
#: without consuming a scripted turn.
SUMMARY_PROMPT = (
    "Summarise the conversation below for the assistant that will continue it. Keep every "
    "fact, file path, identifier, decision and open question; drop chatter. Plain text, "
    "no tool calls."
)


@dataclass(frozen=True)
class ModelToolCall:
    """One tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]
    invalid: str = ""
    """Why the arguments could not be used ("" when they can): the call fails alone
    with this as its error, instead of ending the turn."""


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


def checked_turn(turn: ModelTurn) -> ModelTurn:
    """``turn`` with every call whose arguments nest deeper than ``MAX_ARGUMENT_DEPTH``
    replaced by the same call without arguments and with ``invalid`` saying why (before it
    enters the history: a value that deep breaks every recursive walk of it)."""
    if not any(value_depth_exceeds(c.arguments, MAX_ARGUMENT_DEPTH) for c in turn.tool_calls):
        return turn
    reason = f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    calls = tuple(
        ModelToolCall(c.id, c.name, {}, invalid=c.invalid or reason)
        if value_depth_exceeds(c.arguments, MAX_ARGUMENT_DEPTH)
        else c
        for c in turn.tool_calls
    )
    return replace(turn, tool_calls=calls)


class ProviderError(Exception):
    """The provider failed (after its retries); the turn ends with reason ERROR."""


class Provider(Protocol):
    """An LLM provider."""

    async def complete(
        self, messages: list[Message], tools: list[ToolSchema], *, allow_tools: bool = True
    ) -> ModelTurn:
        """Return the model's next turn; ``allow_tools=False`` forces a text-only answer."""
        ...
