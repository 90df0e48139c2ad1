"""The shortcuts the judging takes for speed (PERF-4a) answer exactly what they replace.

Each one stands for a library call or a loop whose answer decides a verdict: glob's
listing, the credential comparison of a glob, normpath / dirname / lexists, the option
abbreviation lookup, the git repository top. Each is compared here with the original on
real files or generated inputs, and what is kept per analysis is shown not to outlive it.
"""

from __future__ import annotations

import fnmatch
import glob as globmod
import itertools
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.contract.shell import canonical_option
from stockade.executor.bash import BashAnalyzer
from stockade.executor.bash.findings import normal_path
from stockade.executor.bash.options import canonical
from stockade.executor.bash.parser import parse
from stockade.executor.bash.walker import WalkContext, Walker, _glob_matches
from stockade.executor.paths import PathDecision, PathSandbox, Root, _parent, lexists


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Files with hidden names, names with glob characters, a dangling link, a loop."""
    for name in ("a.py", "b.py", ".hidden.py", "-rf", "x[1].txt", "x1.txt", "notes"):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "sub[a]").mkdir()
    (tmp_path / "sub[a]" / "c.py").write_text("x\n")
    (tmp_path / "suba").mkdir()
    (tmp_path / "suba" / "d.py").write_text("x\n")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dirlink").symlink_to(tmp_path / "suba")
    return tmp_path


_PATTERNS = (
    "*.py",
    ".*",
    ".*.py",
    "*",
    "?.py",
    "x[1].txt",
    "x[!a].txt",
    "[-]*",
    "sub[a]/*.py",
    "sub*/*.py",
    "dirlink/*.py",
    "missing/*.py",
    "notes/*",
    "*/",
    "a.py",
    "[",
    "*[",
)


@pytest.mark.parametrize("pattern", _PATTERNS)
@pytest.mark.parametrize("limit", [1, 2, 257])
def test_glob_listing_is_globs_own(tree: Path, pattern: str, limit: int) -> None:
    absolute = str(tree / pattern)
    expected = list(itertools.islice(globmod.iglob(absolute), limit))
    assert _glob_matches(absolute, limit) == expected


def test_glob_listing_below_a_file_is_empty(tree: Path) -> None:
    # A file in the directory part: scandir fails (ENOTDIR) and glob lists nothing.
    pattern = str(tree / "a.py" / "*.py")
    assert _glob_matches(pattern, 10) == [] == globmod.glob(pattern)


def _walker(tmp_path: Path, denied: tuple[str, ...] = ()) -> Walker:
    sandbox = PathSandbox([Root(str(tmp_path), True)], str(tmp_path))
    return Walker(sandbox, False, WalkContext("/home/agent", denied), parse("true"))


def _reference_denies(absolute: str, context: WalkContext) -> str | None:
    """The comparison glob_credentials made pattern by pattern before its shortcut."""
    for pattern in (*context.credential_globs, *context.denied_read_globs):
        flat = pattern.replace("**", "*")
        if fnmatch.fnmatchcase(absolute, flat) or fnmatch.fnmatchcase(flat, absolute):
            return pattern
    return None


_GLOB_PARTS = st.sampled_from(
    [
        "/home/agent",
        "/home",
        "/etc",
        "/.ssh",
        "/.aws",
        "/id_*",
        "/*",
        "/**",
        "/sh*",
        "/shadow",
        "/s?adow",
        "/[st]hadow",
        "/.env",
        "/*.pem",
        "/secrets",
        "/k",
        "/proc",
        "/1",
        "/environ",
        "/src",
        "/a.py",
        "/[",
        "/x]",
    ]
)


@settings(max_examples=300)
@given(parts=st.lists(_GLOB_PARTS, min_size=1, max_size=5), denied=st.booleans())
def test_glob_credentials_denies_exactly_what_the_pattern_loop_denied(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str], denied: bool
) -> None:
    tmp = tmp_path_factory.mktemp("globs")
    walker = _walker(tmp, (".env", "secrets/**", "**/*.pem", "/etc/*") if denied else ())
    absolute = "".join(parts)
    walker.glob_credentials(absolute)
    expected = _reference_denies(absolute, walker.context)
    reasons = [f.reason for f in walker.findings]
    if expected is None:
        assert reasons == []
    else:
        assert reasons == [f"the glob {absolute} can match credentials ({expected})"]


@settings(max_examples=500)
@given(st.text(alphabet="/.ab", min_size=1, max_size=14))
def test_normal_path_is_normpath(path: str) -> None:
    assert normal_path(path) == os.path.normpath(path)


@settings(max_examples=300)
@given(st.lists(st.sampled_from(["a", "b.c", "..x", "d e"]), max_size=5))
def test_parent_is_dirname_for_normal_absolute_paths(parts: list[str]) -> None:
    path = "/" + "/".join(parts)
    assert _parent(path) == os.path.dirname(path)


def test_lexists_is_os_path_lexists(tree: Path) -> None:
    for name in ("a.py", "notes", "suba", "dangling", "loop", "dirlink", "missing"):
        path = str(tree / name)
        assert lexists(path) == os.path.lexists(path), name
        # Below a file (ENOTDIR), below a dangling link, a loop and a missing folder.
        below = path + "/HEAD"
        assert lexists(below) == os.path.lexists(below), below
    assert lexists(str(tree / "suba" / "d.py")) is True


_KNOWN = (
    frozenset({"--compress-program", "--checkpoint-action", "--to-command"}),
    frozenset({"--output", "--one-top-level"}),
    frozenset({"--verbose", "--one"}),
)


@pytest.mark.parametrize(
    "option",
    [
        "--compress-prog",
        "--compress-program",
        "--o",
        "--on",
        "--one",
        "--out",
        "--v",
        "--unknown",
        "-c",
        "--",
        "--c" + "x" * 80,
        "--to",
    ],
)
def test_canonical_is_canonical_option_every_time(option: str) -> None:
    for _ in range(3):  # first answer, then the kept one
        assert canonical(option, _KNOWN) == canonical_option(option, _KNOWN)
        assert canonical(option, _KNOWN[1:]) == canonical_option(option, _KNOWN[1:])


def test_the_repository_top_is_found_again_for_every_analysis(tmp_path: Path) -> None:
    """The git top is kept within one analysis only: a repository made since the last
    analysis changes which git directory `git commit` is judged to write."""
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    sandbox = PathSandbox([Root(str(ws), True)], str(ws / "sub"))
    with BashAnalyzer(isolated=False) as analyzer:
        before = analyzer.analyze("git commit -m x", sandbox=sandbox)
        assert before.verdict == "deny"
        assert any(f"{ws / 'sub' / '.git'}" in r for r in before.reasons), before.reasons
        (ws / ".git").mkdir()
        after = analyzer.analyze("git commit -m x", sandbox=sandbox)
        assert after.verdict == "deny"
        assert not any(f"{ws / 'sub' / '.git'}" in r for r in after.reasons), after.reasons
        assert any(f"{ws / '.git'}" in r for r in after.reasons), after.reasons


def test_a_path_named_twice_in_one_line_is_judged_once_and_both_times(tmp_path: Path) -> None:
    """`d` and `d/` are one path to the sandbox: asked once per analysis, and each word
    still gets its own findings (both writes are refused, each named as written)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    calls: list[str] = []

    class _Counting(PathSandbox):
        def check(
            self, path: str, *, write: bool = False, known_dirs: set[str] | None = None
        ) -> PathDecision:
            calls.append(path)
            return super().check(path, write=write, known_dirs=known_dirs)

    sandbox = _Counting([Root(str(ws), True)], str(ws))
    result = BashAnalyzer(isolated=False).analyze("mkdir -p .git && cp x .git/", sandbox=sandbox)
    assert result.verdict == "deny"
    assert calls.count(str(ws / ".git")) + calls.count(str(ws / ".git") + "/") == 1, calls
    assert any("mkdir" in r and ".git" in r for r in result.reasons), result.reasons
    assert any("cp" in r and ".git/" in r for r in result.reasons), result.reasons


def test_lexists_answers_no_for_a_nul_as_lexists_does(tree: Path) -> None:
    path = str(tree / "a.py") + "\0x"
    assert lexists(path) is os.path.lexists(path) is False
