"""Issue 11, gaps (session 7): removing a variable is changing it.

The allow-list judged what a command sets, not what it removes. `unset PATH; ls` was
ALLOWED, and bash without PATH runs commands from the current directory: a planted ./ls
ran. `unset GIT_CONFIG_COUNT` / `env -u GIT_CONFIG_GLOBAL` removed the executor's
neutralisation of git (command-scope overrides, no global config), so the command's git
read and ran what the repository's configuration names; `env -i` clears all of it. Now a
variable the executor sets is judged when removed like when set, and `env -i` is asked.
With them kept, the command's git reads only the repository's configuration, which the
path sandbox reads too (gitconfig.py).

Real bash runs only inside throwaway directories; attack strings are data here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.confine.env import command_env
from stockade.executor.paths import PathSandbox, Root


def _ws(tmp_path: Path) -> tuple[Path, dict[str, str], PathSandbox]:
    base = Path(os.path.realpath(tmp_path))
    ws = base / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    tmp = base / "tmp"
    tmp.mkdir()
    env = command_env(cwd=str(ws), tmp_dir=str(tmp))  # the executor's environment
    return ws, env, PathSandbox([Root(str(ws), True)], str(ws))


def _bash(script: str, ws: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["/bin/bash", "-c", script], cwd=ws, env=env, capture_output=True, text=True, timeout=30
    )
    return done.stdout + done.stderr


def test_unset_path_runs_commands_from_the_current_directory(tmp_path: Path) -> None:
    ws, env, sandbox = _ws(tmp_path)
    planted = ws / "ls"
    planted.write_text("#!/bin/sh\necho PLANTED\n")
    planted.chmod(0o755)
    assert "PLANTED" in _bash("unset PATH; ls", ws, env)  # bash runs ./ls
    assert "PLANTED" not in _bash("ls", ws, env)
    for command in ("unset PATH; ls", "unset -v PATH; ls", "unset x PATH", "env -u PATH ls",
                    "env --unset=PATH ls"):  # fmt: skip
        assert analyze(command, sandbox=sandbox).verdict == "deny", command


def test_removing_the_git_neutralisation_is_refused(tmp_path: Path) -> None:
    ws, env, sandbox = _ws(tmp_path)
    marker = ws / "RAN"
    subprocess.run(["git", "init", "-q", str(ws)], check=True, env=env)
    # A repository a person cloned, whose configuration runs a program on `git status`.
    hook = ws / "monitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    with open(ws / ".git" / "config", "a") as config:
        config.write(f"[core]\n\tfsmonitor = {hook}\n")
    _bash("git status >/dev/null 2>&1", ws, env)
    assert not marker.exists()  # neutralised
    _bash("unset GIT_CONFIG_COUNT; git status >/dev/null 2>&1", ws, env)
    assert marker.exists()  # bash ran the configured program
    for command in ("unset GIT_CONFIG_COUNT; git status", "env -u GIT_CONFIG_COUNT git status",
                    "unset GIT_CONFIG_GLOBAL GIT_CONFIG_NOSYSTEM", "unset HOME",
                    "env -u GIT_CONFIG_KEY_0 git log"):  # fmt: skip
        assert analyze(command, sandbox=sandbox).verdict == "deny", command
    for command in ("env -i git status", "env - git status", "env -iu X git status",
                    "env -vi git status", "env --ignore-env git log"):  # fmt: skip
        result = analyze(command, sandbox=sandbox)
        assert result.verdict == "ask" and "env -i" in " ".join(result.reasons), command


@pytest.mark.parametrize(
    "command",
    ["unset x", "unset -f ls; ls", "unset LANG; ls", "unset a b c", "env -u LANG ls",
     "unset LD_PRELOAD; ls", "env -u i ls", "unset -f PATH"],
)  # fmt: skip
def test_ordinary_removals_stay_allowed(tmp_path: Path, command: str) -> None:
    _, _, sandbox = _ws(tmp_path)
    assert analyze(command, sandbox=sandbox).verdict == "allow", command
