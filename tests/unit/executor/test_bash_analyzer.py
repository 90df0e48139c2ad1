"""The BashAnalyzer's life cycle in the executor: the composition opens it (its child
parser started), closes it on exit (the child reaped), and a non-ASCII Inspect waits for
the child in a thread, never on the event loop."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from stockade.executor.app import build_core, executor_servicer
from stockade.executor.bash import BashAnalyzer
from stockade.executor.bash.isolated import IsolatedParser
from stockade.executor.confine import Launcher
from stockade.executor.paths import PathSandbox, Root
from stockade.executor.servicer import ExecutorServicer
from stockade.executor.settings import ExecutorSettings
from stockade.executor.tools.run_bash import RunBashTool

# A child that says it is ready and then never answers: a parse waits its full limit.
_HUNG = "import sys, time; sys.stdout.buffer.write(b'R'); sys.stdout.flush(); time.sleep(60)"


async def test_the_executor_opens_and_closes_its_analyzer(tmp_path: Path) -> None:
    settings = ExecutorSettings(listen="127.0.0.1:0", workspace=tmp_path, allow_ungranted=True)
    async with executor_servicer(settings) as servicer:
        child = servicer.core.analyzer._isolated
        assert child is not None
        proc = child._proc
        assert proc is not None and proc.poll() is None  # warmed at start
        inspection = await servicer.core.inspect_async("run_bash", {"command": "cat café.txt"})
        assert inspection.verdict == "allow"
        assert child._proc is proc  # the long-lived child parsed it
    assert child._proc is None
    assert proc.returncode is not None  # stopped and reaped with the executor


async def test_a_non_ascii_inspect_does_not_block_the_event_loop(tmp_path: Path) -> None:
    hung = IsolatedParser([sys.executable, "-c", _HUNG], timeout_s=1.0)
    with BashAnalyzer(parser=hung) as analyzer:
        assert analyzer.warm()
        settings = ExecutorSettings(listen="127.0.0.1:0", workspace=tmp_path, allow_ungranted=True)
        sandbox = PathSandbox([Root(str(tmp_path), True)], str(tmp_path))
        # run_bash is inspected, never run here: its launcher is not started.
        tool = RunBashTool(Launcher(), analyzer=analyzer)
        servicer = ExecutorServicer(
            build_core(settings, sandbox, tools={"run_bash": tool}, analyzer=analyzer)
        )
        inspect = asyncio.create_task(
            servicer.core.inspect_async("run_bash", {"command": "echo é"})
        )
        # The task runs until its first real wait: had the parse run on the loop, it
        # would have finished (after the child's full time limit) before this line.
        await asyncio.sleep(0)
        assert not inspect.done()
        inspection = await inspect
        assert inspection.verdict == "deny"  # the hung child: refused, fail closed
        assert "isolated process" in inspection.explanation + " ".join(
            rule.reason for rule in inspection.rules
        )
    assert hung._proc is None


def test_a_symlink_planted_between_two_analyses_is_seen(tmp_path: Path) -> None:
    """Nothing of a path's resolution is kept from one analysis to the next: a directory
    swapped for a symlink out of the workspace after an ALLOW is refused on the next
    analysis of the same text, by the same analyzer (its parse is kept; the judgement is
    made again against the file system as it is now)."""
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "notes.txt").write_text("fine\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("secret\n")
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    with BashAnalyzer(isolated=False) as analyzer:
        for command in ("cat docs/notes.txt", "echo x > docs/notes.txt", "cat docs/new.txt"):
            assert analyzer.analyze(command, sandbox=sandbox).verdict in ("allow", "ask")
        (ws / "docs" / "notes.txt").unlink()
        (ws / "docs").rmdir()
        (ws / "docs").symlink_to(outside)
        read = analyzer.analyze("cat docs/notes.txt", sandbox=sandbox)
        assert read.verdict != "allow"
        assert any("outside the allowed roots" in r for r in read.reasons), read.reasons
        write = analyzer.analyze("echo x > docs/notes.txt", sandbox=sandbox)
        assert write.verdict == "deny", write.reasons
        missing = analyzer.analyze("cat docs/new.txt", sandbox=sandbox)
        assert missing.verdict != "allow", missing.reasons
        # ... and a link in the last component, planted after the first analysis.
        (ws / "plain.txt").write_text("x\n")
        assert analyzer.analyze("cat plain.txt", sandbox=sandbox).verdict == "allow"
        (ws / "plain.txt").unlink()
        (ws / "plain.txt").symlink_to(outside / "notes.txt")
        assert analyzer.analyze("cat plain.txt", sandbox=sandbox).verdict != "allow"


def test_home_is_read_from_the_environment_at_every_analysis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analyzer reads $HOME from os.environ's own store (cheaper than os.environ.get):
    it must follow every change made through os.environ, as os.environ.get would."""
    from stockade.executor.bash.analyzer import _home_variable

    ws = tmp_path / "ws"
    ws.mkdir()
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    analyzer = BashAnalyzer(isolated=False, parse_cache=0)
    monkeypatch.setenv("HOME", str(ws))
    assert _home_variable() == str(ws)
    inside = analyzer.analyze("cat ~/notes.txt", sandbox=sandbox)
    assert inside.verdict == "allow"
    assert inside.paths_read == (str(ws / "notes.txt"),)
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    assert _home_variable() == os.environ.get("HOME") == str(tmp_path / "elsewhere")
    outside = analyzer.analyze("cat ~/notes.txt", sandbox=sandbox)
    assert outside.paths_read == (str(tmp_path / "elsewhere" / "notes.txt"),)
    assert outside.verdict != "allow"
    os.environb[b"HOME"] = b"/tmp/caf\xe9"  # not UTF-8: decoded as os.environ decodes it
    assert _home_variable() == os.environ.get("HOME") == "/tmp/caf\udce9"
    monkeypatch.delenv("HOME")
    assert _home_variable() is None
