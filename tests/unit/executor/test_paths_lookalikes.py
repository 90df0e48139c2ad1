"""The path sandbox against look-alike spellings of protected names and credential files
inside a root (#11, the closing red team): per class, real files in a temp tree, and the
file tools (read_file, grep_files) as the agent calls them.

Classes:
* case, Unicode compatibility forms, invisible format characters and trailing dots or
  blanks in a protected or denied-read name (``.GIT/config``, ``.env\\u200b``,
  ``\\uff0eenv``, ``.git./hooks/x``): a case-insensitive or normalising file system (a
  casefold directory, a mounted share, the person's macOS checkout) opens the protected
  file by that name, and git itself treats them as ``.git``;
* credential files when the home directory is (inside) a root: an agent started in ``~``
  could ``read_file .ssh/id_ed25519`` while ``cat ~/.ssh/id_ed25519`` was refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from stockade.executor.paths import PathSandbox, Root, fold_for_match
from stockade.executor.readstate import ReadState
from stockade.executor.tools import file_tools
from stockade.executor.tools.base import ExecContext, ToolLimits, ToolResult

DENIED = ("**/.env", "**/secrets/**")

# Protected writes under another spelling (the default protected-write globs).
WRITE_LOOKALIKES = [
    ".GIT/config",
    ".Git/hooks/pre-commit",
    ".git./config",
    ".git /hooks/post-checkout",
    ".git\u200b/config",
    ".git\u200d/hooks/x",
    "\u200b.git/config",
    ".\uff47it/config",  # full-width g
    "\uff0egit/config",  # full-width full stop
    "sub/.GIT/modules/x/config",
    ".BASHRC",
    ".bashrc\u200b",
    ".bashrc.",
    ".Profile",
    ".VSCODE/tasks.json",
    ".\u0455sh/authorized_keys".replace("\u0455", "s"),  # plain: the control case
    ".SSH/authorized_keys",
    ".GITMODULES",
    ".NPMRC",
    ".envrc\u2060",
    ".\ufeffzshrc",
]

# Denied reads under another spelling.
READ_LOOKALIKES = [
    ".ENV",
    ".Env",
    ".env\u200b",
    "\u200b.env",
    ".e\u200cnv",
    "\uff0eenv",
    ".\uff45nv",
    ".env.",
    ".env ",
    "SECRETS/k.txt",
    "Secrets./k.txt",
    "\uff53ecrets/k.txt",
]

# Ordinary names that must stay allowed (no false blocks from the folding).
ORDINARY = ["src/Main.py", "README.MD", "env.txt", "notes~draft.md", "a..b.txt", "caf\u00e9.txt"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in READ_LOOKALIKES:
        target = ws / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("SECRET=lookalike\n")
    for name in ORDINARY:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text("ordinary\n")
    return ws


def sandbox(ws: Path) -> PathSandbox:
    return PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=DENIED)


def test_fold_for_match_spellings() -> None:
    assert fold_for_match("/W/.GIT/Config") == "/w/.git/config"
    assert fold_for_match("/w/.git\u200b/config") == "/w/.git/config"
    assert fold_for_match("/w/\uff0eenv") == "/w/.env"
    assert fold_for_match("/w/.git. /x.") == "/w/.git/x"
    # '.' and '..' components, and names of dots only, keep their meaning.
    assert fold_for_match("**/../...") == "**/../..."


@pytest.mark.parametrize("name", WRITE_LOOKALIKES)
def test_protected_write_lookalikes_are_refused(tree: Path, name: str) -> None:
    decision = sandbox(tree).check(name, write=True)
    assert not decision.allowed, name
    assert "protected pattern" in decision.reason


@pytest.mark.parametrize("name", READ_LOOKALIKES)
def test_denied_read_lookalikes_are_refused(tree: Path, name: str) -> None:
    assert (tree / name).is_file()  # a real file, readable but for the sandbox
    decision = sandbox(tree).check(name)
    assert not decision.allowed, name
    assert "denied" in decision.reason


@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_names_stay_allowed(tree: Path, name: str) -> None:
    sb = sandbox(tree)
    assert sb.check(name).allowed
    assert sb.check(name, write=True).allowed


# --- credential files when the home directory is inside a root ----------------------

CREDENTIALS = [
    ".ssh/id_ed25519",
    ".ssh/id_rsa",
    ".aws/credentials",
    ".kube/config",
    ".docker/config.json",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".git-credentials",
    ".config/gh/hosts.yml",
    ".gnupg/private-keys-v1.d/k.key",
    ".SSH/id_rsa",
    ".aws\u200b/credentials",
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    for rel in [*CREDENTIALS, "proj/main.py"]:
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("token=hunter2\n")
    monkeypatch.setenv("HOME", str(home))
    yield home


@pytest.mark.parametrize("rel", CREDENTIALS)
def test_credentials_in_a_home_root_are_refused(home: Path, rel: str) -> None:
    sb = PathSandbox([Root(str(home), True)], str(home))
    for spelling in (rel, str(home / rel), f"{home}/./{rel}", f"proj/../{rel}"):
        assert not sb.check(spelling).allowed, spelling
    assert sb.check("proj/main.py").allowed


def _ctx(sb: PathSandbox, cwd: Path) -> ExecContext:
    return ExecContext(
        session_id="s",
        call_id="c",
        working_dir=str(cwd),
        sandbox=sb,
        read_state=ReadState(),
        limits=ToolLimits(library_dir=None, max_output_chars=100_000, max_file_write_bytes=1 << 20),
    )


async def _run(tool: str, args: Mapping[str, Any], ctx: ExecContext) -> ToolResult:
    items = [item async for item in file_tools()[tool].run(args, ctx)]
    result = items[-1]
    assert isinstance(result, ToolResult)
    return result


async def test_file_tools_do_not_read_credentials_in_a_home_root(home: Path) -> None:
    ctx = _ctx(PathSandbox([Root(str(home), True)], str(home)), home)
    for rel in (".ssh/id_ed25519", ".aws/credentials", ".SSH/id_rsa"):
        result = await _run("read_file", {"file_path": rel}, ctx)
        assert "hunter2" not in result.content, rel
    grep = await _run("grep_files", {"pattern": "hunter2", "path": str(home)}, ctx)
    # Only the ordinary project file is searched; no credential file is read.
    assert grep.content.strip() == f"{home}/proj/main.py:1:token=hunter2"


async def test_file_tools_do_not_read_lookalike_denied_names(tree: Path) -> None:
    ctx = _ctx(sandbox(tree), tree)
    for name in READ_LOOKALIKES:
        result = await _run("read_file", {"file_path": name}, ctx)
        assert "lookalike" not in result.content, name
    grep = await _run("grep_files", {"pattern": "SECRET", "path": str(tree)}, ctx)
    assert "lookalike" not in grep.content
    written = await _run("file_write", {"file_path": ".GIT/config", "content": "x"}, ctx)
    assert not (tree / ".GIT").exists(), written.content
