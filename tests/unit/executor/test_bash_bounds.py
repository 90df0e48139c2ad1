"""The work one bash analysis does grows linearly with the command line (SPEC §9, EXE-6).

Every relative path is judged once per working directory the line may be in, and every
glob against every path the line writes: both were the square of the line's length (the
cd chain the cube: each directory deeper), so a command within MAX_COMMAND_CHARS kept the
executor's event loop busy for minutes. Past the bounds the line is asked about,
bypass-immune; below them nothing changes. The tests count the path checks made (no
timing: the machine's load must not decide a test).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.executor.bash import BashAnalyzer
from stockade.executor.bash.findings import matches_basename
from stockade.executor.bash.lists import CREDENTIAL_BASENAMES
from stockade.executor.bash.walker import _MAX_BASES, _MAX_GLOB_WRITE_PAIRS
from stockade.executor.paths import PathDecision, PathSandbox, Root


class _CountingSandbox(PathSandbox):
    """A real PathSandbox that counts the checks the analysis asks of it."""

    checks = 0

    def check(
        self, path: str, *, write: bool = False, known_dirs: set[str] | None = None
    ) -> PathDecision:
        self.checks += 1
        return super().check(path, write=write, known_dirs=known_dirs)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "src" / "src").mkdir(parents=True)
    (tmp_path / "README.md").write_text("x\n")
    return tmp_path


def _checks(workspace: Path, command: str) -> tuple[int, BashAnalyzer, _CountingSandbox]:
    sandbox = _CountingSandbox([Root(str(workspace), True)], str(workspace))
    analyzer = BashAnalyzer(isolated=False, parse_cache=0)
    analyzer.analyze(command, sandbox=sandbox)
    return sandbox.checks, analyzer, sandbox


@pytest.mark.parametrize(
    "step",
    ["cd src; cat f{i}", "pushd src; cat f{i}", "git -C src status; cat f{i}", "cd src/src; ls"],
)
def test_path_checks_grow_linearly_with_directory_changes(workspace: Path, step: str) -> None:
    def line(k: int) -> str:
        return "; ".join(step.format(i=i) for i in range(k))

    small, _, _ = _checks(workspace, line(100))
    large, _, _ = _checks(workspace, line(200))
    # Twice the line, at most about twice the checks (it was 4x, and each deeper).
    assert large <= 2.2 * small, (small, large)
    assert large <= 200 * 2 * (_MAX_BASES + 1)


def test_a_line_with_too_many_directory_changes_is_asked_immune(workspace: Path) -> None:
    sandbox = PathSandbox([Root(str(workspace), True)], str(workspace))
    analyzer = BashAnalyzer(isolated=False, parse_cache=0)
    command = "; ".join(f"cd src; cat f{i}" for i in range(_MAX_BASES + 2))
    result = analyzer.analyze(command, sandbox=sandbox)
    assert result.verdict == "ask" and result.bypass_immune
    assert any("changes directory more than" in r for r in result.reasons), result.reasons
    # The reason is given once, not once per directory change past the bound.
    assert sum("changes directory more than" in r for r in result.reasons) == 1
    # A directory outside the roots is still refused past the bound (the cd target is
    # judged before the bound applies).
    denied = analyzer.analyze(command + "; cd /etc; cat shadow", sandbox=sandbox)
    assert denied.verdict in ("ask", "deny")
    assert any("/etc" in r for r in denied.reasons), denied.reasons


@pytest.mark.parametrize("last", ["cd /etc && cat shadow", "pushd /etc; grep root shadow"])
def test_the_latest_directory_is_followed_past_the_bound(workspace: Path, last: str) -> None:
    """Past the bound the oldest directories are dropped, not the newest: where bash is
    when the credential is read is still the directory judged from (a DENY, not only the
    bound's ASK)."""
    sandbox = PathSandbox([Root(str(workspace), True)], str(workspace))
    analyzer = BashAnalyzer(isolated=False, parse_cache=0)
    steps = "; ".join(f"cd src; cat f{i}" for i in range(_MAX_BASES + 3))
    result = analyzer.analyze(f"{steps}; {last}", sandbox=sandbox)
    assert result.verdict == "deny", result.reasons
    assert any("credentials" in r and "/etc/shadow" in r for r in result.reasons), result.reasons


def test_a_few_directory_changes_are_judged_as_before(workspace: Path) -> None:
    sandbox = PathSandbox([Root(str(workspace), True)], str(workspace))
    analyzer = BashAnalyzer(isolated=False, parse_cache=0)
    steps = ["cd src", "ls", f"cd {workspace}", "cat README.md"] * ((_MAX_BASES - 1) // 2)
    result = analyzer.analyze(" && ".join(steps), sandbox=sandbox)
    assert result.verdict == "allow", result.reasons


def test_too_many_globs_against_written_paths_is_asked_immune(workspace: Path) -> None:
    k = 100
    assert k * k > _MAX_GLOB_WRITE_PAIRS
    command = (
        "touch "
        + " ".join(f"n{i}" for i in range(k))
        + "; ls "
        + " ".join(f"x*{i}" for i in range(k))
    )
    sandbox = PathSandbox([Root(str(workspace), True)], str(workspace))
    result = BashAnalyzer(isolated=False, parse_cache=0).analyze(command, sandbox=sandbox)
    assert result.verdict == "ask" and result.bypass_immune
    assert any("too many to check which the line itself creates" in r for r in result.reasons)


def test_a_glob_over_a_file_the_line_creates_is_still_found_below_the_bound(
    workspace: Path,
) -> None:
    sandbox = PathSandbox([Root(str(workspace), True)], str(workspace))
    result = BashAnalyzer(isolated=False, parse_cache=0).analyze(
        "touch -- -delete; find *", sandbox=sandbox
    )
    assert result.verdict == "ask" and result.bypass_immune
    assert any("expands the glob" in r for r in result.reasons), result.reasons


@settings(max_examples=400, deadline=None)
@given(
    path=st.text(st.sampled_from("/.aeinrsv_*-\n"), max_size=12),
    patterns=st.sampled_from([CREDENTIAL_BASENAMES, (".env", ".env.*"), ("*.pem", "id_*"), ()]),
)
def test_the_basename_matcher_is_fnmatch_of_each_pattern(
    path: str, patterns: tuple[str, ...]
) -> None:
    """matches_basename answers with one compiled regex what fnmatchcase of each pattern
    answered (it runs for the words of most commands)."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    expected = any(fnmatch.fnmatchcase(base, p) for p in patterns)
    assert matches_basename(path, patterns) == expected
