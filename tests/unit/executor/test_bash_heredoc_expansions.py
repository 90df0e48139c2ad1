"""Issue 11, class 1 (red-team pass, session 3): tree-sitter-bash drops an expansion that
starts a here-document body line after blanks.

`cat <<E` / TAB `$(cmd)` / `E`: bash runs `cmd` (the body of a here-document with an
unquoted delimiter is expanded), but the grammar returns an empty `heredoc_body` — the
command was never judged and `cat` alone was ALLOWED (`rm -rf ~` in place of `cmd` too).
The same for a space, for `${x:-$(cmd)}` and `$[…]`, and for `<<-` (which strips the tab
bash reads after). The checker now refuses a body that still holds `$(`, `${…}` with more
than a name, or `$[` outside the expansions the grammar found. Each shape runs first in
real bash inside a throwaway directory (it creates the marker), then is judged.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

SHAPES = [
    "cat <<E\n\t$(touch PWNED)\nE",
    "cat <<E\n $(touch PWNED)\nE",
    "cat <<-E\n\t$(touch PWNED)\n\tE",
    "cat <<E\nfirst line\n  $(touch PWNED)\nE",
    "cat <<E\n\t${x:-$(touch PWNED)}\nE",
    "cat <<E\n\t`touch PWNED`\nE",
    "cat > /dev/null <<E\n\t\t$(touch PWNED) more\nE",
    "x=$(cat <<E\n\t$(touch PWNED)\nE\n)",
]


@pytest.mark.parametrize("command", SHAPES)
def test_bash_expands_it_and_the_checker_refuses(tmp_path: Path, command: str) -> None:
    ws = Path(os.path.realpath(tmp_path))
    subprocess.run(["bash", "-c", command], cwd=ws, capture_output=True, timeout=30)
    assert (ws / "PWNED").exists()  # bash ran the substitution
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    result = analyze(command.replace("touch PWNED", "rm -rf ~"), sandbox=sandbox)
    assert result.verdict == "deny", result.reasons


@pytest.mark.parametrize(
    "command",
    [
        "cat <<E\n  ${HOME} and $5\nE",
        "cat <<'E'\n\t$(touch PWNED)\nE",
        'cat <<"E"\n $(touch PWNED)\nE',
        "cat <<E\nplain text\n\tindented\nE",
    ],
)
def test_bodies_without_hidden_code_stay_allowed(tmp_path: Path, command: str) -> None:
    ws = Path(os.path.realpath(tmp_path))
    subprocess.run(["bash", "-c", command], cwd=ws, capture_output=True, timeout=30)
    assert not (ws / "PWNED").exists()  # a quoted delimiter: the body is literal
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    assert analyze(command, sandbox=sandbox).verdict == "allow"
