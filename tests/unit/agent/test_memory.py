"""Durable save_memory: a JSON-lines file on real files (no filesystem mocks)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from stockade.agent.memory import (
    FILE_NAME,
    MAX_ENTRY_CHARS,
    MemoryEntry,
    MemoryRefused,
    MemoryStore,
    prompt_section,
)
from stockade.agent.settings import AgentSettings
from stockade.llm.base import ModelToolCall, ModelTurn
from stockade.server import load_settings
from stockade.v1 import executor_service_pb2 as x_pb2
from tests.unit.agent.conftest import Harness, ListProvider, finished, run

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def save(content: str, call_id: str = "m1") -> ModelTurn:
    return ModelTurn(
        text="",
        tool_calls=(ModelToolCall(call_id, "save_memory", {"content": content}),),
        prompt_tokens=10,
        completion_tokens=5,
    )


def lines(directory: Path) -> list[dict[str, str]]:
    raw = (directory / FILE_NAME).read_text()
    assert raw.endswith("\n")
    return [json.loads(line) for line in raw.splitlines()]


def system_prompt(provider: ListProvider) -> str:
    messages, _ = provider.requests[0]
    assert messages[0].role == "system"
    return messages[0].content


# ------------------------------------------------------------------ the store


def test_append_then_load(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem")
    saved = store.append(session_id="s1", agent="lead", content="the build uses make")
    store.append(session_id="s2", agent="sub-general-1", content="tests live in tests/")
    (first, second) = lines(tmp_path / "mem")
    assert set(first) == {"time", "session_id", "agent", "content"}
    assert (first["session_id"], first["agent"], first["content"]) == (
        "s1",
        "lead",
        "the build uses make",
    )
    assert first["time"].endswith("+00:00")
    assert saved.bytes_used == len((json.dumps(first) + "\n").encode())
    assert [e.content for e in store.load()] == ["the build uses make", "tests live in tests/"]
    assert stat.S_IMODE(os.stat(tmp_path / "mem" / FILE_NAME).st_mode) == 0o600
    assert MemoryStore(tmp_path / "empty").load() == []


def test_secrets_are_masked_before_they_reach_the_disk(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    saved = store.append(session_id="s1", agent="lead", content=f"deploy key is {AWS_KEY}")
    raw = (tmp_path / FILE_NAME).read_text()
    assert AWS_KEY not in raw and "[REDACTED:aws_access_key]" in raw
    assert saved.masked == ("aws_access_key",)


def test_size_limits(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, max_file_bytes=1_000)
    with pytest.raises(MemoryRefused, match=f"at most {MAX_ENTRY_CHARS} characters"):
        store.append(session_id="s", agent="lead", content="x" * (MAX_ENTRY_CHARS + 1))
    with pytest.raises(MemoryRefused, match="nothing to save"):
        store.append(session_id="s", agent="lead", content="  \n")
    store.append(session_id="s", agent="lead", content="y" * 800)
    with pytest.raises(MemoryRefused, match="memory is full"):
        store.append(session_id="s", agent="lead", content="z" * 200)
    assert [len(e.content) for e in store.load()] == [800]  # nothing half-written


def test_a_torn_last_line_is_skipped_and_the_next_entry_is_intact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore(tmp_path)
    store.append(session_id="s1", agent="lead", content="first fact")
    with open(tmp_path / FILE_NAME, "ab") as f:  # a crash in the middle of a write
        f.write(b'{"time": "2026-11-30T00:00:00+00:00", "session_id": "s1", "content": "sec')
    with caplog.at_level(logging.WARNING, logger="stockade.agent.memory"):
        assert [e.content for e in store.load()] == ["first fact"]
    assert "torn last line" in caplog.text and "sec" not in caplog.text.split(FILE_NAME)[-1]
    store.append(session_id="s2", agent="lead", content="second fact")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stockade.agent.memory"):
        assert [e.content for e in store.load()] == ["first fact", "second fact"]
    assert "line 2" in caplog.text  # the torn line stays skipped, on a line of its own


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    other = MemoryStore(tmp_path)  # a second agent process on the same folder
    barrier = threading.Barrier(8)

    def writer(index: int) -> None:
        target = store if index % 2 else other
        barrier.wait()
        for n in range(10):
            target.append(session_id=f"s{index}", agent="lead", content=f"{index}-{n}" * 150)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = lines(tmp_path)  # every line parses
    assert sorted(e["content"] for e in entries) == sorted(
        f"{i}-{n}" * 150 for i in range(8) for n in range(10)
    )


def test_prompt_section_keeps_the_newest_entries_oldest_first() -> None:
    entries = [MemoryEntry("t", "s", "lead", f"fact {i} " + "x" * 90) for i in range(200)]
    section = prompt_section(entries, budget_chars=1_000)
    assert section.startswith("Saved memory:\n")
    bullets = [line for line in section.splitlines() if line.startswith("- ")]
    assert 5 <= len(bullets) <= 10 and len(section) < 1_200
    assert bullets[-1].startswith("- fact 199 ") and bullets[0].startswith(
        f"- fact {200 - len(bullets)} "
    )
    assert prompt_section([]) == ""
    multi = prompt_section([MemoryEntry("t", "s", "lead", f"a\nb {AWS_KEY}")])
    assert multi.endswith("- a\n  b [REDACTED:aws_access_key]")  # masked again when shown


# ------------------------------------------------------------------ in the agent


async def test_memory_survives_a_restart_and_opens_the_next_turn(
    harness: Harness, tmp_path: Path
) -> None:
    first = ListProvider([save("The user prefers tabs.", "m1"), save(f"key {AWS_KEY}", "m2")])
    events = await run(harness.core(first, memory=MemoryStore(tmp_path)), session_id="s1")
    done = finished(events)
    assert done["m1"].status == x_pb2.EXECUTION_STATUS_OK
    assert "later sessions will see it" in done["m1"].content
    assert "Secrets in it were masked" in done["m2"].content
    assert "Saved memory" not in system_prompt(first)  # nothing was saved before this turn

    second = ListProvider([])  # a new AgentCore: the agent restarted
    await run(harness.core(second, memory=MemoryStore(tmp_path)), session_id="s2")
    prompt = system_prompt(second)
    assert prompt.startswith("You are a careful assistant.")
    assert prompt.endswith("- The user prefers tabs.\n- key [REDACTED:aws_access_key]")
    assert AWS_KEY not in (tmp_path / FILE_NAME).read_text()
    assert [e["session_id"] for e in lines(tmp_path)] == ["s1", "s1"]


async def test_refusals_are_error_results(harness: Harness, tmp_path: Path) -> None:
    provider = ListProvider([save("x" * (MAX_ENTRY_CHARS + 1)), save("ok", "m2")])
    core = harness.core(provider, memory=MemoryStore(tmp_path, max_file_bytes=50))
    done = finished(await run(core))
    assert done["m1"].status == x_pb2.EXECUTION_STATUS_ERROR
    assert "at most 2000 characters" in done["m1"].content
    assert done["m2"].status == x_pb2.EXECUTION_STATUS_ERROR
    assert "memory is full" in done["m2"].content


async def test_two_sessions_save_at_once(harness: Harness, tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    providers = {
        sid: ListProvider([save(f"{sid} fact {n}", f"m{n}") for n in range(5)])
        for sid in ("a", "b")
    }
    await asyncio.gather(
        *(run(harness.core(p, memory=store), session_id=sid) for sid, p in providers.items())
    )
    entries = lines(tmp_path)
    assert sorted(e["content"] for e in entries) == sorted(
        f"{sid} fact {n}" for sid in ("a", "b") for n in range(5)
    )


async def test_general_subagents_save_and_explore_ones_cannot(
    harness: Harness, tmp_path: Path
) -> None:
    def subagent(call_id: str, profile: str) -> ModelTurn:
        arguments = {"task": "remember", "profile": profile}
        return ModelTurn(text="", tool_calls=(ModelToolCall(call_id, "subagent", arguments),))

    provider = ListProvider(
        [
            subagent("g", "general"),
            save("from the general child", "gm"),
            ModelTurn(text="child done"),
            subagent("e", "explore"),
            save("from the explore child", "em"),
            ModelTurn(text="child done"),
        ]
    )
    done = finished(await run(harness.core(provider, memory=MemoryStore(tmp_path))))
    assert done["gm"].status == x_pb2.EXECUTION_STATUS_OK
    assert "unknown tool 'save_memory'" in done["em"].content
    (entry,) = lines(tmp_path)
    assert entry["content"] == "from the general child"
    assert entry["agent"].startswith("sub-general-")


async def test_without_a_memory_folder_memory_stays_in_the_session(harness: Harness) -> None:
    provider = ListProvider([save("a fact")])
    done = finished(await run(harness.core(provider)))
    assert done["m1"].content == (
        "Saved to this session's memory (1 entries) (not persisted: no memory_dir configured)."
    )
    second = ListProvider([])
    await run(harness.core(second))
    assert "Saved memory" not in system_prompt(second)


def test_memory_dir_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert load_settings(AgentSettings).memory_dir is None
    monkeypatch.setenv("STOCKADE_AGENT_MEMORY_DIR", str(tmp_path / "memory"))
    assert load_settings(AgentSettings).memory_dir == tmp_path / "memory"
