"""The scripted provider: format validation, safe names, deterministic replay."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stockade.errors import InvalidArgument
from stockade.llm.openai import parse_completion
from stockade.llm.scripted import ScriptedProvider, load_script, parse_script


async def test_replays_turns_in_order(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "turns:\n"
        "  - text: one\n"
        "    tool_calls: [{name: read_file, arguments: {file_path: a}}]\n"
        "  - text: two\n"
    )
    provider = ScriptedProvider(load_script(tmp_path, "s"))
    first = await provider.complete([], [])
    assert first.text == "one"
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("read_file", {"file_path": "a"})]
    assert re.fullmatch(r"call_[0-9a-f]{12}_1_1", first.tool_calls[0].id)
    # Another run of the same script (another session or turn) gets other default ids.
    again = await ScriptedProvider(load_script(tmp_path, "s")).complete([], [])
    assert again.tool_calls[0].id != first.tool_calls[0].id
    second = await provider.complete([], [])
    assert second.text == "two" and second.tool_calls == ()
    third = await provider.complete([], [])
    assert "no more turns" in third.text


async def test_forced_final_answer_drops_tool_calls() -> None:
    provider = ScriptedProvider(
        parse_script({"turns": [{"text": "x", "tool_calls": [{"name": "t"}]}]})
    )
    turn = await provider.complete([], [], allow_tools=False)
    assert turn.text == "x" and turn.tool_calls == ()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({}, "list 'turns'"),
        ({"turns": ["text"]}, "turn 1 is not a mapping"),
        ({"turns": [{"text": 3}]}, "text must be a string"),
        ({"turns": [{"tool_calls": [{"arguments": {}}]}]}, "needs a name"),
        ({"turns": [{"tool_calls": [{"name": "t", "arguments": [1]}]}]}, "must be a mapping"),
    ],
)
def test_bad_scripts_are_refused(data: object, fragment: str) -> None:
    with pytest.raises(InvalidArgument, match=fragment):
        parse_script(data)


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/b", "", ".hidden/..", "x" * 200])
def test_script_names_cannot_escape(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidArgument):
        load_script(tmp_path, name)


def test_unparseable_script_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("turns: [unclosed")
    with pytest.raises(InvalidArgument, match="does not parse"):
        load_script(tmp_path, "bad")


def test_openai_fallback_ids_are_unique_per_turn() -> None:
    """An endpoint that sends no tool call ids: each turn's calls get ids of their own,
    never ``call_0`` again in the next turn or another session."""
    body = {
        "choices": [
            {
                "message": {
                    "content": "",
                    "tool_calls": [
                        {"function": {"name": "read_file", "arguments": '{"file_path": "a"}'}},
                        {"function": {"name": "read_file", "arguments": '{"file_path": "b"}'}},
                    ],
                }
            }
        ]
    }
    ids = [c.id for _ in range(3) for c in parse_completion(body).tool_calls]
    assert len(set(ids)) == 6
    assert all(re.fullmatch(r"call_[0-9a-f]{32}_[01]", i) for i in ids)
