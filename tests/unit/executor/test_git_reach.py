"""Class 5 of issue 11: git reaches further than `.git/config` and `.git/hooks` (EXE-3 rev 2,
EXE-8d).

Each attack is first shown to work with the real git on this machine, inside a throwaway
repository (a planted config makes a later, ordinary `git status` run a payload that only
touches a marker file), then shown refused by the path sandbox (the file tools' check) and
by the bash analysis (the run_bash check). Attack strings are data here, never typed into a
shell of ours.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import DEFAULT_PROTECTED_WRITES, PathSandbox, Root
from tests.hostgit import host_git


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert host_git(ws, "init", "-q", ".").returncode == 0
    (ws / "README.md").write_text("hello\n")
    (ws / ".env").write_text("TOKEN=s3cr3t-value\n")
    assert host_git(ws, "add", "README.md", ".env").returncode == 0
    assert host_git(ws, "commit", "-qm", "init").returncode == 0
    yield ws


def _sandbox(ws: Path, globs: tuple[str, ...] = DEFAULT_PROTECTED_WRITES) -> PathSandbox:
    return PathSandbox([Root(str(ws), True)], str(ws), protected_write_globs=globs)


def _payload_config(marker: Path) -> str:
    # fsmonitor runs on `git status`; the payload only touches a marker in the temp dir.
    return f'[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch {marker}; false"\n'


def _plant_bare_layout(directory: Path, marker: Path) -> None:
    (directory / "objects").mkdir(parents=True)
    (directory / "refs").mkdir()
    (directory / "HEAD").write_text("ref: refs/heads/main\n")
    (directory / "config").write_text(_payload_config(marker))


# --- the attacks work with real git ------------------------------------------------------


def test_gitdir_file_and_bare_layout_run_a_payload_in_host_git(repo: Path, tmp_path: Path) -> None:
    """Two writes no old rule refused (a `.git` FILE and a bare layout elsewhere): the next
    `git status` a person runs in that folder executes the planted fsmonitor."""
    marker = tmp_path / "MARK-gitfile"
    _plant_bare_layout(repo / "planted", marker)
    (repo / "sub").mkdir()
    (repo / "sub" / ".git").write_text("gitdir: ../planted\n")
    host_git(repo / "sub", "status")
    assert marker.exists(), "git did not run the planted fsmonitor: the repro is broken"
    sb = _sandbox(repo)
    for path in ("sub/.git", "planted/config", "planted/HEAD", "planted/hooks/pre-commit"):
        decision = sb.check(path, write=True)
        assert not decision.allowed, path
    assert "laid out as a git directory" in sb.check("planted/config", write=True).reason


def test_commondir_redirect_runs_a_payload_in_host_git(repo: Path, tmp_path: Path) -> None:
    """`.git/commondir` makes git take config (and hooks, refs) from another directory."""
    marker = tmp_path / "MARK-commondir"
    other = tmp_path / "other"
    _plant_bare_layout(other, marker)
    (repo / ".git" / "commondir").write_text(str(other) + "\n")
    host_git(repo, "status")
    assert marker.exists()
    assert not _sandbox(repo).check(".git/commondir", write=True).allowed


def test_nested_repository_config_runs_a_payload(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "MARK-nested"
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    assert host_git(nested, "init", "-q", ".").returncode == 0
    (nested / ".git" / "config").write_text(_payload_config(marker))
    host_git(nested, "status")
    assert marker.exists()
    sb = _sandbox(repo)
    for path in (
        "vendor/lib/.git/config",
        "vendor/lib/.git/modules/m/config",
        "vendor/lib/.git/worktrees/w/config",
        "vendor/lib/.git/config.worktree",
        "vendor/lib/.git",
    ):
        assert not sb.check(path, write=True).allowed, path


def test_symlinked_git_dir_is_judged_by_the_name_given(repo: Path, tmp_path: Path) -> None:
    """`sub/.git -> ../elsewhere`: writes through the link land in a folder whose canonical
    name matches no glob; git follows the link, so the name as given counts."""
    marker = tmp_path / "MARK-symlink"
    _plant_bare_layout(repo / "elsewhere", marker)
    (repo / "sub").mkdir()
    os.symlink("../elsewhere", repo / "sub" / ".git")
    host_git(repo / "sub", "status")
    assert marker.exists()
    sb = _sandbox(repo)
    assert not sb.check("sub/.git/config", write=True).allowed
    assert not sb.check("elsewhere/config", write=True).allowed


# --- the checks: sandbox and bash analysis --------------------------------------------------

PLANTING_COMMANDS = [
    # Every way of writing a git control file: redirections, write commands, git itself.
    "printf 'gitdir: ../p\\n' > sub/.git",
    "echo x >> .git/commondir",
    "tee .git/config.worktree < /dev/null",
    "cp evil.cfg .git/modules/m/config",
    "mkdir -p .git/worktrees/w",
    "ln -s ../planted sub/.git",
    "mv staged vendor/.git",
    "cp -r staged vendor/lib/.git",
    "sed -i s/a/b/ .git/config",
    "touch .git/hooks/pre-commit",
    "mkdir -p p/objects p/refs",
    "mkdir -p p/objects/pack p/refs/heads && touch p/HEAD",
    "git init",
    "git init vendor/x",
    "git init --bare store",
    "git -C vendor init",
    "git worktree add wt",
    "git log --output=.git/hooks/post-checkout",
    "git diff --output=sub/.git",
    "git format-patch -o .git/hooks HEAD~1",
    "git commit -m x",
    "git config core.fsmonitor 'touch M'",
    "git config --file .git/config core.pager x",
    "git config user.name x",
    "git checkout-index -a --prefix=.git/hooks/",
    "git -c core.fsmonitor='touch M' status",
    "git -c alias.st='!touch M' st",
    "git --config-env=core.pager=X log",
    "git clone -c core.hooksPath=h /src dst",
    "git clone --config=core.fsmonitor=x /src dst",
    "git filter-branch --tree-filter 'touch M' HEAD",
    "git filter-branch --msg-filter='touch M' HEAD",
    "git filter-branch --index-filt 'touch M' HEAD",
    "git difftool -x 'touch M' HEAD",
    "git difftool --extcmd='touch M' HEAD",
    "git rebase --exec 'touch M' HEAD~1",
    "git grep --open-files-in-pager='touch M' x",
    "git fetch --upload-pack='touch M' origin",
    "git submodule foreach 'touch M'",
    "git bisect run touch M",
    "git credential fill",
    "git credential-store get",
    "git hook run pre-commit",
]


@pytest.mark.parametrize("command", PLANTING_COMMANDS)
def test_planting_git_control_files_is_refused(repo: Path, command: str) -> None:
    (repo / "sub").mkdir()
    (repo / "vendor").mkdir()
    (repo / "p").mkdir()
    result = analyze(command, sandbox=_sandbox(repo))
    assert result.verdict == "deny", (command, result.reasons)


def test_layout_completed_across_calls_is_refused(repo: Path) -> None:
    """Each step alone looks harmless; the one that completes a layout is refused."""
    sb = _sandbox(repo)
    (repo / "p" / "objects").mkdir(parents=True)
    assert not sb.check("p/refs", write=True).allowed
    assert not sb.check("p/HEAD", write=True).allowed
    assert analyze("touch p/HEAD", sandbox=sb).verdict == "deny"
    assert sb.check("p/notes.txt", write=True).allowed  # other files are fine


READ_ONLY_GIT = [
    "git status",
    "git status --short",
    "git log --oneline -5",
    # `git log -p -3` printed the committed .env here: asked now (test_git_history.py).
    "git log -p -3 -- README.md",
    # `git diff` is asked here: the index tracks .env, whose masked copy would show as
    # changed and be printed (test_git_history.py).
    "git diff -- README.md",
    "git diff --stat HEAD",
    "git diff HEAD -- README.md",
    "git show HEAD --stat",
    "git show HEAD:README.md",
    "git branch --list",
    "git branch -a",
    "git rev-parse HEAD",
    "git ls-files",
    "git blame README.md",
    "git log --format=%H -1",
    "git stash list",
    "git tag --list",
    "git remote -v",
    "git describe --tags --always",
    "git shortlog -sn",
    "git grep hello",
    "git grep hello -- '*.md'",
]


@pytest.mark.parametrize("command", READ_ONLY_GIT)
def test_ordinary_read_only_git_is_allowed(repo: Path, command: str) -> None:
    """No false blocks of everyday read-only git, even with a denied-read policy."""
    result = analyze(command, sandbox=_sandbox(repo), denied_read_globs=["**/.env"])
    assert result.verdict == "allow", (command, result.reasons)
    assert host_git(repo, *command.split()[1:]).returncode in (0, 1)


OBJECT_ACCESS = [
    "git show HEAD:.env",
    "git show :.env",
    "git show HEAD:./.env",
    "git show 'HEAD:docs/../.env'",
    "git cat-file -p HEAD:.env",
    "git cat-file blob :0:.env",
    "git log -p -- .env",
    "git log -p -- '*.env'",
    "git log -p -- ':(glob)**/.en?'",
    "git diff HEAD~0 -- .env",
    "git grep TOKEN HEAD -- .env",
    "git archive HEAD .env",
    "git blame .env",
    "git show HEAD~0:.env | cat",
    "git rev-parse HEAD:.env",
    "git checkout HEAD -- .env",
]


@pytest.mark.parametrize("command", OBJECT_ACCESS)
def test_object_access_of_a_denied_path_is_refused(repo: Path, command: str) -> None:
    result = analyze(command, sandbox=_sandbox(repo), denied_read_globs=["**/.env"])
    assert result.verdict == "deny", (command, result.reasons)


def test_committed_secret_is_printed_by_git_but_refused_by_the_checker(repo: Path) -> None:
    shown = host_git(repo, "show", "HEAD:.env")
    assert "s3cr3t-value" in shown.stdout  # what `cat .env` under the masks could not print
    assert analyze("cat .env", sandbox=_sandbox(repo), denied_read_globs=["**/.env"]).verdict == (
        "deny"
    )
    shown_by_checker = analyze(
        "git show HEAD:.env", sandbox=_sandbox(repo), denied_read_globs=["**/.env"]
    )
    assert shown_by_checker.verdict == "deny"


UNBOUNDED_OBJECT_ACCESS = [
    "git archive HEAD",
    "git archive HEAD:sub",
    "git archive HEAD .",  # (`HEAD sub`: no commit holds sub, so git prints nothing: allowed)
    "git cat-file --batch-all-objects --batch",
    "git cat-file -p 0123456789abcdef0123456789abcdef01234567",
    "git fast-export --all",
    'git show "$REV"',
]


@pytest.mark.parametrize("command", UNBOUNDED_OBJECT_ACCESS)
def test_object_access_that_names_no_path_is_asked(repo: Path, command: str) -> None:
    result = analyze(command, sandbox=_sandbox(repo), denied_read_globs=["**/.env"])
    assert result.verdict in ("ask", "deny"), (command, result.reasons)
    assert not result.read_only or result.verdict == "ask"


def test_work_tree_elsewhere_is_a_write_there(repo: Path) -> None:
    globs = (".git/hooks/**", ".git/config")
    result = analyze("git --work-tree=/tmp checkout .", sandbox=_sandbox(repo, globs))
    assert result.verdict == "deny" and any("work tree" in r for r in result.reasons)


def test_unknown_git_subcommand_is_never_read_only(repo: Path) -> None:
    for command in ("git frobnicate", "git st", "git instaweb"):
        result = analyze(command, sandbox=_sandbox(repo))
        assert result.verdict != "allow" and not result.read_only, command


def test_repository_writes_are_asked_when_configuration_unprotects_git(repo: Path) -> None:
    """A deployment that lets agents commit drops `.git/**` (keeping hooks and config)."""
    globs = (".git/hooks/**", ".git/config", ".bashrc")
    sb = _sandbox(repo, globs)
    for command in ("git commit -m x", "git add -A", "git stash", "git init sub"):
        result = analyze(command, sandbox=sb)
        assert result.verdict == "ask", (command, result.reasons)
    assert analyze("echo x > .git/config", sandbox=sb).verdict == "deny"
    assert sb.check("p/HEAD", write=True).allowed  # layouts are a .git/** protection


def test_object_access_reports_the_files_it_reads(repo: Path) -> None:
    """`git show HEAD:.env` reads .env's committed copy: it is in paths_read, so a read rule
    downstream (an ASK on reading .env) sees it like `cat .env`."""
    result = analyze("git show HEAD:.env", sandbox=_sandbox(repo))
    assert str(repo / ".env") in result.paths_read
    result = analyze("git log -p -- README.md", sandbox=_sandbox(repo))
    assert str(repo / "README.md") in result.paths_read
    assert analyze("git log main", sandbox=_sandbox(repo)).paths_read == ()


def test_bash_check_cli_takes_denied_reads(repo: Path) -> None:
    import sys

    stockade = str(Path(sys.executable).parent / "stockade")
    base = [stockade, "bash-check", "--json", "--root", str(repo)]
    run = subprocess.run(
        [*base, "--cwd", str(repo), "--denied-read", "**/.env", "--", "git show HEAD:.env"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert '"verdict": "deny"' in run.stdout, run.stdout + run.stderr
    plain = subprocess.run(
        [*base, "--cwd", str(repo), "--", "git show HEAD:.env"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert '"verdict": "allow"' in plain.stdout, plain.stdout + plain.stderr


def test_folders_named_like_git_parts_are_not_a_repository(repo: Path) -> None:
    """A project's own `objects/` and `refs/` folders (no HEAD) stay ordinary folders:
    files inside are written as usual; only the HEAD that would make them a repository is
    refused."""
    (repo / "data" / "objects").mkdir(parents=True)
    (repo / "data" / "refs").mkdir()
    sb = _sandbox(repo)
    assert sb.check("data/objects/model.bin", write=True).allowed
    assert sb.check("data/notes.txt", write=True).allowed
    assert not sb.check("data/HEAD", write=True).allowed
