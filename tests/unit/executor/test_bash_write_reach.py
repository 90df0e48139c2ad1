"""Class 6 of issue 11 (EXE-8e): writes through options of commands, file operands of
wrappers and variables that name files are judged by the path sandbox: outside the
writable roots refused, on a protected path refused, inside a write (ASK).

Each class is shown real first: the tool writes the file named (a marker in a throwaway
directory), then the checker judges the same form.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / "a.txt").write_text("b\na\n")
    return ws


def _sb(ws: Path) -> PathSandbox:
    return PathSandbox([Root(str(ws), True)], str(ws))


def _real(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    full = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    subprocess.run(
        command, cwd=cwd, env={**full, **(env or {})}, timeout=60, check=False, capture_output=True
    )


def test_the_forms_really_write_the_file_they_name(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _real(["flock", str(outside / "lock"), "true"], ws)
    _real(["sort", "-o", str(outside / "sorted"), "a.txt"], ws)
    _real(["git", "init", "-q", "."], ws)
    _real(["git", "status"], ws, {"GIT_TRACE": str(outside / "trace")})
    if shutil.which("shuf"):
        _real(["shuf", "-o", str(outside / "shuf"), "a.txt"], ws)
        assert (outside / "shuf").exists()
    assert (outside / "lock").exists()
    assert (outside / "sorted").read_text() == "a\nb\n"
    assert (outside / "trace").stat().st_size > 0


OUTSIDE = [
    # options of listed commands, abbreviated, attached, bundled
    "sort --output=/tmp/x11b-o a.txt",
    "sort --outp=/tmp/x11b-o a.txt",
    "sort -uo/tmp/x11b-o a.txt",
    "tree -o /tmp/x11b-o",
    "ls --output=/tmp/x11b-o",
    "diff --output=/tmp/x11b-o a.txt a.txt",
    # commands the lists do not describe
    "shuf -o /tmp/x11b-o a.txt",
    "sdiff -o /tmp/x11b-o a.txt a.txt",
    "pandoc -o /tmp/x11b-o a.md",
    "mytool --output=/tmp/x11b-o",
    "mytool --log-file /tmp/x11b-o",
    "mytool -o/tmp/x11b-o",
    "gcc -o /usr/local/bin/x11b x.c",
    "pip install -t /tmp/x11b-site pkg",
    # wrappers' file operands and options
    "flock /tmp/x11b-lock ls",
    "flock -n /etc/cron.d/x11b true",
    "flock -w 5 /tmp/x11b-lock ls",
    "time -o /tmp/x11b-t ls",
    "time -ao /tmp/x11b-t ls",
    "time --output=/tmp/x11b-t ls",
    "nice time -o /tmp/x11b-t ls",
    "valgrind --log-file=/tmp/x11b-v ls",
    "rlwrap -l /tmp/x11b-log cat",
    "xvfb-run -e /tmp/x11b-e ls",
    # variables that name files
    "GIT_TRACE=/tmp/x11b-t git status",
    "GIT_TRACE2_EVENT=/tmp/x11b-t git status",
    "GIT_TRACE_PACKET=/tmp/x11b-t git log",
    "env GIT_TRACE=/tmp/x11b-t git status",
    "env -i HISTFILE=/tmp/x11b-h ls",
    "env -u X HISTFILE=/tmp/x11b-h ls",
    "HISTFILE=/tmp/x11b-h ls",
    "export LESSHISTFILE=/tmp/x11b-l",
    "declare -x PSQL_HISTORY=/tmp/x11b-h",
    "SSLKEYLOGFILE=/tmp/x11b-k ls",
    "FOO_LOG_FILE=/tmp/x11b-x ls",
    "TMPDIR=/etc sort a.txt",
    # found attacking the first version: bundles, archives, history, pipes, patch
    "history -w /tmp/x11b-h",
    "patch -o /tmp/x11b-o a.diff",
    "mkfifo /tmp/x11b-f",
    "tar -cf /tmp/x11b.tar a.txt",
    "tar -czf /tmp/x11b.tgz a.txt",
    "tar czf /tmp/x11b.tgz a.txt",
    "csplit -f /tmp/x11b-p a.txt 1",
    "mytool --out-file=/tmp/x11b-o",
    "mytool --export=~/x11b",
    "mytool -xo /tmp/x11b-o",
]


@pytest.mark.parametrize("command", OUTSIDE)
def test_writes_outside_the_roots_are_refused(ws: Path, command: str) -> None:
    result = analyze(command, sandbox=_sb(ws))
    assert result.verdict == "deny", (command, result.reasons)


PROTECTED = [
    "flock .git/config ls",
    "flock .bashrc true",
    "time -o .git/hooks/pre-commit ls",
    "GIT_TRACE=.git/hooks/post-checkout git status",
    "HISTFILE=.bashrc ls",
    "mytool --output=.git/hooks/pre-push",
    "valgrind --log-file=.profile ls",
]


@pytest.mark.parametrize("command", PROTECTED)
def test_writes_to_protected_paths_are_refused(ws: Path, command: str) -> None:
    result = analyze(command, sandbox=_sb(ws))
    assert result.verdict == "deny", (command, result.reasons)


def test_a_file_variable_only_known_at_run_time_is_asked(ws: Path) -> None:
    result = analyze("GIT_TRACE=$PWD/.git/hooks/post-checkout git status", sandbox=_sb(ws))
    assert result.verdict in ("ask", "deny") and not result.read_only, result.reasons


INSIDE = [
    "flock build.lock ls",
    "time -o timings.txt ls",
    "GIT_TRACE_PACKET=./trace.log git log",
    "HISTFILE=hist.txt ls",
    "mytool --output=out.txt",
    "sort -o sorted.txt a.txt",
]


@pytest.mark.parametrize("command", INSIDE)
def test_writes_inside_are_writes(ws: Path, command: str) -> None:
    result = analyze(command, sandbox=_sb(ws))
    assert result.verdict == "ask" and not result.read_only, (command, result.reasons)


NETWORK_OUTPUTS = [
    "curl -o ~/.bashrc https://example.com",
    "curl --output=/tmp/x11b-o https://example.com",
    "curl -fsSLo /tmp/x11b-o https://example.com",
    "curl -sSo .bashrc https://example.com",
    "curl -c /tmp/x11b-jar https://example.com",
    "curl -D /tmp/x11b-h https://example.com",
    "curl --trace /tmp/x11b-t https://example.com",
    "wget -O /tmp/x11b-o https://example.com",
    "wget -qO /tmp/x11b-o https://example.com",
    "wget -P /tmp https://example.com",
    "wget -o /tmp/x11b-log https://example.com",
    "rsync -a a.txt /tmp/x11b-r",
    "scp a.txt /tmp/x11b-s",
    "rsync -a host:src .ssh/",
]


@pytest.mark.parametrize("command", NETWORK_OUTPUTS)
def test_downloads_to_a_file_outside_or_protected_are_refused(ws: Path, command: str) -> None:
    """With the network on, a download is an ASK; where it writes is still judged."""
    result = analyze(command, sandbox=_sb(ws), network_enabled=True)
    assert result.verdict == "deny", (command, result.reasons)
    inside = analyze(
        "curl -fsSLo page.html https://example.com", sandbox=_sb(ws), network_enabled=True
    )
    assert inside.verdict == "ask"


NOT_WRITES = [
    "GIT_TRACE=1 git status",
    "GIT_TRACE=2 git status",
    "GIT_TRACE=false git log --oneline -1",
    "flock 9",
    "ls -o",
    "ps -o pid",
    "sort a.txt",
    "time ls",
    "gcc -O2 -Wno-error -I/opt/include a.c",
    "mytool --log-level=debug",
    "wget -qO- https://example.com",
]


@pytest.mark.parametrize("command", NOT_WRITES)
def test_forms_that_write_nothing_are_not_judged_writes(ws: Path, command: str) -> None:
    result = analyze(command, sandbox=_sb(ws), network_enabled=True)
    assert result.verdict != "deny", (command, result.reasons)
    assert not any("outside" in r or "protected" in r for r in result.reasons), command
    assert os.path.isdir(ws)
