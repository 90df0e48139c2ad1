"""Micro, auto and manual compaction, with a real (scripted) summariser."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from stockade.agent.compaction import (
    MICRO_PLACEHOLDER,
    SUMMARY_PREFIX,
    CompactionError,
    Compactor,
    estimate_tokens,
    micro_compact,
    summarise,
)
from stockade.agent.limits import CompactionCircuitBreaker
from stockade.llm.base import Message, ModelToolCall, ModelTurn, ToolSchema


class Summariser:
    """A provider that answers a fixed summary and records what it was asked."""

    def __init__(self, text: str = "short summary", fail: bool = False) -> None:
        self.text = text
        self.fail = fail
        self.calls: list[tuple[list[Message], bool]] = []

    async def complete(
        self, messages: list[Message], tools: list[ToolSchema], *, allow_tools: bool = True
    ) -> ModelTurn:
        self.calls.append((messages, allow_tools))
        if self.fail:
            raise RuntimeError("model down")
        return ModelTurn(text=self.text)


def conversation(rounds: int, size: int = 2000) -> list[Message]:
    messages = [Message("system", "sys"), Message("user", "the task")]
    for i in range(rounds):
        call = ModelToolCall(id=f"c{i}", name="read_file", arguments={"file_path": f"f{i}"})
        messages.append(Message("assistant", f"step {i}", tool_calls=(call,)))
        messages.append(
            Message("tool", f"{i}:" + "x" * size, tool_call_id=f"c{i}", name="read_file")
        )
    return messages


def assert_well_formed(messages: Sequence[Message]) -> None:
    """Every tool result follows the assistant message that called it."""
    pending: set[str] = set()
    for message in messages:
        if message.role == "tool":
            assert message.tool_call_id in pending, "orphaned tool result"
            pending.discard(message.tool_call_id)
        else:
            pending = {call.id for call in message.tool_calls}


def test_micro_clears_old_tool_output_only() -> None:
    messages = conversation(5)
    result = micro_compact(messages, keep_recent=2)
    tools = [m for m in result.messages if m.role == "tool"]
    assert [t.content == MICRO_PLACEHOLDER for t in tools] == [True, True, True, False, False]
    assert result.tokens_after < result.tokens_before
    assert result.messages[:2] == messages[:2]
    assert_well_formed(result.messages)
    again = micro_compact(result.messages, keep_recent=2)
    assert again.tokens_after == again.tokens_before


async def test_summary_keeps_head_and_tail_and_never_orphans_tool_results() -> None:
    messages = conversation(6)
    provider = Summariser("found f0..f3")
    result = await summarise(messages, provider, keep_recent=3)
    assert result.messages[0].content == "sys" and result.messages[1].content == "the task"
    assert result.messages[2].content == SUMMARY_PREFIX + "found f0..f3"
    assert result.messages[-1] == messages[-1]
    assert_well_formed(result.messages)
    assert result.tokens_after < result.tokens_before
    asked, allow_tools = provider.calls[0]
    assert allow_tools is False
    assert "read_file" in asked[1].content and "the task" not in asked[1].content


async def test_summary_failures() -> None:
    with pytest.raises(CompactionError, match="nothing to compact"):
        await summarise(conversation(0), Summariser())
    with pytest.raises(CompactionError, match="summariser failed"):
        await summarise(conversation(4), Summariser(fail=True))
    with pytest.raises(CompactionError, match="empty"):
        await summarise(conversation(4), Summariser("   "))
    with pytest.raises(CompactionError, match="did not shrink"):
        await summarise(conversation(4, size=1), Summariser("y" * 10_000))


async def test_auto_prefers_micro_then_summarises_above_target() -> None:
    messages = conversation(6)
    compactor = Compactor(Summariser())
    micro = await compactor.auto(messages)
    assert micro is not None and micro.kind == "micro"
    summary = await compactor.auto(messages, target_tokens=10)
    assert summary is not None and summary.kind == "auto"
    assert summary.tokens_after < estimate_tokens(micro.messages)


async def test_breaker_opens_after_repeated_failures_and_auto_stops_trying() -> None:
    provider = Summariser(fail=True)
    compactor = Compactor(provider, CompactionCircuitBreaker(2))
    small = conversation(3, size=10)  # micro cannot help: outputs are short
    assert await compactor.auto(small) is None
    with pytest.raises(CompactionError):
        await compactor.manual(small)
    assert compactor.breaker.open
    calls = len(provider.calls)
    assert await compactor.auto(small) is None
    assert len(provider.calls) == calls  # breaker open: the model is not asked again


async def test_manual_compaction_success_closes_the_breaker() -> None:
    compactor = Compactor(Summariser(), CompactionCircuitBreaker(3))
    compactor.breaker.record_failure()
    result = await compactor.manual(conversation(5))
    assert result.kind == "manual" and compactor.breaker.failures == 0
