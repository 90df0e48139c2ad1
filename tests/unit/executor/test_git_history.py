"""Issue 11 (gap after class 5): git forms that print the content of committed or staged
files without naming them — `git log -p`, `git show <commit>`, `git diff <rev>`,
`git diff --cached`, `git grep PATTERN <rev>`, `git format-patch`, an abbreviated blob id,
an object named inside an option's value — print a file the policy denies reading from
the repository's history, which the run-time masks (working copy only) cannot hide.

Each form is first run with the real git inside a throwaway repository whose history
holds a secret `.env` (committed, then untracked, then staged again), and shown to print
the secret; then the checker, given the policy's denied reads, must ask (bypass-immune)
or refuse. Forms that name only files, or print summaries, stay allowed. Attack strings
are data here, never typed into a shell of ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.bash.gitindex import parse_index, tracked_paths
from stockade.executor.paths import PathSandbox, Root
from tests.hostgit import host_bash

SECRET = "SEKRIT-4242"
DENIED = ["**/.env"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    ws = tmp_path_factory.mktemp("history") / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "README.md").write_text("hello\n")
    (ws / "src" / "app.py").write_text("x = 1\n")
    (ws / ".env").write_text(f"TOKEN={SECRET}\n")
    steps = [
        "git init -q -b main .",
        "git add -A && git commit -qm one",
        "git rm -q --cached .env && git commit -qm two",
        "echo more >> README.md && git commit -qam three",
        "git add -f .env",  # staged again: the index holds it
    ]
    for step in steps:
        done = host_bash(ws, step)
        assert done.returncode == 0, (step, done.stderr)
    yield ws


def _sandbox(ws: Path) -> PathSandbox:
    return PathSandbox([Root(str(ws), True)], str(ws))


def _blob(ws: Path) -> str:
    return host_bash(ws, "git rev-parse HEAD~2:.env").stdout.strip()[:10]


HISTORY_PRINTERS = [
    "git log -p",
    "git log --patch --all",
    "git log -U1",
    "git log -p -3",
    "git log --cc -p",
    "git log -p --word-diff",
    "git whatchanged -p",
    "git reflog -p",
    "git show HEAD~2",
    "git show HEAD~1",
    "git show HEAD~1 --oneline",
    "git diff HEAD~1",
    "git diff HEAD~2 HEAD",
    "git diff HEAD~2..HEAD --color=never",
    "git diff --cached",
    "git diff --staged",
    "git diff-tree -p HEAD~1",
    "git format-patch -2 --stdout HEAD~1",
    "git grep SEKRIT HEAD~2",
    "git grep -n SEKRIT HEAD~2",
    "git grep -e SEKRIT HEAD~2",
    "git grep --cached SEKRIT",
    "git log -L1,1:.env HEAD~2",
    "git config --blob=HEAD~2:.env --list",
    "git log -p -- .",  # a directory pathspec reaches .env's history
    "git log -p HEAD~2 -- src .",
    "git show HEAD~1 -- .",
]


@pytest.mark.parametrize("command", HISTORY_PRINTERS)
def test_forms_printing_committed_contents_are_not_allowed(repo: Path, command: str) -> None:
    printed = host_bash(repo, command)
    assert SECRET in printed.stdout + printed.stderr, (command, printed.stderr)
    result = analyze(command, sandbox=_sandbox(repo), denied_read_globs=DENIED)
    assert result.verdict in ("ask", "deny"), (command, result.reasons)
    assert result.verdict == "deny" or result.bypass_immune, (command, result.reasons)


def test_an_abbreviated_blob_id_is_not_allowed(repo: Path) -> None:
    command = f"git show {_blob(repo)}"
    assert SECRET in host_bash(repo, command).stdout
    result = analyze(command, sandbox=_sandbox(repo), denied_read_globs=DENIED)
    assert result.verdict == "ask" and result.bypass_immune


SAFE_FORMS = [
    "git log --oneline",
    "git log --oneline -- .",  # `.` once crashed the checker (IndexError)
    "git log --stat",
    "git log -p -- src/app.py",
    "git log -p src/app.py",
    "git log -p -3 -- README.md",
    "git show HEAD~2 --stat",
    "git show HEAD --name-only",
    "git show -s HEAD~2",
    "git show HEAD:README.md",
    "git diff --stat HEAD~2",
    "git diff HEAD~2 -- src/app.py",
    "git diff --staged --stat",
    "git grep hello",
    "git grep -n hello -- README.md",
    "git status",
    "git blame README.md",
]


@pytest.mark.parametrize("command", SAFE_FORMS)
def test_forms_naming_files_or_printing_summaries_stay_allowed(repo: Path, command: str) -> None:
    printed = host_bash(repo, command)
    assert printed.returncode in (0, 1), (command, printed.stderr)
    assert SECRET not in printed.stdout + printed.stderr, command
    result = analyze(command, sandbox=_sandbox(repo), denied_read_globs=DENIED)
    assert result.verdict == "allow", (command, result.reasons)


@pytest.mark.parametrize("command", ["git log -p", "git show HEAD~1", "git diff --cached"])
def test_without_denied_reads_history_stays_allowed(repo: Path, command: str) -> None:
    """Nothing is protected from reading: history forms are ordinary reads."""
    assert analyze(command, sandbox=_sandbox(repo)).verdict == "allow"


def _fresh_repo(ws: Path, *, track_env: bool) -> Path:
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("x = 1\n")
    (ws / ".env").write_text(f"TOKEN={SECRET}\n")
    steps = ["git init -q -b main .", "git add src", "git commit -qm one"]
    if track_env:
        steps.append("git add .env && git commit -qm env")
    for step in steps:
        done = host_bash(ws, step)
        assert done.returncode == 0, (step, done.stderr)
    return ws


def test_git_diff_prints_a_tracked_file_whose_copy_is_masked(tmp_path: Path) -> None:
    """At run time a denied file is covered by an empty file: `git diff` then prints the
    committed copy as removed lines."""
    ws = _fresh_repo(tmp_path / "ws", track_env=True)
    (ws / ".env").write_text("")  # what the mask shows the command
    assert f"-TOKEN={SECRET}" in host_bash(ws, "git diff").stdout
    (ws / ".env").write_text(f"TOKEN={SECRET}\n")
    for command in ("git diff", "git diff --color=never", "git diff-files -p"):
        result = analyze(command, sandbox=_sandbox(ws), denied_read_globs=DENIED)
        assert result.verdict == "ask" and result.bypass_immune, (command, result.reasons)
    # Naming the files, or a summary, stays allowed.
    for command in ("git diff -- src/app.py", "git diff --stat", "git diff --name-only"):
        assert analyze(command, sandbox=_sandbox(ws), denied_read_globs=DENIED).verdict == "allow"


def test_git_diff_is_allowed_when_no_denied_file_is_tracked(tmp_path: Path) -> None:
    ws = _fresh_repo(tmp_path / "ws", track_env=False)
    assert analyze("git diff", sandbox=_sandbox(ws), denied_read_globs=DENIED).verdict == "allow"
    assert analyze("git diff", sandbox=_sandbox(ws)).verdict == "allow"


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_the_index_reader_agrees_with_git_ls_files(tmp_path: Path, version: str) -> None:
    ws = _fresh_repo(tmp_path / "ws", track_env=True)
    (ws / "deep" / "er").mkdir(parents=True)
    for name in ("a b.txt", "deep/x.txt", "deep/er/y.txt", "é.txt"):
        (ws / name).write_text("1\n")
    steps = ["git add -A", "git update-index --index-version " + version]
    if version == "3":
        steps.append("git update-index --skip-worktree src/app.py")  # an extended entry
    for step in steps:
        assert host_bash(ws, step).returncode == 0, step
    listed = host_bash(ws, "git -c core.quotepath=off ls-files -z").stdout.split("\0")[:-1]
    assert tracked_paths(str(ws / ".git")) == listed


def test_the_index_reader_reads_a_sha256_repository(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("1\n")
    (ws / ".env").write_text("X=1\n")
    for step in ("git init -q --object-format=sha256 .", "git add -A"):
        assert host_bash(ws, step).returncode == 0, step
    assert tracked_paths(str(ws / ".git")) == [".env", "a.txt"]


def test_the_index_reader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    ws = _fresh_repo(tmp_path / "ws", track_env=True)
    index = (ws / ".git" / "index").read_bytes()
    assert parse_index(index, 20) is not None
    assert parse_index(index[:40], 20) is None  # truncated
    assert parse_index(b"XXXX" + index[4:], 20) is None  # not an index
    assert parse_index(index[:4] + b"\0\0\0\x09" + index[8:], 20) is None  # unknown version
    assert tracked_paths(str(tmp_path / "nowhere")) == []  # no index: nothing tracked
    (ws / ".git" / "index").write_bytes(b"garbage")
    result = analyze("git diff", sandbox=_sandbox(ws), denied_read_globs=DENIED)
    assert result.verdict == "ask" and result.bypass_immune  # unknown: asked, fail closed


def test_pathspecs_are_read_from_the_directory_git_runs_in(tmp_path: Path) -> None:
    """`git -C sub log -p -- x`: git reads `x` in sub (a directory holding a committed
    .env there), whatever `x` is in the call's working directory (a plain file here)."""
    ws = tmp_path / "ws"
    (ws / "sub" / "x").mkdir(parents=True)
    (ws / "sub" / "x" / ".env").write_text(f"TOKEN={SECRET}\n")
    (ws / "x").write_text("plain\n")
    for step in ("git init -q -b main .", "git add -A", "git commit -qm one"):
        assert host_bash(ws, step).returncode == 0, step
    command = "git -C sub log -p -- x"
    assert SECRET in host_bash(ws, command).stdout
    result = analyze(command, sandbox=_sandbox(ws), denied_read_globs=DENIED)
    assert result.verdict == "ask" and result.bypass_immune, result.reasons
    # `../x` from sub is the plain file at the top: naming it is fine.
    assert (
        analyze("git -C sub log -p -- ../x", sandbox=_sandbox(ws), denied_read_globs=DENIED).verdict
        == "allow"
    )
    # From the top, `x` is that plain file: naming it is fine.
    assert analyze("git log -p -- x", sandbox=_sandbox(ws), denied_read_globs=DENIED).verdict == (
        "allow"
    )


def test_a_diff_of_another_repository_is_asked(tmp_path: Path) -> None:
    """`--git-dir`/`--work-tree` point git at another index than the one checked."""
    ws = tmp_path / "ws"
    ws.mkdir()
    nested = _fresh_repo(ws / "nested", track_env=True)
    (nested / ".env").write_text("")  # the run-time mask
    command = "git --git-dir=nested/.git --work-tree=nested diff"
    assert SECRET in host_bash(ws, command).stdout
    (nested / ".env").write_text(f"TOKEN={SECRET}\n")
    result = analyze(command, sandbox=_sandbox(ws), denied_read_globs=DENIED)
    assert result.verdict in ("ask", "deny") and (result.verdict == "deny" or result.bypass_immune)


def test_an_alias_printing_history_is_not_settled_without_a_person(tmp_path: Path) -> None:
    """A repository alias (`git lg` = `log -p`) is an unknown subcommand to the checker."""
    ws = _fresh_repo(tmp_path / "ws", track_env=True)
    assert host_bash(ws, "git config alias.lg 'log -p'").returncode == 0
    assert SECRET in host_bash(ws, "git lg").stdout
    for command in ("git lg", "git merge-tree HEAD HEAD~1 HEAD"):
        result = analyze(command, sandbox=_sandbox(ws), denied_read_globs=DENIED)
        assert result.verdict == "ask" and result.bypass_immune, (command, result.reasons)
    plain = analyze("git lg", sandbox=_sandbox(ws))
    assert plain.verdict == "ask" and not plain.bypass_immune  # nothing protected: as before


def test_outside_a_repository_history_forms_print_nothing(tmp_path: Path) -> None:
    ws = tmp_path / "plain"
    ws.mkdir()
    (ws / ".env").write_text(f"TOKEN={SECRET}\n")
    for command in ("git log -p", "git diff --cached", "git show HEAD~1"):
        assert host_bash(ws, command).returncode != 0  # not a git repository
        result = analyze(command, sandbox=_sandbox(ws), denied_read_globs=DENIED)
        assert result.verdict == "allow", (command, result.reasons)
    elsewhere = analyze(
        "git --git-dir=/x/.git log -p", sandbox=_sandbox(ws), denied_read_globs=DENIED
    )
    assert elsewhere.verdict != "allow"


def test_show_with_only_pathspecs_shows_head(tmp_path: Path) -> None:
    """`git show -- .` is HEAD's patch for every path (the commit that added .env here)."""
    ws = _fresh_repo(tmp_path / "ws", track_env=True)
    for command in ("git show -- .", "git show", "git show --oneline -- ."):
        assert SECRET in host_bash(ws, command).stdout, command
        result = analyze(command, sandbox=_sandbox(ws), denied_read_globs=DENIED)
        assert result.verdict == "ask" and result.bypass_immune, (command, result.reasons)
    named = analyze("git show -- src/app.py", sandbox=_sandbox(ws), denied_read_globs=DENIED)
    assert named.verdict == "allow"
