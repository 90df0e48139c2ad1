"""Issue 11, gaps (session 7, found re-attacking): text only known at run time evaluated
as arithmetic.

A variable only known at run time in `$((x))` was asked, but a command substitution (or a
translated `$"..."`) written in the arithmetic itself was not: `echo $(( $(cat f) ))`,
`[[ $(cat f) -eq 1 ]]` and `${a[$(cat f)]}` were ALLOWED, and with f holding a[$(cmd)]
bash runs cmd. They are asked now (bypass-immune); substitutions whose output can only be
a number (`wc -l < f`, `date +%s`, `git rev-list --count`, `nproc`) stay allowed.

Real bash runs only inside throwaway directories; attack strings are data here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

SHAPES = ["echo $(( $(cat a.txt) ))", "[[ $(cat a.txt) -eq 1 ]]", "echo ${b[$(cat a.txt)]}",
          "(( $(< a.txt) > 1 ))", "s=abc; echo ${s:$(cat a.txt)}",
          'a=(1 2); echo "${a[@]:1:$(cat a.txt)}"']  # fmt: skip


def _ws(tmp_path: Path) -> tuple[Path, PathSandbox]:
    ws = Path(os.path.realpath(tmp_path)) / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a[$(touch PWNED)]\n")
    return ws, PathSandbox([Root(str(ws), True)], str(ws))


@pytest.mark.parametrize("command", SHAPES)
def test_bash_runs_the_code_in_the_text(tmp_path: Path, command: str) -> None:
    ws, sandbox = _ws(tmp_path)
    subprocess.run(["bash", "-c", command], cwd=ws, capture_output=True, timeout=30)
    assert (ws / "PWNED").exists()  # bash ran the substitution in the file's text
    result = analyze(command, sandbox=sandbox)
    assert result.verdict == "ask" and result.bypass_immune, result.reasons
    assert "as arithmetic" in " ".join(result.reasons)


def test_the_same_for_wc_naming_a_file_and_a_translated_string(tmp_path: Path) -> None:
    _, sandbox = _ws(tmp_path)
    for command in ("echo $(( $(wc -l a.txt) ))", '[[ $"x" -eq 1 ]]', 'echo ${b[$"x"]}'):
        result = analyze(command, sandbox=sandbox)
        assert result.verdict == "ask" and result.bypass_immune, command


@pytest.mark.parametrize(
    "command",
    ["echo $(( $(wc -l < a.txt) + 1 ))", "echo $(( $(date +%s) - 5 ))", "echo $(( 1 + 2 ))",
     "[[ $(git rev-list --count HEAD) -gt 5 ]]", "echo $(( $(nproc) * 2 ))",
     'echo "$(cat a.txt)"', "x=3; echo $((x*2))", "s=abc; echo ${s:-$(cat a.txt)}",
     "s=abc; echo ${s:1:$(wc -l < a.txt)}"],
)  # fmt: skip
def test_numeric_output_stays_allowed(tmp_path: Path, command: str) -> None:
    _, sandbox = _ws(tmp_path)
    assert analyze(command, sandbox=sandbox).verdict == "allow", command
