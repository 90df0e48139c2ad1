"""Issue 11, red-team pass (session 3): a `cd` the checker refuses is still taken by bash.

`cd DIR` outside the roots was an ASK (a read outside the roots), and the checker then
judged the relative paths after it from where the line started — but bash goes to DIR.
`cd /etc && cat shadow` read a credential under a (bypass-immune) ASK that named only
"reads /etc", and a denied path named relatively after the `cd` was judged against the
wrong directory. Now the walk follows the `cd` it asks about.
Real bash runs only in throwaway directories; attack strings are data here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root


def _setup(tmp_path: Path) -> tuple[Path, Path, PathSandbox]:
    base = Path(os.path.realpath(tmp_path))
    ws = base / "ws"
    outside = base / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOKEN=SEKRIT\n")
    denied = (str(outside / "secret.txt"),)
    return ws, outside, PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=denied)


@pytest.mark.parametrize(
    "template",
    [
        "cd {outside} && cat secret.txt",
        "cd {outside}; head -1 secret.txt",
        "pushd {outside} >/dev/null; cat ./secret.txt",
        "cd ../outside && cat secret.txt",
        "cd .. && cat outside/secret.txt",
    ],
)
def test_relative_paths_after_a_cd_outside_are_judged_from_there(
    tmp_path: Path, template: str
) -> None:
    ws, outside, sandbox = _setup(tmp_path)
    command = template.format(outside=outside)
    done = subprocess.run(["bash", "-c", command], cwd=ws, capture_output=True, text=True)
    assert "SEKRIT" in done.stdout  # bash reads the file
    result = analyze(command, sandbox=sandbox, denied_read_globs=sandbox.denied_read_globs)
    # Outside the roots a read is a bypass-immune ASK (a denied one too); what matters is
    # that the file bash reads is the one judged (before, `secret.txt` was looked up in
    # the workspace and passed).
    assert result.verdict == "ask" and result.bypass_immune, result.reasons
    assert any(str(outside / "secret.txt") in r for r in result.reasons), result.reasons


def test_a_credential_read_after_cd_is_refused(tmp_path: Path) -> None:
    ws, _, sandbox = _setup(tmp_path)
    for command in ("cd /etc && cat shadow", "cd /etc; grep root shadow", "pushd /etc; cat shadow"):
        result = analyze(command, sandbox=sandbox)
        assert result.verdict == "deny", (command, result.reasons)


def test_a_cd_outside_alone_stays_an_ask(tmp_path: Path) -> None:
    _, outside, sandbox = _setup(tmp_path)
    result = analyze(f"cd {outside} && ls", sandbox=sandbox)
    assert result.verdict == "ask" and result.bypass_immune


# --- the grammar reads a reserved word as a command name -------------------------------

RESERVED_MISPARSES = [
    "coproc x { touch PWNED; }",
    "coproc x while true; do touch PWNED; break; done",
    "coproc x if true; then touch PWNED; fi",
    "coproc x for f in a; do touch PWNED; done",
    "coproc x until false; do touch PWNED; break; done",
]


@pytest.mark.parametrize("command", RESERVED_MISPARSES)
def test_a_coprocess_with_a_name_runs_its_body(tmp_path: Path, command: str) -> None:
    """bash runs the compound command of `coproc NAME …`; tree-sitter reads `coproc` as a
    command with arguments and the body's `}`, `do`, `then` as command names, so the
    payload was an argument of an unknown command `x` (a plain ASK that bypass mode
    settles): `coproc x { rm -rf ~; }` ran rm unjudged."""
    ws = Path(os.path.realpath(tmp_path))
    subprocess.run(["bash", "-c", command + "; wait"], cwd=ws, capture_output=True, timeout=30)
    assert (ws / "PWNED").exists()  # bash ran the body
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    result = analyze(command.replace("touch PWNED", "rm -rf ~"), sandbox=sandbox)
    assert result.verdict == "deny", result.reasons


def test_quoted_reserved_words_are_ordinary_names(tmp_path: Path) -> None:
    sandbox = PathSandbox([Root(str(tmp_path), True)], str(tmp_path))
    for command in ("echo do done then fi }", "for f in a; do echo $f; done", "{ ls; }"):
        assert analyze(command, sandbox=sandbox).verdict == "allow", command
