"""Scripted provider extensions: summaries that keep the script in step, prompt_tokens."""

from __future__ import annotations

import pytest

from stockade.agent.compaction import SUMMARY_PREFIX, summarise
from stockade.errors import InvalidArgument
from stockade.llm.base import Message, ModelToolCall
from stockade.llm.scripted import ScriptedProvider, parse_script

SCRIPT = {
    "turns": [
        {"text": "one", "tool_calls": [{"name": "read_file", "arguments": {"file_path": "a"}}]},
        {"text": "two", "prompt_tokens": 35000},
    ]
}


async def test_compaction_summaries_do_not_consume_turns() -> None:
    provider = ScriptedProvider(parse_script(SCRIPT))
    first = await provider.complete([Message("user", "go")], [])
    assert first.text == "one"
    call = ModelToolCall("c1", "read_file", {"file_path": "a"})
    history = [
        Message("system", "sys"),
        Message("user", "task"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "x" * 4000, tool_call_id="c1"),
        Message("assistant", "later"),
        Message("user", "more"),
        Message("assistant", "again"),
        Message("user", "and more"),
    ]
    result = await summarise(history, provider, keep_recent=2)
    summary = result.messages[2].content
    assert summary.startswith(SUMMARY_PREFIX + "Earlier steps: ") and "read_file" in summary
    second = await provider.complete([Message("user", "go")], [])
    assert second.text == "two" and second.prompt_tokens == 35000


def test_prompt_tokens_must_be_a_non_negative_integer() -> None:
    for bad in (-1, "many", True):
        with pytest.raises(InvalidArgument, match="prompt_tokens"):
            parse_script({"turns": [{"text": "x", "prompt_tokens": bad}]})
    (turn,) = parse_script({"turns": [{"text": "x"}]})
    assert turn.prompt_tokens == 0  # old scripts: the estimate is used
