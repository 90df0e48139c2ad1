"""Issue 11, red-team pass (session 6): `source` of what a pipe feeds, by another name.

`source /dev/stdin` (and `source -`) is refused: it runs generated text that cannot be
checked. The same stdin by its other names — `/dev/fd/0`, `/proc/self/fd/0`,
`/proc/thread-self/fd/0`, another inherited descriptor (`/dev/fd/3 3<file`), spellings with
`//` or `/./` — was a plain ASK that an allow rule or bypass mode settles, and
`source -- FILE` judged a file named `--` (`source -- .env` read a denied file unseen).

Each attack first runs in real bash inside a throwaway directory. Attack strings are data
here, never pasted into a shell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root


def _judge(command: str, root: Path) -> str:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    return analyze(command, sandbox=sandbox, denied_read_globs=("**/.env",)).verdict


@pytest.mark.parametrize(
    "command",
    [
        "echo 'touch PWNED' | source /dev/fd/0",
        "echo 'touch PWNED' | . /proc/self/fd/0",
        "echo 'touch PWNED' | . /proc/thread-self/fd/0",
        "echo 'touch PWNED' | source /dev//stdin",
        "echo 'touch PWNED' | source /dev/./fd/0",
        "echo 'touch PWNED' | source //dev/stdin",
        "echo 'touch PWNED' > x; source /dev/fd/3 3<x",
    ],
)
def test_bash_runs_the_fed_text_and_the_checker_refuses(command: str, tmp_path: Path) -> None:
    subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert (tmp_path / "PWNED").exists()
    assert _judge(command, tmp_path) == "deny"


def test_source_dashdash_judges_the_file(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SECRET=1\n")
    assert _judge("source -- .env", tmp_path) == "deny"
    assert _judge("source -- a.sh", tmp_path) == "ask"


@pytest.mark.parametrize("command", ["source a.sh", ". ./a.sh", "source ./scripts/env.sh"])
def test_sourcing_a_file_stays_an_ask(command: str, tmp_path: Path) -> None:
    assert _judge(command, tmp_path) == "ask"
