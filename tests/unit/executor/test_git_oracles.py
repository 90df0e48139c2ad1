"""Class 5 of issue 11, committed secrets read without printing them: git's pickaxe
(`-S`, `-G`) lists the commits whose file contents match a pattern, so `git log -G
'TOKEN=a'`, `'TOKEN=ab'` … spells a denied file out one character at a time with no patch
printed; and a `REV:path` spelled in another case is the same file to the policy's folded
match. Each is first shown with real git in a throwaway repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root
from tests.hostgit import host_git

DENIED = ("**/.env",)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    host_git(ws, "init", "-q", ".")
    (ws / ".env").write_text("TOKEN=s3cret\n")
    (ws / "src" / "a.py").write_text("print(1)\n")
    host_git(ws, "add", "-A")
    host_git(ws, "commit", "-qm", "c")
    # Only the history holds the secret now.
    host_git(ws, "rm", "-q", "--cached", ".env")
    host_git(ws, "commit", "-qm", "untrack")
    (ws / ".env").unlink()
    return ws


def _verdict(ws: Path, command: str) -> str:
    sandbox = PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=DENIED)
    return analyze(command, sandbox=sandbox, denied_read_globs=DENIED).verdict


def test_the_pickaxe_is_an_oracle_in_real_git(repo: Path) -> None:
    def hits(*args: str) -> int:
        return len(host_git(repo, "log", "--oneline", *args).stdout.splitlines())

    # The commits that added and removed it, or none: one bit per guess.
    assert hits("-G", "TOKEN=s3") == 2 and hits("-G", "TOKEN=x") == 0
    assert hits("-S", "s3cret") == 2 and hits("-S", "nope") == 0


@pytest.mark.parametrize(
    "command",
    [
        "git log -G TOKEN=s3",
        "git log -GTOKEN=s3 --oneline",
        "git log --oneline -S s3cret",
        "git log --stat --pickaxe-regex -S 's3c.et'",
        "git whatchanged -G TOKEN",
        "git diff-tree -r -S s3cret --root HEAD~1",
        "git show -S s3cret --stat HEAD~1",
        "git log --all --name-only -G 'TOKEN=s'",
    ],
)
def test_pickaxe_forms_are_asked(repo: Path, command: str) -> None:
    assert _verdict(repo, command) == "ask", command


@pytest.mark.parametrize(
    "command",
    [
        "git log --oneline",
        "git log --stat -3",
        "git log --skip=1 --oneline",
        "git log --graph --oneline --all",
        "git log -G print -- src",  # the history under src never held a denied path
    ],
)
def test_summaries_and_clean_pathspecs_stay_allowed(repo: Path, command: str) -> None:
    assert _verdict(repo, command) == "allow", command


def test_a_revision_path_in_another_case_is_the_denied_file(repo: Path) -> None:
    (repo / ".ENV").write_text("TOKEN=upper\n")
    host_git(repo, "add", ".ENV")
    host_git(repo, "commit", "-qm", "upper")
    assert "upper" in host_git(repo, "show", "HEAD:.ENV").stdout
    for command in ("git show HEAD:.ENV", "git cat-file -p :.Env", "git show HEAD:src/../.ENV"):
        assert _verdict(repo, command) == "deny", command
    assert _verdict(repo, "git show HEAD:src/a.py") == "allow"
