"""Output shaping (EXE-10) and the read state behind stale-write protection."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.errors import StaleWrite
from stockade.executor.output import persist_output, safe_call_id, shape_output
from stockade.executor.readstate import FileStamp, ReadState


def test_short_output_untouched(tmp_path: Path) -> None:
    shaped = shape_output("hello", call_id="c", library_dir=str(tmp_path))
    assert (shaped.content, shaped.truncated, shaped.persisted_path) == ("hello", False, "")
    assert not (tmp_path / "tool-results").exists()


def test_long_output_keeps_head_and_tail_and_persists(tmp_path: Path) -> None:
    text = "".join(f"line {i}\n" for i in range(5000))
    shaped = shape_output(
        text, call_id="call_7", library_dir=str(tmp_path), max_chars=4000, session_id="s1"
    )
    assert shaped.truncated and len(shaped.content) <= 4000
    assert shaped.content.startswith("line 0\nline 1\n")
    assert shaped.content.rstrip().endswith("line 4999")
    assert "characters cut" in shaped.content
    assert shaped.persisted_path == str(tmp_path / "tool-results" / "s1" / "call_7.txt")
    assert shaped.persisted_path in shaped.content
    assert Path(shaped.persisted_path).read_text() == text


def test_without_library_dir_says_not_saved() -> None:
    shaped = shape_output("x" * 10_000, call_id="c", library_dir=None, max_chars=500)
    assert shaped.truncated and shaped.persisted_path == ""
    assert "not saved" in shaped.content and len(shaped.content) <= 500


def test_tiny_limit_still_bounded(tmp_path: Path) -> None:
    shaped = shape_output("y" * 1000, call_id="c", library_dir=str(tmp_path), max_chars=20)
    assert len(shaped.content) <= 20 and shaped.truncated
    with pytest.raises(ValueError):
        shape_output("y", call_id="c", library_dir=None, max_chars=0)


@pytest.mark.parametrize(
    "call_id", ["../../etc/passwd", "/abs/path", "..", ".", "", "a/b", "x\0y", "ü" * 300, ".hidden"]
)
def test_call_id_cannot_escape(tmp_path: Path, call_id: str) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    # The session id is made safe the same way: try each attack as the session too.
    path = persist_output("data", call_id=call_id, library_dir=str(lib), session_id=call_id)
    assert os.path.dirname(os.path.dirname(path)) == str(lib / "tool-results")
    assert not os.path.basename(os.path.dirname(path)).startswith(".")
    assert not os.path.basename(path).startswith(".")
    assert Path(path).read_text() == "data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib"]


def test_distinct_ids_do_not_collide() -> None:
    assert safe_call_id("a/b") != safe_call_id("a_b")
    assert safe_call_id("a?b") != safe_call_id("a*b")
    assert safe_call_id("plain-id_1.x") == "plain-id_1.x"


def test_symlinked_results_dir_is_not_followed(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, lib / "tool-results")
    shaped = shape_output("z" * 5000, call_id="c1", library_dir=str(lib), max_chars=1000)
    assert shaped.persisted_path == "" and "could not be saved" in shaped.content
    assert list(elsewhere.iterdir()) == []


def test_symlinked_result_file_is_not_followed(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    (lib / "tool-results" / "s1").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.symlink(victim, lib / "tool-results" / "s1" / "c2.txt")
    shape_output("z" * 5000, call_id="c2", library_dir=str(lib), max_chars=1000, session_id="s1")
    assert victim.read_text() == "keep"


def test_symlinked_session_dir_is_not_followed(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    (lib / "tool-results").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, lib / "tool-results" / "s1")
    shaped = shape_output(
        "z" * 5000, call_id="c3", library_dir=str(lib), max_chars=1000, session_id="s1"
    )
    assert shaped.persisted_path == "" and "could not be saved" in shaped.content
    assert list(elsewhere.iterdir()) == []


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=3000), limit=st.integers(min_value=1, max_value=1500))
def test_shaped_never_exceeds_limit(text: str, limit: int) -> None:
    shaped = shape_output(text, call_id="p", library_dir=None, max_chars=limit)
    assert len(shaped.content) <= limit
    assert shaped.truncated == (len(text) > limit)
    if not shaped.truncated:
        assert shaped.content == text


# --- ReadState ------------------------------------------------------------------------


def _stamp(content: bytes, mtime: int = 1) -> FileStamp:
    st = os.stat_result((0o100644, 0, 0, 1, 0, 0, len(content), 0, 0, 0))
    return FileStamp(mtime, len(content), FileStamp.of_bytes(content, st).sha256)


def test_read_state_rules() -> None:
    state = ReadState()
    with pytest.raises(StaleWrite, match="not been read"):
        state.require_fresh("s", "/w/f", _stamp(b"a"))
    state.record("s", "/w/f", _stamp(b"a"))
    state.require_fresh("s", "/w/f", _stamp(b"a", mtime=99))  # touched, same bytes: fine
    with pytest.raises(StaleWrite, match="changed since"):
        state.require_fresh("s", "/w/f", _stamp(b"b"))
    with pytest.raises(StaleWrite):
        state.require_fresh("other-session", "/w/f", _stamp(b"a"))
    state.forget_session("s")
    assert state.get("s", "/w/f") is None


def test_read_state_is_bounded() -> None:
    state = ReadState(max_entries=3)
    for i in range(5):
        state.record("s", f"/w/{i}", _stamp(b"x"))
    assert len(state) == 3 and state.get("s", "/w/0") is None and state.get("s", "/w/4")
