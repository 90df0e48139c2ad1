"""glob_files and grep_files: matching, caps, symlinks never followed out of the roots."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from stockade.executor.paths import PathSandbox, Root
from stockade.executor.readstate import ReadState
from stockade.executor.tools import file_tools
from stockade.executor.tools.base import ExecContext, Status, ToolLimits, ToolResult
from stockade.executor.tools.glob import split_glob
from stockade.executor.tools.support import expand_braces


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / ".git").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("SECRET_TOKEN = 1\n")
    (root / "src" / "a.py").write_text("import os\nTOKEN = 'x'\n")
    (root / "src" / "pkg" / "b.py").write_text("def f():\n    return 'token'\n")
    (root / "src" / "c.ts").write_text("const token = 1;\n")
    (root / "src" / "d.tsx").write_text("<Token />\n")
    (root / "docs" / "readme.md").write_text("# Token docs\n")
    (root / ".git" / "config").write_text("token in git config\n")
    (root / "bin.dat").write_bytes(b"token\x00\x01")
    os.symlink(outside, root / "escape_dir")
    os.symlink(outside / "leak.py", root / "src" / "leak_link.py")
    os.symlink(root / "src" / "a.py", root / "src" / "alias.py")
    # Deterministic mtimes: newest first ordering.
    for i, rel in enumerate(
        ["src/a.py", "src/pkg/b.py", "src/c.ts", "src/d.tsx", "docs/readme.md"]
    ):
        t = time.time() - 1000 + i * 10
        os.utime(root / rel, (t, t))
    return root


def make_ctx(ws: Path, **kw: Any) -> ExecContext:
    sandbox = PathSandbox(
        [Root(str(ws), True)], str(ws), denied_read_globs=kw.pop("denied_read_globs", ())
    )
    limits = ToolLimits(library_dir=None, max_output_chars=100_000, max_file_write_bytes=1 << 20)
    return ExecContext(
        session_id="s",
        call_id="c",
        working_dir=str(ws),
        sandbox=sandbox,
        read_state=ReadState(),
        limits=limits,
    )


async def run(tool: str, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
    items = [item async for item in file_tools()[tool].run(args, ctx)]
    result = items[-1]
    assert isinstance(result, ToolResult)
    return result


def test_split_glob() -> None:
    assert split_glob("/srv/ws/src/**/*.py") == ("/srv/ws/src", "**/*.py")
    assert split_glob("*.md") == ("", "*.md")
    assert split_glob("src/*.py") == ("src", "*.py")
    assert split_glob("/*.py") == ("/", "*.py")
    assert split_glob("a/b/c.txt") == ("a/b", "c.txt")


def test_expand_braces() -> None:
    assert expand_braces("*.{ts,tsx}") == ["*.ts", "*.tsx"]
    assert expand_braces("{a,b}/{c,d}") == ["a/c", "a/d", "b/c", "b/d"]
    assert expand_braces("plain") == ["plain"]
    assert expand_braces("x{y}z") == ["x{y}z"]


async def test_glob_recursive_newest_first(ws: Path) -> None:
    res = await run("glob_files", {"pattern": "**/*.py"}, make_ctx(ws))
    assert res.status is Status.OK
    lines = res.content.splitlines()
    # b.py is newer than a.py, so it comes first.
    assert lines.index(str(ws / "src" / "pkg" / "b.py")) < lines.index(str(ws / "src" / "a.py"))
    assert str(ws / "src" / "alias.py") in lines  # symlink inside the root: listed
    assert not any("leak" in line for line in lines)  # symlink out: not listed
    assert not any("escape_dir" in line for line in lines)  # never walked


async def test_glob_single_level_and_braces(ws: Path) -> None:
    res = await run("glob_files", {"pattern": "*.{ts,tsx}", "path": "src"}, make_ctx(ws))
    assert sorted(res.content.splitlines()) == [str(ws / "src" / "c.ts"), str(ws / "src" / "d.tsx")]
    res = await run("glob_files", {"pattern": "src/*.py"}, make_ctx(ws))
    assert str(ws / "src" / "pkg" / "b.py") not in res.content.splitlines()


async def test_glob_absolute_inside_and_outside(ws: Path) -> None:
    res = await run("glob_files", {"pattern": f"{ws}/docs/*.md"}, make_ctx(ws))
    assert res.content == str(ws / "docs" / "readme.md")
    res = await run("glob_files", {"pattern": "/etc/*"}, make_ctx(ws))
    assert res.status is Status.REFUSED
    res = await run("glob_files", {"pattern": "escape_dir/*.py"}, make_ctx(ws))
    assert res.status is Status.REFUSED and "SECRET" not in res.content
    res = await run("glob_files", {"pattern": "../outside/*"}, make_ctx(ws))
    assert res.status is Status.REFUSED
    res = await run("glob_files", {"pattern": "src/**/../../*"}, make_ctx(ws))
    assert res.status is Status.REFUSED


async def test_glob_cap_and_no_match(ws: Path) -> None:
    for i in range(30):
        (ws / "docs" / f"n{i:02}.txt").write_text("")
    res = await run("glob_files", {"pattern": "docs/*.txt", "limit": 10}, make_ctx(ws))
    lines = res.content.splitlines()
    assert len(lines) == 11 and "20 more files" in lines[-1]
    res = await run("glob_files", {"pattern": "**/*.rs"}, make_ctx(ws))
    assert res.status is Status.OK and res.content == "No files found"


async def test_glob_hides_policy_denied(ws: Path) -> None:
    (ws / ".env").write_text("K=1")
    res = await run("glob_files", {"pattern": "*"}, make_ctx(ws, denied_read_globs=["**/.env"]))
    assert str(ws / ".env") not in res.content.splitlines()
    assert str(ws / "bin.dat") in res.content.splitlines()


async def test_grep_content_with_line_numbers(ws: Path) -> None:
    res = await run("grep_files", {"pattern": "TOKEN"}, make_ctx(ws))
    assert res.status is Status.OK
    assert f"{ws}/src/a.py:2:TOKEN = 'x'" in res.content.splitlines()
    assert "leak" not in res.content and "SECRET" not in res.content
    assert ".git" not in res.content  # VCS internals skipped
    assert "bin.dat" not in res.content  # binary skipped


async def test_grep_case_insensitive_and_glob_filter(ws: Path) -> None:
    res = await run(
        "grep_files",
        {
            "pattern": "token",
            "case_insensitive": True,
            "glob": "*.{ts,tsx}",
            "output_mode": "files_with_matches",
        },
        make_ctx(ws),
    )
    assert sorted(res.content.splitlines()) == [str(ws / "src" / "c.ts"), str(ws / "src" / "d.tsx")]
    res = await run(
        "grep_files",
        {"pattern": "token", "-i": True, "glob": "src/**/*.py", "output_mode": "count"},
        make_ctx(ws),
    )
    counts = dict(line.rsplit(":", 1) for line in res.content.splitlines())
    assert counts[str(ws / "src" / "a.py")] == "1"
    assert counts[str(ws / "src" / "pkg" / "b.py")] == "1"


async def test_grep_single_file_and_symlinked_path(ws: Path) -> None:
    res = await run("grep_files", {"pattern": "import", "path": "src/a.py"}, make_ctx(ws))
    assert res.content == f"{ws}/src/a.py:1:import os"
    res = await run("grep_files", {"pattern": "SECRET", "path": "src/leak_link.py"}, make_ctx(ws))
    assert res.status is Status.REFUSED and "SECRET_TOKEN" not in res.content
    res = await run("grep_files", {"pattern": "SECRET", "path": "escape_dir"}, make_ctx(ws))
    assert res.status is Status.REFUSED


async def test_grep_cap(ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * 50)
    res = await run("grep_files", {"pattern": "hit", "max_results": 5}, make_ctx(ws))
    lines = res.content.splitlines()
    assert len(lines) == 6 and "capped at 5" in lines[-1]


async def test_grep_errors(ws: Path) -> None:
    res = await run("grep_files", {"pattern": "("}, make_ctx(ws))
    assert res.status is Status.ERROR and "invalid regular expression" in res.error
    res = await run("grep_files", {"pattern": "x", "output_mode": "lines"}, make_ctx(ws))
    assert res.status is Status.ERROR
    res = await run("grep_files", {"pattern": "zzz_nothing"}, make_ctx(ws))
    assert res.content == "No matches found"


async def test_grep_skips_policy_denied_files(ws: Path) -> None:
    (ws / ".env").write_text("TOKEN=supersecret\n")
    res = await run(
        "grep_files", {"pattern": "supersecret"}, make_ctx(ws, denied_read_globs=["**/.env"])
    )
    assert res.content == "No matches found"


def _matcher_children() -> list[int]:
    """Live child processes of this test process running the regex matcher."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"-I\0-S\0-c\0" in cmd:
            pids.append(int(entry))
    return pids


async def test_grep_catastrophic_regex_times_out_without_freezing(ws: Path) -> None:
    (ws / "evil.txt").write_text("a" * 40 + "b\n")
    ctx = make_ctx(ws)
    ctx.timeout_s = 0.5
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    res = await run("grep_files", {"pattern": r"(a+)+$", "path": "evil.txt"}, ctx)
    stop.set()
    await task
    assert res.status is Status.TIMEOUT and "did not finish" in res.error
    assert ticks > 1  # the event loop kept running while the pattern backtracked
    assert _matcher_children() == []


async def test_grep_cancelled_task_kills_matcher(ws: Path) -> None:
    (ws / "evil.txt").write_text("a" * 40 + "b\n")
    ctx = make_ctx(ws)
    gen = file_tools()["grep_files"].run({"pattern": r"(a+)+$", "path": "evil.txt"}, ctx)
    task = asyncio.ensure_future(gen.__anext__())
    for _ in range(500):
        await asyncio.sleep(0.01)
        if _matcher_children():
            break
    assert _matcher_children()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _matcher_children() == []


async def test_glob_walk_race_never_lists_outside(tmp_path: Path) -> None:
    """A folder flips between a real directory and a symlink out of the roots while
    glob_files walks: names from outside must never be listed."""
    ws = tmp_path / "race_ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "inside.txt").write_text("")
    outside = tmp_path / "race_out"
    outside.mkdir()
    (outside / "OUTSIDE_NAME.txt").write_text("")
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            os.rename(ws / "d", ws / "d.parked")
            os.symlink(outside, ws / "d")
            time.sleep(0.0002)  # hold each state a moment so the walker meets both
            os.unlink(ws / "d")
            os.rename(ws / "d.parked", ws / "d")
            time.sleep(0.0002)

    flipper = threading.Thread(target=flip)
    flipper.start()
    seen: set[str] = set()
    try:
        ctx = make_ctx(ws)
        for _ in range(3000):
            res = await run("glob_files", {"pattern": "**/*.txt"}, ctx)
            seen.update(res.content.splitlines())
    finally:
        stop.set()
        flipper.join()
    assert not any("OUTSIDE_NAME" in line for line in seen)
