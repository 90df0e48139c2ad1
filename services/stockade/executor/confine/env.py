"""The minimal, clean environment commands run with, git neutralised.

Nothing of the executor's own environment (credentials, proxies, ``BASH_ENV``,
``LD_PRELOAD``, ``PYTHONPATH`` ...) reaches a command. Git is made unable to run code
from configuration: a planted ``.git/config`` with ``core.fsmonitor = ./evil`` would
otherwise turn a read-only ``git status`` into code execution. ``GIT_CONFIG_COUNT``
entries have "command" scope and beat every config file, including the repository's.
"""

from __future__ import annotations

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# key -> value; each neutralises one way a config file can make git run a program.
GIT_OVERRIDES: tuple[tuple[str, str], ...] = (
    # fsmonitor hooks run on every `git status` (CVE-2022-24765-style attacks).
    ("core.fsmonitor", "false"),
    # A pager is a program git runs on output.
    ("core.pager", "cat"),
    # Hooks run on commit, checkout, merge ...; /dev/null holds no hooks.
    ("core.hooksPath", "/dev/null"),
    # The ssh command runs on fetch/push/clone.
    ("core.sshCommand", "false"),
    # The editor runs on commit/rebase without -m.
    ("core.editor", "false"),
)


def command_env(*, cwd: str, tmp_dir: str) -> dict[str, str]:
    """The whole environment of a command run in ``cwd`` with private ``tmp_dir``."""
    env = {
        "PATH": SAFE_PATH,
        "HOME": tmp_dir,
        "TMPDIR": tmp_dir,
        "PWD": cwd,
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GIT_EDITOR": "false",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_COUNT": str(len(GIT_OVERRIDES)),
    }
    for index, (key, value) in enumerate(GIT_OVERRIDES):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env
