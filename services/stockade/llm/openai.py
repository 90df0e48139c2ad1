"""An OpenAI-compatible Chat Completions provider over httpx (AGT-9).

Works with OpenAI, vLLM, Ollama and OpenAI-style gateways: ``POST {base_url}/chat/completions``
with ``tools`` / ``tool_calls`` / ``tool`` messages in the real wire format, optionally
streamed as server-sent events (``data: {...}`` chunks whose ``delta.tool_calls`` are
assembled by index, ended by ``data: [DONE]``).

Failures are explicit: HTTP 429 (honouring ``Retry-After``), 5xx and connection errors are
retried with exponential backoff; other 4xx, malformed JSON, tool-call arguments that are
not a JSON object and truncated streams raise ``ProviderError`` at once with a message
that says what was wrong. The API key is sent as a bearer token and never logged.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from stockade.contract.audit_bounds import json_depth_exceeds, value_depth_exceeds
from stockade.llm.base import (
    MAX_ARGUMENT_DEPTH,
    Message,
    ModelToolCall,
    ModelTurn,
    ProviderError,
    ToolSchema,
)

log = logging.getLogger(__name__)

_RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class OpenAIConfig:
    """How to reach the endpoint and how hard to try."""

    base_url: str
    """E.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended)."""
    model: str
    """Model name sent in every request."""
    api_key: str = field(default="", repr=False)
    """Bearer token; empty sends no Authorization header."""
    stream: bool = False
    """Use server-sent events."""
    timeout_s: float = 120.0
    """Per-request timeout (connect, read, write)."""
    max_retries: int = 3
    """Retries after the first attempt, for 429, 5xx and connection errors."""
    backoff_base_s: float = 0.5
    """First backoff; doubles each retry, with jitter."""
    backoff_max_s: float = 20.0
    """Cap on one wait, including a server's Retry-After."""
    temperature: float | None = None
    """Sampling temperature; None leaves the server default."""
    max_tokens: int | None = None
    """Completion token cap; None leaves the server default."""
    extra_headers: tuple[tuple[str, str], ...] = ()
    """Additional HTTP headers (e.g. a gateway's routing header)."""


class _Retryable(Exception):
    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


def message_to_wire(message: Message) -> dict[str, Any]:
    """One ``Message`` in the Chat Completions request format."""
    if message.role == "tool":
        # Only the documented fields: strict gateways reject extras such as "name".
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, separators=(",", ":")),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def tool_to_wire(tool: ToolSchema) -> dict[str, Any]:
    """One tool in the request's ``tools`` list."""
    parameters = tool.parameters or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": parameters},
    }


def _parse_arguments(name: str, raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):  # some servers (Ollama) send an object, not a string
        return raw
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, str):
        raise ProviderError(f"tool call {name!r}: arguments are {type(raw).__name__}, not JSON")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProviderError(
            f"tool call {name!r}: arguments are not valid JSON ({exc.msg} at {exc.pos}): "
            f"{raw[:120]!r}"
        ) from None
    if not isinstance(value, dict):
        raise ProviderError(f"tool call {name!r}: arguments must be a JSON object")
    return value


def _tool_call(index: int, call_id: Any, name: Any, raw_arguments: Any) -> ModelToolCall:
    if not isinstance(name, str) or not name:
        raise ProviderError(f"tool call #{index} has no function name")
    # An endpoint that sends no id gets a random one: ``call_<index>`` would repeat in every
    # turn and every session, and a call is known by its id within a session.
    call_id = (
        call_id if isinstance(call_id, str) and call_id else f"call_{uuid.uuid4().hex}_{index}"
    )
    # Measured before parsing (json.loads recurses): a too-deep call fails alone.
    too_deep = (
        json_depth_exceeds(raw_arguments, MAX_ARGUMENT_DEPTH)
        if isinstance(raw_arguments, str)
        else value_depth_exceeds(raw_arguments, MAX_ARGUMENT_DEPTH)
    )
    if too_deep:
        reason = f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        return ModelToolCall(id=call_id, name=name, arguments={}, invalid=reason)
    return ModelToolCall(id=call_id, name=name, arguments=_parse_arguments(name, raw_arguments))


def _usage(data: Any) -> tuple[int, int]:
    if not isinstance(data, dict):
        return 0, 0
    prompt, completion = data.get("prompt_tokens", 0), data.get("completion_tokens", 0)
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


def parse_completion(body: Any) -> ModelTurn:
    """A non-streamed response body as a ``ModelTurn``; raises ``ProviderError`` on bad shape."""
    if not isinstance(body, dict):
        raise ProviderError("response is not a JSON object")
    if "error" in body and "choices" not in body:
        raise ProviderError(f"endpoint returned an error: {_error_text(body)}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProviderError("response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ProviderError("response choice has no message")
    content = message.get("content") or ""
    if not isinstance(content, str):
        raise ProviderError("response message content is not a string")
    calls: list[ModelToolCall] = []
    for index, raw in enumerate(message.get("tool_calls") or []):
        if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
            raise ProviderError(f"tool call #{index} is malformed")
        function = raw["function"]
        calls.append(
            _tool_call(index, raw.get("id"), function.get("name"), function.get("arguments"))
        )
    prompt, completion = _usage(body.get("usage"))
    return ModelTurn(
        text=content, tool_calls=tuple(calls), prompt_tokens=prompt, completion_tokens=completion
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """Assembles SSE chunks into one ``ModelTurn``."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._usage = (0, 0)
        self.done = False

    def feed_line(self, line: str) -> None:
        """Consume one line of the event stream."""
        line = line.rstrip("\r")
        if not line or line.startswith(":") or not line.startswith("data:"):
            return  # blank separators, comments and other SSE fields carry nothing here
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise ProviderError(f"stream chunk is not valid JSON: {data[:120]!r}") from None
        if not isinstance(chunk, dict):
            raise ProviderError("stream chunk is not a JSON object")
        if "error" in chunk and "choices" not in chunk:
            raise ProviderError(f"endpoint returned an error mid-stream: {_error_text(chunk)}")
        if chunk.get("usage"):
            self._usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict):
                self._delta(delta)

    def _delta(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("content"), str):
            self._text.append(delta["content"])
        for raw in delta.get("tool_calls") or []:
            if not isinstance(raw, dict) or not isinstance(raw.get("index", 0), int):
                raise ProviderError("stream tool call delta is malformed")
            partial = self._calls.setdefault(raw.get("index", 0), _PartialCall())
            if raw.get("id"):
                partial.id = raw["id"]
            function = raw.get("function") or {}
            if function.get("name"):
                partial.name += function["name"]
            if isinstance(function.get("arguments"), str):
                partial.arguments.append(function["arguments"])

    def result(self) -> ModelTurn:
        """The assembled turn; a stream without ``[DONE]`` is truncated."""
        if not self.done:
            raise ProviderError("stream ended before [DONE]: the answer is truncated")
        calls = tuple(
            _tool_call(index, partial.id, partial.name, "".join(partial.arguments))
            for index, partial in sorted(self._calls.items())
        )
        prompt, completion = self._usage
        return ModelTurn(
            text="".join(self._text),
            tool_calls=calls,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )


def _error_text(body: dict[str, Any]) -> str:
    error = body.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)[:300]
    return str(error)[:300]


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Parse a Retry-After header (seconds or an HTTP date); None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


class OpenAIProvider:
    """The Provider protocol over an OpenAI-compatible Chat Completions endpoint."""

    def __init__(
        self,
        config: OpenAIConfig,
        *,
        client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self._client = client or httpx.AsyncClient(timeout=httpx.Timeout(config.timeout_s))
        self._owns_client = client is None
        self._sleep = sleep
        self._url = config.base_url.rstrip("/") + "/chat/completions"

    async def aclose(self) -> None:
        """Close the HTTP client if this provider made it."""
        if self._owns_client:
            await self._client.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.stream:
            headers["Accept"] = "text/event-stream"
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        headers.update(dict(self.config.extra_headers))
        return headers

    def build_request(
        self, messages: list[Message], tools: list[ToolSchema], *, allow_tools: bool = True
    ) -> dict[str, Any]:
        """The JSON body of one request."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [message_to_wire(m) for m in messages],
        }
        # A forced final answer sends no tools at all: "tool_choice: none" is not
        # honoured by every OpenAI-compatible server.
        if tools and allow_tools:
            body["tools"] = [tool_to_wire(t) for t in tools]
            body["tool_choice"] = "auto"
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        if self.config.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    async def complete(
        self, messages: list[Message], tools: list[ToolSchema], *, allow_tools: bool = True
    ) -> ModelTurn:
        """Return the model's next turn (retrying transient failures)."""
        body = self.build_request(messages, tools, allow_tools=allow_tools)
        attempts = self.config.max_retries + 1
        last = ""
        for attempt in range(attempts):
            try:
                turn = await self._attempt(body)
            except _Retryable as exc:
                last = str(exc)
                if attempt + 1 >= attempts:
                    break
                delay = self._backoff(attempt, exc.delay)
                log.warning(
                    "provider attempt %d failed (%s); retrying in %.2fs", attempt + 1, last, delay
                )
                await self._sleep(delay)
                continue
            if not allow_tools and turn.tool_calls:
                # The model was told not to call tools; keep only its text.
                turn = ModelTurn(
                    text=turn.text,
                    prompt_tokens=turn.prompt_tokens,
                    completion_tokens=turn.completion_tokens,
                )
            return turn
        raise ProviderError(f"provider failed after {attempts} attempts: {last}")

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.config.backoff_max_s)
        base = self.config.backoff_base_s * float(1 << attempt)
        return min(self.config.backoff_max_s, base * (0.5 + random.random() / 2))

    async def _attempt(self, body: dict[str, Any]) -> ModelTurn:
        try:
            async with self._client.stream(
                "POST", self._url, json=body, headers=self._headers()
            ) as response:
                if response.status_code != 200:
                    await self._raise_for_status(response)
                if self.config.stream:
                    assembler = StreamAssembler()
                    async for line in response.aiter_lines():
                        assembler.feed_line(line)
                        if assembler.done:
                            break
                    return assembler.result()
                raw = await response.aread()
        except httpx.TransportError as exc:
            raise _Retryable(f"connection error: {type(exc).__name__}: {exc}") from exc
        try:
            parsed = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ProviderError(f"response is not valid JSON: {raw[:120]!r}") from None
        return parse_completion(parsed)

    async def _raise_for_status(self, response: httpx.Response) -> None:
        raw = await response.aread()
        try:
            detail = _error_text(json.loads(raw))
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            detail = raw[:200].decode("utf-8", "replace")
        status = response.status_code
        message = f"HTTP {status}: {detail}"
        if status in _RETRY_STATUSES or status >= 500:
            raise _Retryable(message, retry_after_seconds(response.headers.get("Retry-After")))
        raise ProviderError(message)
