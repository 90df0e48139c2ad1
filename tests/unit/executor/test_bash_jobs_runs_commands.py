"""Issue 11, red-team pass (session 6): a builtin on the read-only list that runs a command.

bash's `jobs -x COMMAND ARGS` replaces any jobspec in ARGS by its process group id and runs
COMMAND. `jobs` was judged read-only whatever its arguments, so `jobs -x rm -rf ~`,
`jobs -x sh -c …` and `jobs -xl cat /etc/shadow` were ALLOWED, and bash ran them. The
command after `-x` (bundled or not, after `--` too) is now judged as the command it is,
through the wrappers as usual; `jobs` and `jobs -l` stay allowed.

Each attack first runs in real bash inside a throwaway directory; attack strings are data
here, never pasted into a shell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root


def _analysis(command: str, root: Path) -> tuple[str, tuple[str, ...]]:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    result = analyze(command, sandbox=sandbox)
    return result.verdict, tuple(c.name for c in result.commands)


@pytest.mark.parametrize(
    "command",
    [
        "jobs -x touch PWNED",
        "jobs -x -- touch PWNED",
        "jobs -xl touch PWNED",
        "jobs -x env touch PWNED",
        "jobs -x sh -c 'touch PWNED'",
        "jobs -x timeout 5 touch PWNED",
    ],
)
def test_bash_runs_the_command_and_the_checker_judges_it(command: str, tmp_path: Path) -> None:
    subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert (tmp_path / "PWNED").exists()
    verdict, names = _analysis(command, tmp_path)
    assert verdict != "allow"
    assert names[0] == "jobs"
    assert names[-1] in ("touch", "sh")


@pytest.mark.parametrize(
    "command",
    [
        "jobs -x rm -rf ~",
        "jobs -x sh -c id",
        "jobs -lx cat /etc/shadow",
        "jobs -x -- bash",
        'jobs -x "$c"',
        "jobs -x eval id",
        "jobs -x env -S 'sh -c id'",
    ],
)
def test_dangerous_commands_behind_jobs_x_are_refused(command: str, tmp_path: Path) -> None:
    assert _analysis(command, tmp_path)[0] == "deny"


@pytest.mark.parametrize("command", ["jobs", "jobs -l", "jobs -p %1", "jobs -x echo %1"])
def test_listing_jobs_stays_allowed(command: str, tmp_path: Path) -> None:
    assert _analysis(command, tmp_path)[0] == "allow"
