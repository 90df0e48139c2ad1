"""Issue 11, red-team pass (session 6): files that make other programs run code, which the
protected-write list missed (EXE-3).

`.gitconfig` was protected, but git reads its XDG twin `~/.config/git/config` the same
way: with the agent started in the person's home (HOME inside a writable root), a write
there (an ASK that acceptEdits settles, and allowed to file_write) set `core.fsmonitor`,
and the person's next `git status` ran it (the hooks work of the same session protects
`.config/git/**`; the test below keeps the attack). The same holds for `.bash_aliases`
(sourced by the default .bashrc of Debian and Ubuntu), yarn's `.yarnrc`/`.yarnrc.yml`
(yarnPath runs a file on every `yarn`), ripgrep's `.ripgreprc` (`--pre`), and the files
coding agents and dev containers run commands from (`.mcp.json`, `.claude.json`,
`.claude/`, `.devcontainer/`), as other agents' mandatory-deny lists protect them. They
are now protected writes: refused by the path sandbox (file tools, path-check), the bash
analysis and bound read-only at run time like the rest of the list.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import DEFAULT_PROTECTED_WRITES, PathSandbox, Root

_NEWLY_PROTECTED = [
    ".config/git/config",
    ".config/git/attributes",
    ".bash_aliases",
    ".yarnrc",
    ".yarnrc.yml",
    ".ripgreprc",
    ".mcp.json",
    ".claude.json",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".devcontainer/devcontainer.json",
    "sub/project/.devcontainer/devcontainer.json",
    ".CONFIG/Git/config",  # folded spellings match too
]


def _sandbox(root: Path) -> PathSandbox:
    return PathSandbox(
        [Root(str(root), True)], str(root), protected_write_globs=DEFAULT_PROTECTED_WRITES
    )


def test_a_planted_xdg_git_config_runs_on_the_persons_git_status(tmp_path: Path) -> None:
    """The attack: HOME is the workspace; .config/git/config is an ordinary write there."""
    marker = tmp_path / "PWNED"
    config = tmp_path / ".config" / "git" / "config"
    config.parent.mkdir(parents=True)
    config.write_text(f'[core]\n\tfsmonitor = "touch {marker}; false"\n')
    repo = tmp_path / "repo"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"}
    subprocess.run(["git", "init", "-q", str(repo)], env=env, check=True)
    subprocess.run(["git", "status"], cwd=repo, env=env, capture_output=True, check=False)
    assert marker.exists()  # git ran the planted command
    # ... and now the write that planted it is refused.
    decision = _sandbox(tmp_path).check(str(config), write=True)
    assert not decision.allowed
    assert "protected" in decision.reason


@pytest.mark.parametrize("relative", _NEWLY_PROTECTED)
def test_the_path_sandbox_refuses_writes(relative: str, tmp_path: Path) -> None:
    decision = _sandbox(tmp_path).check(str(tmp_path / relative), write=True)
    assert not decision.allowed


@pytest.mark.parametrize("relative", _NEWLY_PROTECTED)
def test_reads_stay_allowed(relative: str, tmp_path: Path) -> None:
    assert _sandbox(tmp_path).check(str(tmp_path / relative), write=False).allowed


@pytest.mark.parametrize(
    "command",
    [
        "cat a.txt > .config/git/config",
        "printf '[core]\\n\\tfsmonitor = id\\n' >> .config/git/config",
        "cp x .bash_aliases",
        "tee .yarnrc.yml < a.txt",
        "echo --pre=sh > .ripgreprc",
        "cp evil.json .mcp.json",
        "mkdir -p .claude && cp x .claude/settings.json",
        "sed -i s/a/b/ .devcontainer/devcontainer.json",
        "install -D x .claude/settings.local.json",
    ],
)
def test_the_bash_analysis_refuses_writes(command: str, tmp_path: Path) -> None:
    verdict = analyze(command, sandbox=_sandbox(tmp_path)).verdict
    assert verdict == "deny"


@pytest.mark.parametrize(
    "relative",
    [".config/other/config", "claude.md", "devcontainer.json", ".yarn/cache/x", "aliases"],
)
def test_neighbours_stay_writable(relative: str, tmp_path: Path) -> None:
    assert _sandbox(tmp_path).check(str(tmp_path / relative), write=True).allowed
