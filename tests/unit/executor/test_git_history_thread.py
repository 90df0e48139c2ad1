"""The git history reader (githistory.py: up to 5,000 objects inflated for one question)
runs beside the event loop, never on it: a git command judged under protected reads is
analysed in a thread by Execute (analyze_async) and by Inspect (parses_in_child), while
every other ASCII command stays inline. The in-process parser, shared by every analyzer, is
used by one thread at a time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from stockade.executor.bash import BashAnalyzer, githistory
from stockade.executor.inspect import parses_in_child
from stockade.executor.paths import PathSandbox, Root
from tests.hostgit import host_git

DENIED = ("**/.env",)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    host_git(ws, "init", "-q", ".")
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("print(1)\n")
    (ws / ".env").write_text("TOKEN=x\n")
    host_git(ws, "add", "-A")
    host_git(ws, "commit", "-qm", "c")
    # Only the history holds it now (the index no longer does): the reader must look.
    host_git(ws, "rm", "-q", "--cached", ".env")
    host_git(ws, "commit", "-qm", "untrack")
    return ws


@pytest.fixture
def history_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of every call of the history reader."""
    seen: list[int] = []
    real = githistory._hash_length  # the reader's first look at a repository

    def spy(git_dir: str) -> int:
        seen.append(threading.get_ident())
        return real(git_dir)

    # githistory is plain Python (the compiled analysis calls into it): patchable.
    monkeypatch.setattr(githistory, "_hash_length", spy)
    return seen


async def test_history_is_read_off_the_event_loop(repo: Path, history_threads: list[int]) -> None:
    loop_thread = threading.get_ident()
    sandbox = PathSandbox([Root(str(repo), True)], str(repo))
    with BashAnalyzer(isolated=False) as analyzer:
        analysis = await analyzer.analyze_async(
            "git log -p", sandbox=sandbox, denied_read_globs=DENIED
        )
    assert analysis.verdict == "ask" and "policy denies reading" in analysis.reasons[0]
    assert history_threads and loop_thread not in history_threads


async def test_other_commands_stay_inline(repo: Path, history_threads: list[int]) -> None:
    """Judged on the loop (no thread hop): ASCII commands without git, and git without
    protected reads (no history question is asked then)."""
    sandbox = PathSandbox([Root(str(repo), True)], str(repo))
    assert not BashAnalyzer.judged_in_thread("ls -la src", DENIED)
    assert not BashAnalyzer.judged_in_thread("git log -p", ())
    assert BashAnalyzer.judged_in_thread("git log -p", DENIED)
    assert BashAnalyzer.judged_in_thread("echo é", ())
    with BashAnalyzer(isolated=False) as analyzer:
        result = await analyzer.analyze_async("git log -p", sandbox=sandbox)
    assert result.verdict == "allow" and not history_threads


def test_inspect_takes_the_thread_for_the_same_commands() -> None:
    assert parses_in_child("run_bash", {"command": "git show HEAD"}, DENIED)
    assert parses_in_child("run_bash", {"command": "ls é"})
    assert not parses_in_child("run_bash", {"command": "git show HEAD"})
    assert not parses_in_child("run_bash", {"command": "cat src/a.py"}, DENIED)
    assert not parses_in_child("read_file", {"command": "git log -p"}, DENIED)


async def test_threads_and_inline_analyses_agree(repo: Path) -> None:
    """Git commands judged in threads while others are judged inline, all at once, with
    no parse cache (every command parsed, in both places): each verdict is the one a
    lone synchronous analysis gives."""
    sandbox = PathSandbox([Root(str(repo), True)], str(repo))
    commands: Sequence[str] = (
        "git log -p",
        "git log -p -- src",
        "cat src/a.py | grep print",
        "git show HEAD:.env",
        "ls -la; echo done",
        "git diff HEAD -- src",
        "rm -rf ~",
    ) * 6
    with BashAnalyzer(isolated=False, parse_cache=0) as analyzer:
        expected = [
            analyzer.analyze(c, sandbox=sandbox, denied_read_globs=DENIED).verdict for c in commands
        ]
        got = await asyncio.gather(
            *(
                analyzer.analyze_async(c, sandbox=sandbox, denied_read_globs=DENIED)
                for c in commands
            )
        )
    assert [a.verdict for a in got] == expected
    assert set(expected) == {"allow", "ask", "deny"}
