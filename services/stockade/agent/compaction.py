"""Context compaction (AGT-9 / the seed's multi-layer compression).

* micro: replace old, long tool outputs with a placeholder (cheap, no model call);
* auto: near the token budget, summarise the middle of the conversation with the model;
* manual: the same summary, asked for by the model through the ``compress_context`` tool.

The system prompt and the task stay verbatim; the most recent messages stay verbatim, and
a cut never separates an assistant's tool calls from their tool results (chat APIs reject
orphaned tool messages). Failures feed a circuit breaker so a broken summariser cannot
make the loop compact forever.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from stockade.agent.limits import CompactionCircuitBreaker
from stockade.llm.base import SUMMARY_PROMPT, Message, Provider

MICRO_PLACEHOLDER = "[old tool output cleared to save context; call the tool again if needed]"
SUMMARY_PREFIX = "Summary of the earlier conversation (compacted):\n"
_PER_MESSAGE_OVERHEAD = 4
_TRANSCRIPT_CHARS_PER_MESSAGE = 2_000


CompactionKind = Literal["micro", "auto", "manual"]
"""How a context was compacted: old tool results cleared (micro), summarised by the loop
near its token limit (auto), or at the model's request (manual)."""


class CompactionError(Exception):
    """Compaction could not produce a smaller context."""


@dataclass(frozen=True)
class CompactionResult:
    """The compacted conversation."""

    kind: CompactionKind
    """``micro``, ``auto`` or ``manual``."""
    messages: list[Message]
    """The new conversation."""
    tokens_before: int
    """Estimated tokens before."""
    tokens_after: int
    """Estimated tokens after."""


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A provider-independent estimate: about four characters per token."""
    total = 0
    for message in messages:
        chars = len(message.content)
        for call in message.tool_calls:
            # repr is close enough to the JSON length and several times cheaper.
            chars += len(call.name) + len(repr(call.arguments))
        total += chars // 4 + _PER_MESSAGE_OVERHEAD
    return total


def micro_compact(
    messages: Sequence[Message], *, keep_recent: int = 3, min_chars: int = 200
) -> CompactionResult:
    """Clear the output of every tool message but the ``keep_recent`` newest ones."""
    tool_indexes = [i for i, m in enumerate(messages) if m.role == "tool"]
    old = set(tool_indexes[: max(0, len(tool_indexes) - keep_recent)])
    result = [
        _replace_content(m, MICRO_PLACEHOLDER)
        if i in old and len(m.content) > min_chars and m.content != MICRO_PLACEHOLDER
        else m
        for i, m in enumerate(messages)
    ]
    return CompactionResult("micro", result, estimate_tokens(messages), estimate_tokens(result))


def _replace_content(message: Message, content: str) -> Message:
    return Message(
        role=message.role,
        content=content,
        tool_calls=message.tool_calls,
        tool_call_id=message.tool_call_id,
        name=message.name,
    )


def _head_end(messages: Sequence[Message]) -> int:
    """Index after the leading system messages and the first user message (the task)."""
    index = 0
    while index < len(messages) and messages[index].role == "system":
        index += 1
    if index < len(messages) and messages[index].role == "user":
        index += 1
    return index


def _tail_start(messages: Sequence[Message], head_end: int, keep_recent: int) -> int:
    start = max(head_end, len(messages) - keep_recent)
    # Never begin the tail with tool results whose assistant call would be summarised away.
    while start > head_end and messages[start].role == "tool":
        start -= 1
    return start


def render_transcript(messages: Sequence[Message]) -> str:
    """The messages as plain text for the summariser."""
    lines: list[str] = []
    for message in messages:
        text = message.content[:_TRANSCRIPT_CHARS_PER_MESSAGE]
        if message.role == "tool":
            lines.append(f"[tool result {message.name or message.tool_call_id}] {text}")
            continue
        lines.append(f"[{message.role}] {text}".rstrip())
        for call in message.tool_calls:
            arguments = json.dumps(call.arguments, sort_keys=True, default=str)
            lines.append(f"[{message.role} calls {call.name}] {arguments}")
    return "\n".join(lines)


async def summarise(
    messages: Sequence[Message],
    provider: Provider,
    *,
    kind: CompactionKind = "auto",
    keep_recent: int = 4,
) -> CompactionResult:
    """Replace the middle of the conversation with a model-written summary."""
    before = estimate_tokens(messages)
    head_end = _head_end(messages)
    tail_start = _tail_start(messages, head_end, keep_recent)
    middle = list(messages[head_end:tail_start])
    if not middle:
        raise CompactionError("nothing to compact: the conversation is already minimal")
    try:
        turn = await provider.complete(
            [
                Message(role="system", content=SUMMARY_PROMPT),
                Message(role="user", content=render_transcript(middle)),
            ],
            [],
            allow_tools=False,
        )
    except Exception as exc:
        raise CompactionError(f"summariser failed: {exc}") from exc
    summary = turn.text.strip()
    if not summary:
        raise CompactionError("summariser returned an empty summary")
    result = [
        *messages[:head_end],
        Message(role="user", content=SUMMARY_PREFIX + summary),
        *messages[tail_start:],
    ]
    after = estimate_tokens(result)
    if after >= before:
        raise CompactionError(f"summary did not shrink the context ({before} → {after} tokens)")
    return CompactionResult(kind, result, before, after)


class Compactor:
    """Runs compactions for one loop, guarded by a circuit breaker."""

    def __init__(
        self,
        provider: Provider,
        breaker: CompactionCircuitBreaker | None = None,
        *,
        keep_recent: int = 4,
    ) -> None:
        self.provider = provider
        self.breaker = breaker or CompactionCircuitBreaker()
        self.keep_recent = keep_recent

    async def auto(
        self, messages: Sequence[Message], *, target_tokens: int | None = None
    ) -> CompactionResult | None:
        """Micro first, then a summary if still above ``target_tokens``.

        Returns None when the breaker is open or nothing could be compacted (a failure).
        """
        if self.breaker.open:
            return None
        micro = micro_compact(messages)
        if micro.tokens_after < micro.tokens_before and (
            target_tokens is None or micro.tokens_after <= target_tokens
        ):
            self.breaker.record_success()
            return micro
        try:
            result = await summarise(
                micro.messages, self.provider, kind="auto", keep_recent=self.keep_recent
            )
        except CompactionError:
            self.breaker.record_failure()
            return None
        self.breaker.record_success()
        return CompactionResult("auto", result.messages, micro.tokens_before, result.tokens_after)

    async def manual(self, messages: Sequence[Message]) -> CompactionResult:
        """The ``compress_context`` tool: a summary now; raises ``CompactionError``."""
        try:
            result = await summarise(
                messages, self.provider, kind="manual", keep_recent=self.keep_recent
            )
        except CompactionError:
            self.breaker.record_failure()
            raise
        self.breaker.record_success()
        return result
