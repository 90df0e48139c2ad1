"""Issue 11, red-team pass (session 6): git forms that read the work tree, not the repository
(EXE-8d, DEC-16).

`git grep --no-index PATTERN` and `git grep --untracked PATTERN` search every file of the
directory, untracked ones too: with `**/.env` denied they printed `.env:SECRET=…` and were
ALLOWED (the pattern was judged as a file, the directory not at all; the history check
rightly found no `.env` in the repository). `git diff --no-index DIR OTHER` and
`diff -r` print the files of whole trees the same way. They are now the recursive reads
they are, as `grep -r PATTERN .` is: an ASK where a protected path can lie (not immune for
a denied path: the run-time masks hide it; immune for a path the policy asks about).

Each form first runs with real git in a throwaway repository (the secret comes out).
Attack strings are data here, never pasted into a shell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.inspect import inspect_call
from stockade.executor.paths import PathSandbox, Root
from stockade.executor.reach import recursive_reader

_SECRET = "hunter2-work-tree"
_ENV = {
    "PATH": "/usr/bin:/bin",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    env = {**_ENV, "HOME": str(tmp_path)}
    subprocess.run(["git", "init", "-q", str(tmp_path)], env=env, check=True)
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("print(1)\n")
    subprocess.run(["git", "add", "a.txt", "src"], cwd=tmp_path, env=env, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c1"],
        cwd=tmp_path,
        env=env,
        check=True,
    )
    (tmp_path / ".env").write_text(f"SECRET={_SECRET}\n")  # never committed
    (tmp_path / "empty").mkdir()
    return tmp_path


def _rules(command: str, root: Path, **globs: tuple[str, ...]) -> list[tuple[str, bool]]:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    inspection = inspect_call(
        "run_bash",
        {"command": command},
        sandbox=sandbox,
        denied_read_globs=globs.get("deny", ()),
        ask_read_globs=globs.get("ask", ()),
    )
    return [(rule.effect, rule.bypass_immune) for rule in inspection.rules]


_LEAKS = [
    "git grep --no-index SECRET",
    "git grep --untracked SECRET",
    "git grep --untr SECRET",
    "git grep --no-index -e SECRET -- .",
    "git -C . grep --no-exclude-standard --untracked -i secret",
    "git diff --no-index empty .",
    "diff -rN empty .",
    "diff --recursive --new-file empty .",
]


@pytest.mark.parametrize("command", _LEAKS)
def test_work_tree_readers_print_the_secret_and_are_asked(command: str, repo: Path) -> None:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=repo,
        env={**_ENV, "HOME": str(repo)},
        capture_output=True,
        encoding="utf-8",
        errors="replace",  # diff -r also prints .git's binary objects
        timeout=30,
        check=False,
    )
    assert _SECRET in done.stdout
    denied = _rules(command, repo, deny=("**/.env",))
    assert ("ask", False) in denied or any(effect == "deny" for effect, _ in denied)
    asked = _rules(command, repo, ask=(f"{repo}/.env",))
    assert ("ask", True) in asked or any(effect == "deny" for effect, _ in asked)


@pytest.mark.parametrize(
    "command",
    [
        "git grep SECRET",  # tracked files only: the repository holds no .env
        "git grep -n hello -- a.txt",
        "diff a.txt src/m.py",
        "git diff --no-index a.txt src/m.py",
    ],
)
def test_repository_and_single_file_forms_stay_allowed(command: str, repo: Path) -> None:
    assert _rules(command, repo, deny=("**/.env",)) == []


@pytest.mark.parametrize(
    ("name", "argv", "recursive"),
    [
        ("git", ("grep", "--no-index", "x"), True),
        ("git", ("grep", "--untracked", "x"), True),
        ("git", ("grep", "--no-exclude-standard", "x"), True),
        ("git", ("-C", "sub", "grep", "--untr", "x"), True),
        ("git", ("diff", "--no-index", "a", "b"), True),
        ("git", ("grep", "x"), False),
        ("git", ("grep", "--cached", "x"), False),
        ("git", ("diff", "HEAD"), False),
        ("git", ("log", "--no-index"), False),
        ("diff", ("-r", "a", "b"), True),
        ("diff", ("-ruN", "a", "b"), True),
        ("diff", ("--recursive", "a", "b"), True),
        ("diff", ("a", "b"), False),
    ],
)
def test_recursive_readers_know_work_tree_forms(
    name: str, argv: tuple[str, ...], recursive: bool
) -> None:
    assert recursive_reader(name, argv) is recursive
