"""Behaviour of the file tools: read_file, file_write, file_edit (real files in tmp_path)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from stockade.executor.paths import PathSandbox, Root
from stockade.executor.readstate import ReadState
from stockade.executor.tools import file_tools
from stockade.executor.tools.base import Chunk, ExecContext, Status, ToolLimits, ToolResult


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("TOP SECRET\n")
    return root


def make_ctx(ws: Path, *, session: str = "s1", call: str = "c1", **settings: Any) -> ExecContext:
    lib = ws.parent / "lib"
    lib.mkdir(exist_ok=True)
    sandbox = PathSandbox(
        [Root(str(ws), True), Root(str(lib), True)],
        str(ws),
        denied_read_globs=settings.pop("denied_read_globs", ()),
    )
    limits = ToolLimits(
        library_dir=str(lib),
        max_output_chars=settings.pop("max_output_chars", 4000),
        max_file_write_bytes=settings.pop("max_file_write_bytes", 1024 * 1024),
    )
    state = settings.pop("read_state", None) or ReadState()
    return ExecContext(
        session_id=session,
        call_id=call,
        working_dir=str(ws),
        sandbox=sandbox,
        read_state=state,
        limits=limits,
    )


async def run(tool: str, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
    items: list[Chunk | ToolResult] = [item async for item in file_tools()[tool].run(args, ctx)]
    assert isinstance(items[-1], ToolResult)
    assert all(isinstance(i, Chunk) for i in items[:-1])
    return items[-1]


# --- read_file -----------------------------------------------------------------------


async def test_read_numbers_lines_like_cat_n(ws: Path) -> None:
    (ws / "a.txt").write_text("alpha\nbeta\ngamma\n")
    res = await run("read_file", {"file_path": "a.txt"}, make_ctx(ws))
    assert res.status is Status.OK
    assert res.content == "     1\talpha\n     2\tbeta\n     3\tgamma"


async def test_read_offset_and_limit(ws: Path) -> None:
    (ws / "a.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    res = await run("read_file", {"file_path": "a.txt", "offset": 4, "limit": 2}, make_ctx(ws))
    assert res.content.splitlines()[:2] == ["     4\tline4", "     5\tline5"]
    assert "5 more lines" in res.content and "offset=6" in res.content


async def test_read_offset_as_float_from_struct(ws: Path) -> None:
    (ws / "a.txt").write_text("x\ny\n")
    res = await run("read_file", {"file_path": "a.txt", "offset": 2.0}, make_ctx(ws))
    assert res.content == "     2\ty"


async def test_read_offset_past_end(ws: Path) -> None:
    (ws / "a.txt").write_text("x\n")
    res = await run("read_file", {"file_path": "a.txt", "offset": 9}, make_ctx(ws))
    assert res.status is Status.OK and "past the end" in res.content


async def test_read_bad_arguments(ws: Path) -> None:
    ctx = make_ctx(ws)
    assert (await run("read_file", {}, ctx)).status is Status.ERROR
    res = await run("read_file", {"file_path": "a", "limit": 0}, ctx)
    assert res.status is Status.ERROR and "limit" in res.error
    res = await run("read_file", {"file_path": "a", "offset": 1.5}, ctx)
    assert res.status is Status.ERROR
    res = await run("read_file", {"file_path": 3}, ctx)
    assert res.status is Status.ERROR


async def test_read_binary_detected(ws: Path) -> None:
    (ws / "b.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    res = await run("read_file", {"file_path": "b.bin"}, make_ctx(ws))
    assert res.status is Status.ERROR and "binary" in res.error


async def test_read_empty_and_missing_and_directory(ws: Path) -> None:
    ctx = make_ctx(ws)
    (ws / "e.txt").write_text("")
    assert "is empty" in (await run("read_file", {"file_path": "e.txt"}, ctx)).content
    res = await run("read_file", {"file_path": "nope.txt"}, ctx)
    assert res.status is Status.ERROR and "does not exist" in res.error
    (ws / "d").mkdir()
    res = await run("read_file", {"file_path": "d"}, ctx)
    assert res.status is Status.ERROR and "directory" in res.error


async def test_read_crlf_and_long_lines(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\n" + b"z" * 5000 + b"\n")
    res = await run("read_file", {"file_path": "w.txt"}, make_ctx(ws, max_output_chars=10_000))
    lines = res.content.splitlines()
    assert lines[0] == "     1\tone" and lines[1] == "     2\ttwo"
    assert "line cut at 2000" in lines[2] and len(lines[2]) < 2100


async def test_read_refuses_outside_and_symlink_out(ws: Path) -> None:
    ctx = make_ctx(ws)
    res = await run("read_file", {"file_path": str(ws.parent / "outside" / "secret.txt")}, ctx)
    assert res.status is Status.REFUSED and "TOP SECRET" not in res.content
    os.symlink(ws.parent / "outside" / "secret.txt", ws / "innocent.txt")
    res = await run("read_file", {"file_path": "innocent.txt"}, ctx)
    assert res.status is Status.REFUSED and "TOP SECRET" not in res.content
    res = await run("read_file", {"file_path": "../outside/secret.txt"}, ctx)
    assert res.status is Status.REFUSED


async def test_read_follows_symlink_inside_root(ws: Path) -> None:
    (ws / "real.txt").write_text("hello\n")
    os.symlink("real.txt", ws / "alias.txt")
    res = await run("read_file", {"file_path": "alias.txt"}, make_ctx(ws))
    assert res.status is Status.OK and res.content == "     1\thello"


async def test_read_refuses_policy_denied(ws: Path) -> None:
    (ws / ".env").write_text("KEY=1\n")
    res = await run("read_file", {"file_path": ".env"}, make_ctx(ws, denied_read_globs=["**/.env"]))
    assert res.status is Status.REFUSED and "KEY=1" not in res.content


async def test_read_fifo_does_not_hang(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    res = await run("read_file", {"file_path": "pipe"}, make_ctx(ws))
    assert res.status is Status.REFUSED and "not a regular file" in res.error


async def test_read_large_output_truncated_and_persisted(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"row {i}\n" for i in range(3000)))
    ctx = make_ctx(ws, call="call-big", max_output_chars=1000)
    res = await run("read_file", {"file_path": "big.txt"}, ctx)
    assert res.truncated and len(res.content) <= 1000
    assert res.persisted_path.endswith(f"tool-results/{ctx.session_id}/call-big.txt")
    saved = Path(res.persisted_path).read_text()
    assert "row 1999" in saved and "offset=2001" in saved
    assert res.persisted_path in res.content


# --- file_write ------------------------------------------------------------------------


async def test_write_creates_new_file_and_parents(ws: Path) -> None:
    res = await run("file_write", {"file_path": "new/deep/f.txt", "content": "hi"}, make_ctx(ws))
    assert res.status is Status.OK and "Created" in res.content
    assert (ws / "new" / "deep" / "f.txt").read_text() == "hi"


async def test_write_existing_needs_read_first(ws: Path) -> None:
    (ws / "f.txt").write_text("old")
    ctx = make_ctx(ws)
    res = await run("file_write", {"file_path": "f.txt", "content": "new"}, ctx)
    assert res.status is Status.ERROR and "not been read" in res.error
    assert (ws / "f.txt").read_text() == "old"
    await run("read_file", {"file_path": "f.txt"}, ctx)
    res = await run("file_write", {"file_path": "f.txt", "content": "new"}, ctx)
    assert res.status is Status.OK and (ws / "f.txt").read_text() == "new"


async def test_write_refused_when_changed_since_read(ws: Path) -> None:
    (ws / "f.txt").write_text("old")
    ctx = make_ctx(ws)
    await run("read_file", {"file_path": "f.txt"}, ctx)
    (ws / "f.txt").write_text("changed by someone else")
    res = await run("file_write", {"file_path": "f.txt", "content": "mine"}, ctx)
    assert res.status is Status.ERROR and "changed since" in res.error
    assert (ws / "f.txt").read_text() == "changed by someone else"


async def test_write_read_in_other_session_does_not_count(ws: Path) -> None:
    (ws / "f.txt").write_text("old")
    state = ReadState()
    await run("read_file", {"file_path": "f.txt"}, make_ctx(ws, session="A", read_state=state))
    ctx_b = make_ctx(ws, session="B", read_state=state)
    res = await run("file_write", {"file_path": "f.txt", "content": "x"}, ctx_b)
    assert res.status is Status.ERROR and (ws / "f.txt").read_text() == "old"


async def test_write_then_write_again_without_reread(ws: Path) -> None:
    ctx = make_ctx(ws)
    await run("file_write", {"file_path": "f.txt", "content": "one"}, ctx)
    res = await run("file_write", {"file_path": "f.txt", "content": "two"}, ctx)
    assert res.status is Status.OK and (ws / "f.txt").read_text() == "two"


async def test_write_size_limit(ws: Path) -> None:
    ctx = make_ctx(ws, max_file_write_bytes=10)
    res = await run("file_write", {"file_path": "f.txt", "content": "x" * 11}, ctx)
    assert res.status is Status.REFUSED and not (ws / "f.txt").exists()
    res = await run("file_write", {"file_path": "g.txt", "content": "x" * 10}, ctx)
    assert res.status is Status.OK


async def test_write_refuses_protected_and_outside(ws: Path) -> None:
    ctx = make_ctx(ws)
    for path in (".git/hooks/pre-commit", ".bashrc", ".vscode/tasks.json", "/etc/x"):
        res = await run("file_write", {"file_path": path, "content": "evil"}, ctx)
        assert res.status is Status.REFUSED, path
    assert not (ws / ".git").exists() and not (ws / ".bashrc").exists()


async def test_write_through_symlink_out_is_refused(ws: Path) -> None:
    target = ws.parent / "outside" / "planted.txt"
    os.symlink(target, ws / "link.txt")
    res = await run("file_write", {"file_path": "link.txt", "content": "x"}, make_ctx(ws))
    assert res.status is Status.REFUSED and not target.exists()
    os.symlink(ws.parent / "outside", ws / "dirlink")
    res = await run("file_write", {"file_path": "dirlink/f.txt", "content": "x"}, make_ctx(ws))
    assert res.status is Status.REFUSED and not (ws.parent / "outside" / "f.txt").exists()


async def test_write_keeps_mode_and_leaves_no_temp_files(ws: Path) -> None:
    f = ws / "run.sh"
    f.write_text("echo 1\n")
    f.chmod(0o750)
    ctx = make_ctx(ws)
    await run("read_file", {"file_path": "run.sh"}, ctx)
    await run("file_write", {"file_path": "run.sh", "content": "echo 2\n"}, ctx)
    assert f.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in ws.iterdir()) == ["run.sh"]


async def test_write_to_directory_is_error(ws: Path) -> None:
    (ws / "d").mkdir()
    res = await run("file_write", {"file_path": "d", "content": "x"}, make_ctx(ws))
    assert res.status in (Status.ERROR, Status.REFUSED) and (ws / "d").is_dir()


# --- file_edit -------------------------------------------------------------------------


async def test_edit_unique_replacement(ws: Path) -> None:
    (ws / "m.py").write_text("a = 1\nb = 2\nc = 3\n")
    ctx = make_ctx(ws)
    await run("read_file", {"file_path": "m.py"}, ctx)
    res = await run(
        "file_edit", {"file_path": "m.py", "old_string": "b = 2", "new_string": "b = 20"}, ctx
    )
    assert res.status is Status.OK and "1 replacement" in res.content
    assert "     2\tb = 20" in res.content
    assert (ws / "m.py").read_text() == "a = 1\nb = 20\nc = 3\n"


async def test_edit_ambiguous_needs_replace_all(ws: Path) -> None:
    (ws / "m.py").write_text("x\nx\n")
    ctx = make_ctx(ws)
    await run("read_file", {"file_path": "m.py"}, ctx)
    args: dict[str, Any] = {"file_path": "m.py", "old_string": "x", "new_string": "y"}
    res = await run("file_edit", args, ctx)
    assert res.status is Status.ERROR and "2 times" in res.error
    assert (ws / "m.py").read_text() == "x\nx\n"
    res = await run("file_edit", {**args, "replace_all": True}, ctx)
    assert res.status is Status.OK and (ws / "m.py").read_text() == "y\ny\n"


async def test_edit_not_found_and_noop(ws: Path) -> None:
    (ws / "m.py").write_text("hello\n")
    ctx = make_ctx(ws)
    await run("read_file", {"file_path": "m.py"}, ctx)
    res = await run("file_edit", {"file_path": "m.py", "old_string": "bye", "new_string": "x"}, ctx)
    assert res.status is Status.ERROR and "not found" in res.error
    res = await run("file_edit", {"file_path": "m.py", "old_string": "h", "new_string": "h"}, ctx)
    assert res.status is Status.ERROR


async def test_edit_requires_fresh_read(ws: Path) -> None:
    (ws / "m.py").write_text("v1\n")
    ctx = make_ctx(ws)
    args = {"file_path": "m.py", "old_string": "v1", "new_string": "v2"}
    res = await run("file_edit", args, ctx)
    assert res.status is Status.ERROR and "not been read" in res.error
    await run("read_file", {"file_path": "m.py"}, ctx)
    (ws / "m.py").write_text("v1\n# edited elsewhere\n")
    res = await run("file_edit", args, ctx)
    assert res.status is Status.ERROR and "changed since" in res.error
    await run("read_file", {"file_path": "m.py"}, ctx)
    res = await run("file_edit", args, ctx)
    assert res.status is Status.OK and (ws / "m.py").read_text() == "v2\n# edited elsewhere\n"


async def test_edit_successive_edits_without_reread(ws: Path) -> None:
    (ws / "m.py").write_text("a\nb\n")
    ctx = make_ctx(ws)
    await run("read_file", {"file_path": "m.py"}, ctx)
    await run("file_edit", {"file_path": "m.py", "old_string": "a", "new_string": "A"}, ctx)
    res = await run("file_edit", {"file_path": "m.py", "old_string": "b", "new_string": "B"}, ctx)
    assert res.status is Status.OK and (ws / "m.py").read_text() == "A\nB\n"


async def test_edit_creates_file_with_empty_old_string(ws: Path) -> None:
    ctx = make_ctx(ws)
    res = await run(
        "file_edit", {"file_path": "n.txt", "old_string": "", "new_string": "hi\n"}, ctx
    )
    assert res.status is Status.OK and (ws / "n.txt").read_text() == "hi\n"
    res = await run("file_edit", {"file_path": "n.txt", "old_string": "", "new_string": "x"}, ctx)
    assert res.status is Status.ERROR


async def test_edit_binary_refused_and_size_limit(ws: Path) -> None:
    (ws / "b.bin").write_bytes(b"ab\x00cd")
    ctx = make_ctx(ws, max_file_write_bytes=8)
    await run("read_file", {"file_path": "b.bin"}, ctx)
    res = await run("file_edit", {"file_path": "b.bin", "old_string": "ab", "new_string": "x"}, ctx)
    assert res.status is Status.ERROR and "binary" in res.error
    (ws / "t.txt").write_text("abc")
    await run("read_file", {"file_path": "t.txt"}, ctx)
    res = await run(
        "file_edit", {"file_path": "t.txt", "old_string": "b", "new_string": "b" * 20}, ctx
    )
    assert res.status is Status.REFUSED and (ws / "t.txt").read_text() == "abc"


async def test_edit_refuses_protected_even_if_read(ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    ctx = make_ctx(ws)
    await run("read_file", {"file_path": ".git/config"}, ctx)
    res = await run(
        "file_edit",
        {"file_path": ".git/config", "old_string": "[core]", "new_string": "[core]\nfsmonitor=x"},
        ctx,
    )
    assert res.status is Status.REFUSED and (ws / ".git" / "config").read_text() == "[core]\n"


async def test_edit_crlf_file_with_lf_strings(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    ctx = make_ctx(ws)
    await run("read_file", {"file_path": "w.txt"}, ctx)
    res = await run(
        "file_edit",
        {"file_path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2\n2b"},
        ctx,
    )
    assert res.status is Status.OK
    assert (ws / "w.txt").read_bytes() == b"1\r\n2\r\n2b\r\nthree\r\n"


def test_read_runs_on_the_loop_only_for_small_regular_files(ws: Path) -> None:
    """The event loop reads small regular files itself and answers refusals and errors
    there (no read happens for them); only a larger file goes to a worker thread. A FIFO
    cannot hang the loop (opened non-blocking, then refused as not a regular file)."""
    from stockade.executor.tools.read_file import INLINE_READ_BYTES

    tool = file_tools()["read_file"]
    ctx = make_ctx(ws)
    (ws / "small.txt").write_text("x" * 100)
    (ws / "edge.txt").write_text("x" * INLINE_READ_BYTES)
    (ws / "big.txt").write_text("x" * (INLINE_READ_BYTES + 1))
    os.mkfifo(ws / "pipe")
    (ws / "outside-link").symlink_to("/etc/passwd")
    now = tool.run_now  # type: ignore[attr-defined]
    small = now({"file_path": "small.txt"}, ctx)
    assert small.status is Status.OK and "x" * 100 in small.content
    assert now({"file_path": "edge.txt"}, ctx).status is Status.OK
    assert now({"file_path": "big.txt"}, ctx) is None
    expected = {
        "pipe": Status.REFUSED,
        "outside-link": Status.REFUSED,
        "/etc/hostname": Status.REFUSED,
        "missing.txt": Status.ERROR,
        3: Status.ERROR,
    }
    for path, status in expected.items():
        res = now({"file_path": path}, ctx)
        assert res is not None and res.status is status, (path, res)
    assert now({}, ctx).status is Status.ERROR


async def test_big_read_through_a_thread_matches_the_inline_read(ws: Path) -> None:
    from stockade.executor.tools.read_file import INLINE_READ_BYTES

    lines = [f"line {i}" for i in range(INLINE_READ_BYTES // 8)]
    (ws / "big.txt").write_text("\n".join(lines) + "\n")
    res = await run("read_file", {"file_path": "big.txt", "offset": 5, "limit": 3}, make_ctx(ws))
    assert res.status is Status.OK
    assert res.content.splitlines()[:3] == ["     5\tline 4", "     6\tline 5", "     7\tline 6"]
