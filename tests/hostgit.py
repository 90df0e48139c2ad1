"""The host's git and bash as a person would run them later: no user or system config,
no pager, a fixed identity. Tests run them to show what an attack really does."""

from __future__ import annotations

import subprocess
from pathlib import Path

HOST_GIT_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
    "GIT_PAGER": "cat",
}


def host_bash(cwd: Path, command: str) -> subprocess.CompletedProcess[str]:
    """The command in real bash with the host's git (the attack's effect)."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=HOST_GIT_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )


def host_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The host's git, with no neutralisation at all."""
    return subprocess.run(
        ["git", *args], cwd=cwd, env=HOST_GIT_ENV, capture_output=True, text=True, timeout=60
    )
