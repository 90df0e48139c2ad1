"""The scripted provider: format validation, safe names, deterministic replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.agent.providers.scripted import ScriptedProvider, load_script, parse_script
from stockade.errors import InvalidArgument


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
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_1_1", "read_file", {"file_path": "a"})
    ]
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
