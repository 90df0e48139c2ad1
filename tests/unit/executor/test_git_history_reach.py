"""Issue 11, class 5 residuals: what git history forms reach under their pathspecs.

A pathspec `x` matches `x` and everything under `x/` in every commit git walks, so a name
that is a file today reaches `x/.env` from the commits where `x` was a directory;
`--follow` crosses a rename from any name (`.env` -> `notes.txt`). Both printed a secret
the policy denies reading while the checker allowed them. The checker now reads the
repository's history itself (githistory.py, never by running git) and asks unless no
commit git can reach — refs, reflogs, `*HEAD` files, ids named in the command — holds a
denied path under the form's pathspecs; which also lets directory pathspecs, exclusions
and pathspec-less forms through when the history is clean (they were always asked).

Every attack is first run with the real git in a throwaway repository (it prints the
secret), then judged. Attack strings are data here, never typed into a shell of ours.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stockade.executor.bash import analyze, githistory
from stockade.executor.bash.githistory import HistoryCache, history_holds_denied
from stockade.executor.paths import PathSandbox, Root
from tests.hostgit import host_bash

S1 = "SEKRIT-DIR-1111"
S2 = "SEKRIT-REN-2222"
DENIED = ("**/.env",)


def _steps(ws: Path, steps: list[str]) -> None:
    for step in steps:
        done = host_bash(ws, step)
        assert done.returncode == 0, (step, done.stderr)


def _verdict(ws: Path, command: str, denied: tuple[str, ...] = DENIED) -> str:
    sandbox = PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=denied)
    return analyze(command, sandbox=sandbox, denied_read_globs=denied).verdict


@pytest.fixture(scope="module", params=["loose", "packed"])
def moved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """c1: x/.env (S1); c2: x becomes a file; c3: .env (S2); c4: .env -> notes.txt;
    c5: notes.txt overwritten. Loose objects, or one aggressive pack (deltas)."""
    ws = Path(os.path.realpath(tmp_path_factory.mktemp("moved"))) / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "x").mkdir()
    (ws / "src" / "app.py").write_text("x = 1\n" * 40)
    (ws / "README.md").write_text("hello\n")
    (ws / "x" / ".env").write_text(f"TOKEN={S1}\n")
    _steps(
        ws,
        [
            "git init -q -b main .",
            "git add -A && git commit -qm c1",
            "git rm -rq x && echo now-a-file > x && git add x && echo y = 2 >> src/app.py "
            "&& git commit -qam c2",
            f"echo TOKEN={S2} > .env && git add -f .env && git commit -qm c3",
            "git mv .env notes.txt && git commit -qm c4",
            "echo plain > notes.txt && git commit -qam c5",
        ],
    )
    if request.param == "packed":
        _steps(
            ws, ["git gc -q --aggressive", 'test -z "$(ls .git/objects | grep -v -e pack -e info)"']
        )
    return ws


# (command, the secret real git prints with it)
REACHING = [
    ("git log -p -- x", S1),  # x is a file now; x/.env in c1
    ("git log -p x", S1),
    ("git log --all -U0 -- x", S1),
    ("git diff HEAD~4 -- x", S1),
    ("git diff HEAD~4 HEAD x", S1),
    ("git show HEAD~3 -- x", S1),  # c2 deletes x/.env
    ("git grep TOKEN HEAD~4 -- x", S1),
    ("git log -p -- ./x", S1),
    ("git log -p -- X", ""),  # another case: asked all the same (core.ignorecase)
    ("git log --follow -p -- notes.txt", S2),  # across the rename from .env
    ("git log --follow --patch notes.txt", S2),
    ("git log -p -- ':!src'", S1),  # an exclusion reaches everything else
    ("git log -p -- ':(exclude)README.md'", S1),
    ("git log -p -- .", S1),
    ("git log -p --all", S1),
    ("git whatchanged -p -- x", S1),
    ("git archive HEAD~4 x", S1),  # the tree of that commit under x
    ("git archive --format=tar HEAD~4 x", S1),
    ("git archive --format tar HEAD~4 src", ""),  # an option taking a value: the whole tree
]


@pytest.mark.parametrize(("command", "secret"), REACHING)
def test_history_under_a_pathspec_is_asked(moved: Path, command: str, secret: str) -> None:
    if secret:
        assert secret in host_bash(moved, command).stdout, "the real git prints the secret"
    assert _verdict(moved, command) == "ask"


# Forms whose pathspecs never held a denied path in any commit: allowed (they were
# always asked before the history was read).
CLEAN_UNDER = [
    "git log -p -- src",
    "git log -p -- src/app.py",
    "git log -p src",
    "git diff HEAD~4 -- src",
    "git diff HEAD~4 HEAD -- src README.md",
    "git show HEAD~3 -- src",
    "git log -p -- README.md",
    "git grep -n y HEAD~3 -- src",
    "git log -p -- ':!x' src",  # the positive pathspec bounds it
    "git archive HEAD src",
    "git archive --format=tar HEAD~4 src README.md",
]


@pytest.mark.parametrize("command", CLEAN_UNDER)
def test_history_clean_under_the_pathspecs_is_allowed(moved: Path, command: str) -> None:
    done = host_bash(moved, command)
    assert done.returncode == 0 and S1 not in done.stdout and S2 not in done.stdout
    assert _verdict(moved, command) == "allow"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository that never held a denied path."""
    ws = Path(os.path.realpath(tmp_path_factory.mktemp("clean"))) / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("x = 1\n")
    _steps(
        ws,
        [
            "git init -q -b main .",
            "git add -A && git commit -qm one",
            "echo y = 2 >> src/app.py && git commit -qam two",
            "git tag -a v1 -m v1",
        ],
    )
    return ws


@pytest.mark.parametrize(
    "command",
    [
        "git log -p",
        "git log -p -- ':!.env'",
        "git log -p -- .",
        "git show",
        "git show v1",
        "git diff HEAD~1",
        "git log -p --follow -- src/app.py",
        "git format-patch --stdout HEAD~1",
    ],
)
def test_pathspec_less_forms_are_allowed_when_history_never_held_a_denied_path(
    clean: Path, command: str
) -> None:
    assert _verdict(clean, command) == "allow"


def test_the_same_forms_are_asked_once_a_denied_file_was_committed(tmp_path: Path) -> None:
    ws = Path(os.path.realpath(tmp_path))
    (ws / "a.txt").write_text("a\n")
    _steps(ws, ["git init -q -b main .", "git add -A && git commit -qm one"])
    assert _verdict(ws, "git log -p -- ':!.env'") == "allow"
    _steps(ws, [f"echo TOKEN={S1} > .env && git add -f .env && git commit -qm two"])
    for command in ("git log -p -- ':!.env'", "git log -p", "git show"):
        assert _verdict(ws, command) == "ask", command
    # ... also when a later commit removed it (history keeps it).
    _steps(ws, ["git rm -q --cached .env && git commit -qm three", "rm .env"])
    assert S1 in host_bash(ws, "git log -p").stdout
    assert _verdict(ws, "git log -p") == "ask"


def test_a_dangling_commit_named_by_id_is_walked(tmp_path: Path) -> None:
    """A commit no ref or reflog names (git fsck --lost-found lists it) is still shown
    when the command names its id (abbreviated too)."""
    ws = Path(os.path.realpath(tmp_path))
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("a\n")
    _steps(
        ws,
        [
            "git init -q -b main .",
            "git add -A && git commit -qm one",
            "git checkout -q -b side",
            f"echo TOKEN={S1} > src/.env && git add -f src/.env && git commit -qm two",
            "git rev-parse HEAD > ../dangling",
            "git checkout -q main && git branch -qD side",
            "git reflog expire --expire=now --all",
        ],
    )
    sha = (tmp_path.parent / "dangling").read_text().strip()
    assert host_bash(ws, "git log --all --oneline").stdout.count("\n") == 1  # unreachable now
    for command in (
        f"git log -p {sha} -- src",
        f"git show {sha[:8]} -- src",
        f"git diff {sha[:7]}~1 {sha[:7]}",
    ):
        assert S1 in host_bash(ws, command).stdout, command
        assert _verdict(ws, command) == "ask", command
    assert _verdict(ws, "git log -p -- src") == "allow"  # main's history is clean
    # Revisions from stdin are not seen: asked.
    assert _verdict(ws, f"echo {sha} | git log -p --stdin -- src") == "ask"


def test_a_reflog_only_commit_is_walked(tmp_path: Path) -> None:
    """An amended-away secret stays in the reflog (`git log -g -p` prints it)."""
    ws = Path(os.path.realpath(tmp_path))
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("a\n")
    _steps(
        ws,
        [
            "git init -q -b main .",
            f"echo TOKEN={S1} > src/.env && git add -A && git add -f src/.env "
            "&& git commit -qm one",
            "git rm -q --cached src/.env && git commit -q --amend -m one",
        ],
    )
    assert S1 in host_bash(ws, "git log -g -p -- src").stdout
    assert _verdict(ws, "git log -g -p -- src") == "ask"


def test_sha256_repositories_are_read(tmp_path: Path) -> None:
    ws = Path(os.path.realpath(tmp_path))
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("a\n")
    (ws / "x").mkdir()
    (ws / "x" / ".env").write_text(f"TOKEN={S1}\n")
    done = host_bash(ws, "git init -q --object-format=sha256 -b main .")
    if done.returncode != 0:
        pytest.fail(f"this git cannot make a SHA-256 repository: {done.stderr}")
    _steps(ws, ["git add -A && git add -f x/.env && git commit -qm one", "git gc -q"])
    assert _verdict(ws, "git log -p -- src") == "allow"
    assert S1 in host_bash(ws, "git log -p -- x").stdout
    assert _verdict(ws, "git log -p -- x") == "ask"


def test_what_cannot_be_read_with_certainty_is_asked(tmp_path: Path) -> None:
    """Alternates, replace refs, a submodule under the pathspec, a tree named by id: the
    reader does not guess (None), and the form is asked."""
    ws = Path(os.path.realpath(tmp_path)) / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a\n")
    _steps(ws, ["git init -q -b main .", "git add -A && git commit -qm one"])
    git_dir = str(ws / ".git")
    cache = HistoryCache()

    def held(prefixes: list[str], ids: list[str] = []) -> bool | None:  # noqa: B006
        return history_holds_denied(
            git_dir, str(ws), prefixes, ids, lambda p: p.endswith("/.env"), cache
        )

    assert held(["src"]) is False
    tree = host_bash(ws, "git rev-parse HEAD^{tree}").stdout.strip()
    assert held(["src"], [tree]) is None
    alternates = ws / ".git" / "objects" / "info" / "alternates"
    alternates.write_text("/elsewhere/objects\n")
    assert held(["src"]) is None
    assert _verdict(ws, "git log -p -- src") == "ask"
    alternates.unlink()
    head = host_bash(ws, "git rev-parse HEAD").stdout.strip()
    _steps(ws, [f"git replace -f {head} $(git commit-tree -m r {tree})"])
    assert held(["src"]) is None
    _steps(ws, [f"git replace -d {head}"])
    assert held(["src"]) is False
    # A submodule (gitlink) under the pathspec: its history is another repository's.
    _steps(ws, [f"git update-index --add --cacheinfo 160000,{head},src/sub && git commit -qm sub"])
    assert held(["src"]) is None
    assert held(["src/a.py"]) is False


def test_the_bounds_make_it_unknown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ws = Path(os.path.realpath(tmp_path))
    (ws / "a").write_text("a\n")
    _steps(ws, ["git init -q -b main .", "git add -A && git commit -qm 1"])
    for k in range(2, 6):
        _steps(ws, [f"echo {k} >> a && git commit -qam {k}"])
    cache = HistoryCache()
    assert (
        history_holds_denied(str(ws / ".git"), str(ws), [""], [], lambda p: False, cache) is False
    )
    monkeypatch.setattr(githistory, "MAX_COMMITS", 3)
    assert (
        history_holds_denied(str(ws / ".git"), str(ws), [""], [], lambda p: False, HistoryCache())
        is None
    )
    monkeypatch.setattr(githistory, "MAX_COMMITS", 10_000)
    monkeypatch.setattr(githistory, "MAX_OBJECTS", 4)
    assert (
        history_holds_denied(str(ws / ".git"), str(ws), [""], [], lambda p: False, HistoryCache())
        is None
    )
    assert _verdict(ws, "git log -p") == "ask"


def test_a_corrupt_object_is_unknown(tmp_path: Path) -> None:
    ws = Path(os.path.realpath(tmp_path))
    (ws / "a").write_text("a\n")
    _steps(ws, ["git init -q -b main .", "git add -A && git commit -qm 1"])
    head = host_bash(ws, "git rev-parse HEAD").stdout.strip()
    loose = ws / ".git" / "objects" / head[:2] / head[2:]
    loose.chmod(0o644)
    loose.write_bytes(b"not zlib at all")
    got = history_holds_denied(str(ws / ".git"), str(ws), [""], [], lambda p: False, HistoryCache())
    assert got is None
