"""Files a command line creates itself are not on disk when it is judged (issue 11 gap).

Globs are checked against the files present at judgement time (a planted `-delete` makes
`find *` delete; a planted symlink makes `cat *` read elsewhere), and links are judged by
the target as written. A line can create those files and use them in a later command:
`touch -- -x; printf %s *` passes the created name as an option, `ln -s outside/s sub/x;
cat sub/x` follows a link that resolves from its own directory. Such a line is already
an ASK (it writes); it is now bypass-immune, so neither an allow rule for its writes nor
acceptEdits settles it without a person. Each case runs in real bash in a throwaway
directory first; attack strings are data here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root


def _bash(cwd: Path, command: str) -> str:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("x = 1\n")
    (ws / "sub").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret").write_text("TOP-SECRET\n")
    # A link inside the workspace to a folder outside it (planted earlier).
    os.symlink(elsewhere, ws / "sub" / "outside")
    return ws


def _judge(ws: Path, command: str) -> tuple[str, bool]:
    result = analyze(command, sandbox=PathSandbox([Root(str(ws), True)], str(ws)))
    return result.verdict, result.bypass_immune


def test_a_created_file_becomes_a_glob_match_and_an_option(ws: Path) -> None:
    command = "touch -- -n && printf '[%s]' *"
    assert "[-n]" in _bash(ws, command)  # bash passed the new name to printf as a word
    assert _judge(ws, command) == ("ask", True)


@pytest.mark.parametrize(
    "command",
    [
        "touch -- -delete; find *",
        "echo x > -rf; ls -la *",
        "tar xf a.tar; cat *",
        "cp -r src dst && cat dst/*",
        "echo done > build/log.txt; ls build/*",
        "ln -s target link; cat l*",
        "unzip a.zip && grep -r key *",
    ],
)
def test_a_line_that_writes_where_its_glob_looks_is_immune(ws: Path, command: str) -> None:
    assert _judge(ws, command) == ("ask", True), command


def test_a_created_link_is_followed_from_its_own_directory(ws: Path) -> None:
    command = "ln -s outside/secret sub/x; cat sub/x"
    assert "TOP-SECRET" in _bash(ws, command)  # read outside the roots through the new link
    (ws / "sub" / "x").unlink()
    assert _judge(ws, command) == ("ask", True)
    assert _judge(ws, "cp -s outside/secret sub/y && wc -l sub/y") == ("ask", True)


@pytest.mark.parametrize(
    "command",
    [
        "mkdir -p build && cp src/*.py build/",
        "touch a.txt; cat src/*.py",
        "ln -s src/app.py app.py",
    ],
)
def test_writes_unrelated_to_the_line_s_globs_stay_ordinary_asks(ws: Path, command: str) -> None:
    assert _judge(ws, command) == ("ask", False), command


def test_read_only_globs_stay_allowed(ws: Path) -> None:
    assert _judge(ws, "wc -l src/*.py") == ("allow", False)
    assert _judge(ws, "for f in src/*.py; do echo $f; done") == ("allow", False)
