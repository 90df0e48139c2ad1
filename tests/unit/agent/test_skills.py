"""load_skill: skills from an operator's folder, on real files (no filesystem mocks)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from stockade.agent.app import AgentApp
from stockade.agent.registry import offered_registry
from stockade.agent.settings import AgentSettings
from stockade.agent.skills import MAX_SKILL_BYTES, SkillError, SkillLibrary
from stockade.agent.tools import default_registry
from stockade.llm.base import ModelToolCall, ModelTurn
from stockade.server import SettingsError, load_settings
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.unit.agent.conftest import Harness, ListProvider, finished, run


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    root.mkdir()
    (root / "review.md").write_text("# Review\nRead the diff first.\n")
    (root / "deploy").mkdir()
    (root / "deploy" / "SKILL.md").write_text("# Deploy\nRender, then apply.\n")
    (root / "notes.txt").write_text("not a skill")
    (root / ".hidden.md").write_text("hidden")
    return root


def load_error(library: SkillLibrary, name: str) -> str:
    with pytest.raises(SkillError) as info:
        library.load(name)
    return info.value.message


def test_both_layouts_load(skills: Path) -> None:
    library = SkillLibrary(skills)
    assert library.names() == ["deploy", "review"]
    assert library.load("review") == "# Review\nRead the diff first.\n"
    assert library.load("deploy") == "# Deploy\nRender, then apply.\n"


def test_flat_file_wins_over_folder(skills: Path) -> None:
    (skills / "review").mkdir()
    (skills / "review" / "SKILL.md").write_text("folder version")
    assert SkillLibrary(skills).load("review").startswith("# Review")


def test_unknown_skill_lists_the_available_ones(skills: Path) -> None:
    message = load_error(SkillLibrary(skills), "missing")
    assert message == "Error: unknown skill 'missing'. Available skills: deploy, review."


def test_a_skill_added_later_loads_by_name(skills: Path) -> None:
    library = SkillLibrary(skills)
    (skills / "later.md").write_text("new")
    assert library.load("later") == "new"
    assert "later" not in library.description()  # the description is fixed at startup


@pytest.mark.parametrize(
    "name",
    ["../x", "a/b", "/etc/passwd", ".hidden", "..", "a..b", "", "x" * 65, "a\x00b", "-x", "é"],
)
def test_invalid_names_are_refused(skills: Path, name: str) -> None:
    (skills.parent / "x.md").write_text("outside")
    message = load_error(SkillLibrary(skills), name)
    assert message.startswith("Error: invalid skill name")
    assert "Available skills: deploy, review." in message


def test_a_symlink_pointing_outside_is_refused(skills: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("TOP SECRET")
    (skills / "leak.md").symlink_to(secret)
    (skills / "leakdir").symlink_to(tmp_path)  # a folder link: leakdir/SKILL.md is outside
    (tmp_path / "SKILL.md").write_text("TOP SECRET")
    library = SkillLibrary(skills)
    assert "leak" not in library.names() and "leakdir" not in library.names()
    assert "points outside the skills folder" in load_error(library, "leak")
    assert "points outside the skills folder" in load_error(library, "leakdir")


def test_a_symlink_inside_the_folder_is_followed(skills: Path) -> None:
    # A Kubernetes ConfigMap mounts each key as a link into a hidden ..data folder.
    data = skills / "..2026_11_30" / "cm.md"
    data.parent.mkdir()
    data.write_text("from a configmap")
    (skills / "..data").symlink_to(data.parent.name)
    (skills / "cm.md").symlink_to("..data/cm.md")
    library = SkillLibrary(skills)
    assert "cm" in library.names()
    assert library.load("cm") == "from a configmap"


def test_a_fifo_is_refused_without_hanging(skills: Path) -> None:
    os.mkfifo(skills / "pipe.md")
    library = SkillLibrary(skills)
    assert "pipe" not in library.names()
    assert "not a regular file" in load_error(library, "pipe")


def test_a_folder_named_like_a_skill_file_is_refused(skills: Path) -> None:
    (skills / "odd.md").mkdir()
    assert "not a regular file" in load_error(SkillLibrary(skills), "odd")


def test_oversize_is_refused(skills: Path) -> None:
    (skills / "big.md").write_bytes(b"x" * (MAX_SKILL_BYTES + 1))
    (skills / "edge.md").write_bytes(b"y" * MAX_SKILL_BYTES)
    library = SkillLibrary(skills)
    assert "too large (65537 bytes; at most 64 KiB)" in load_error(library, "big")
    assert len(library.load("edge")) == MAX_SKILL_BYTES


def test_binary_is_refused(skills: Path) -> None:
    (skills / "bin.md").write_bytes(b"\xff\xfe\x00")
    assert "not UTF-8" in load_error(SkillLibrary(skills), "bin")


def test_description_names_the_skills(skills: Path, tmp_path: Path) -> None:
    assert SkillLibrary(skills).description().endswith("Available skills: deploy, review.")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "No skills were found" in SkillLibrary(empty).description()
    with pytest.raises(ValueError, match="not a directory"):
        SkillLibrary(tmp_path / "nowhere")


# ------------------------------------------------------------------ in the agent


def turn(*calls: ModelToolCall) -> ModelTurn:
    return ModelTurn(text="", tool_calls=calls, prompt_tokens=10, completion_tokens=5)


def offered(provider: ListProvider) -> dict[str, Any]:
    return {tool.name: tool for tool in provider.tools[0]}


async def test_not_offered_without_a_skills_folder(harness: Harness) -> None:
    provider = ListProvider([turn(ModelToolCall("k1", "load_skill", {"name": "review"}))])
    events = await run(harness.core(provider))
    assert "load_skill" not in offered(provider)
    assert "unknown tool 'load_skill'" in finished(events)["k1"].content


async def test_offered_and_loaded_with_a_skills_folder(harness: Harness, skills: Path) -> None:
    provider = ListProvider(
        [
            turn(
                ModelToolCall("k1", "load_skill", {"name": "review"}),
                ModelToolCall("k2", "load_skill", {"name": "deploy"}),
                ModelToolCall("k3", "load_skill", {"name": "../secret"}),
                ModelToolCall("k4", "load_skill", {"name": "nope"}),
            )
        ]
    )
    events = await run(harness.core(provider, skills=SkillLibrary(skills)))
    tool = offered(provider)["load_skill"]
    assert "Available skills: deploy, review." in tool.description
    done = finished(events)
    assert done["k1"].status == x_pb2.EXECUTION_STATUS_OK
    assert done["k1"].content == "# Review\nRead the diff first.\n"
    assert done["k2"].content.startswith("# Deploy")
    for call_id in ("k3", "k4"):
        assert done[call_id].status == x_pb2.EXECUTION_STATUS_ERROR
        assert "Available skills: deploy, review." in done[call_id].content
    # Built-in: decided like every tool, never sent to the executor.
    assert {r.call.tool_name for r in harness.decision.requests} == {"load_skill"}
    assert harness.executor.inspected == [] and harness.executor.executed == []


async def test_a_fifo_skill_does_not_hang_the_turn(harness: Harness, skills: Path) -> None:
    os.mkfifo(skills / "pipe.md")
    provider = ListProvider([turn(ModelToolCall("k1", "load_skill", {"name": "pipe"}))])
    events = await asyncio.wait_for(run(harness.core(provider, skills=SkillLibrary(skills))), 10)
    assert "not a regular file" in finished(events)["k1"].content


async def test_explore_subagents_may_load_skills(harness: Harness, skills: Path) -> None:
    provider = ListProvider(
        [
            turn(ModelToolCall("s1", "subagent", {"task": "look", "profile": "explore"})),
            turn(ModelToolCall("k1", "load_skill", {"name": "review"})),
            ModelTurn(text="child done"),
        ]
    )
    events = await run(harness.core(provider, skills=SkillLibrary(skills)))
    assert finished(events)["k1"].content.startswith("# Review")


def test_settings_offer_load_skill_only_with_a_folder(
    monkeypatch: pytest.MonkeyPatch, skills: Path, tmp_path: Path
) -> None:
    assert "load_skill" not in offered_registry(default_registry()).names()
    monkeypatch.setenv("STOCKADE_AGENT_SKILLS_DIR", str(skills))
    settings = load_settings(AgentSettings)
    assert settings.skills_dir == skills
    assert AgentApp(settings).settings.skills_dir == skills
    monkeypatch.setenv("STOCKADE_AGENT_SKILLS_DIR", str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match="SKILLS_DIR"):
        load_settings(AgentSettings)
