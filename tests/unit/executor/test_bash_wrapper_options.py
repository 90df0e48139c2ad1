"""Issue 11, gaps (session 7): the option tables of the wrappers looked through.

A wrapper option the table reads with the wrong arity makes the checker judge the wrong
word as the program: `env -a NAME CMD` (coreutils 9.5 added `-a/--argv0 ARG0`) was read
as the flag `-a` and the program `NAME`, so `env -a cat rm -rf x` was ALLOWED (a `cat` of
three files) where a newer env runs `rm -rf x`; `dbus-run-session --dbus-daemon=./x ls`
was allowed and runs ./x. Every wrapper now lists its flags too, an option in none of its
sets is asked (bypass-immune), and the flags are checked against the installed programs:
none may take the next word as its value.

Real programs run only inside throwaway directories; attack strings are data here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from stockade.contract.shell import WRAPPERS
from stockade.decision.rules import normalize_command
from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
# A positional each wrapper needs before the command (timeout DURATION, chrt PRIORITY ...).
_POSITIONAL = {"timeout": "5", "chrt": "0", "taskset": "1", "flock": "lock", "faketime": "-1d"}


def _ws(tmp_path: Path) -> tuple[Path, PathSandbox]:
    ws = Path(os.path.realpath(tmp_path)) / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    return ws, PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=("**/.env",))


def _runs(argv: list[str], marker: Path, cwd: Path) -> bool:
    marker.unlink(missing_ok=True)
    try:
        subprocess.run(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=5,
            env={"PATH": _PATH, "HOME": str(cwd), "LC_ALL": "C"},
        )
    except subprocess.TimeoutExpired:
        pass
    return marker.exists()


def test_flags_of_wrappers_do_not_take_the_next_word(tmp_path: Path) -> None:
    """`W FLAG P true` must run P: if it does not while `W FLAG 1 P true` does, FLAG took
    a value and the table is wrong (the checker would judge P's word as a flag's value)."""
    marker = tmp_path / "RAN"
    program = tmp_path / "P"
    program.write_text(f"#!/bin/sh\ntouch {marker}\n")
    program.chmod(0o755)
    ran = 0
    wrong: list[tuple[str, str]] = []
    for name, spec in sorted(WRAPPERS.items()):
        binary = shutil.which(name, path=_PATH)
        if binary is None:
            continue
        positional = [_POSITIONAL[name]] if name in _POSITIONAL else []
        for flag in sorted(spec.flag_options):
            if _runs([binary, flag, *positional, str(program), "true"], marker, tmp_path):
                ran += 1
            elif _runs([binary, flag, "1", *positional, str(program), "true"], marker, tmp_path):
                wrong.append((name, flag))
    assert ran >= 40  # the flags are really exercised on this machine
    assert not wrong, f"these wrapper flags take the next word as a value: {wrong}"


def test_dbus_run_session_daemon_option_runs_a_program(tmp_path: Path) -> None:
    ws, sandbox = _ws(tmp_path)
    marker = ws / "RAN"
    payload = ws / "x"
    payload.write_text(f"#!/bin/sh\ntouch {marker}\n")
    payload.chmod(0o755)
    binary = shutil.which("dbus-run-session", path=_PATH)
    assert binary is not None
    subprocess.run(
        ["bash", "-c", "dbus-run-session --dbus-daemon=./x ls"],
        cwd=ws,
        capture_output=True,
        timeout=30,
        env={"PATH": _PATH, "HOME": str(ws)},
    )
    assert marker.exists()  # bash runs the payload
    for command in ("dbus-run-session --dbus-daemon=./x ls", "dbus-run-session --dbus ./x ls"):
        assert analyze(command, sandbox=sandbox).verdict == "deny", command
    assert analyze("dbus-run-session -- ls", sandbox=sandbox).verdict == "allow"


def test_env_argv0_takes_a_value(tmp_path: Path) -> None:
    """`env -a NAME CMD` runs CMD (named NAME) in coreutils 9.5 and later; older ones
    refuse `-a`. Either way CMD is what the checker must judge."""
    ws, sandbox = _ws(tmp_path)
    marker = ws / "gone"
    marker.write_text("x")
    helptext = subprocess.run(["env", "--help"], capture_output=True, text=True).stdout
    done = subprocess.run(
        ["bash", "-c", "env -a cat rm -f gone"], cwd=ws, capture_output=True, timeout=30
    )
    if "--argv0" in helptext:
        assert not marker.exists()  # a newer env ran `rm -f gone`
    else:
        assert done.returncode == 125 and marker.exists()  # this env refuses -a
    for command in ("env -a cat rm -rf x", "env --argv0 cat rm -rf x", "env -ia cat rm x"):
        result = analyze(command, sandbox=sandbox)
        assert result.verdict != "allow" and "rm" in " ".join(result.reasons), command
    assert analyze("env -a x bash", sandbox=sandbox).verdict == "deny"
    for command in ("env -a x ls", "env --argv0=x ls", "env -a x cat a.txt"):
        assert analyze(command, sandbox=sandbox).verdict == "allow", command


@pytest.mark.parametrize(
    "command",
    ["env -Z cat rm -rf x", "nice -X cat a.txt", "timeout -Q 5 ls", "nohup -x ls",
     "builtin -x echo", "xargs -Y ls", "time --bogus ls", "setsid -x ls", "flock -Q a ls",
     "stdbuf -x ls", "env -iZ ls", "prlimit -z ls", "valgrind --db-command=./x ls"],
)  # fmt: skip
def test_an_unknown_option_of_a_wrapper_is_asked(tmp_path: Path, command: str) -> None:
    _, sandbox = _ws(tmp_path)
    result = analyze(command, sandbox=sandbox)
    assert result.verdict in ("ask", "deny") and result.bypass_immune, command
    assert "does not know" in " ".join(result.reasons), result.reasons
    # The rules' ALLOW form does not look through it either (it cannot tell the command).
    words = command.split()
    assert normalize_command(command, look_through_privilege=False).split()[0] == words[0]


@pytest.mark.parametrize(
    "command",
    ["env -i ls", "env -iv ls", "env - ls", "env --block-signal=PIPE ls", "env -u X ls",
     "nice -5 ls", "nice -n5 ls", "nice --adj=3 ls", "timeout --foreground 5 ls",
     "timeout --pres -s KILL 5 ls", "time -p ls", "command -p ls", "exec -a x ls",
     "stdbuf -oL ls", "prlimit --nofile=5 ls", "ionice -c3 -t ls", "taskset -c 0 ls",
     "chrt -o 0 ls", "chrt -T 5 0 cat a.txt", "valgrind --leak-check=full -q ls"],
)  # fmt: skip
def test_known_options_of_wrappers_stay_allowed(tmp_path: Path, command: str) -> None:
    _, sandbox = _ws(tmp_path)
    result = analyze(command, sandbox=sandbox)
    assert result.verdict == "allow", result.reasons


def test_chrt_deadline_options_take_a_value(tmp_path: Path) -> None:
    """`chrt -T 5 0 cat rm x`: -T takes 5, 0 is the priority, `cat rm x` is run (it was
    judged as the program `0`)."""
    _, sandbox = _ws(tmp_path)
    done = subprocess.run(["chrt", "-T", "5", "X", "true"], capture_output=True, text=True)
    assert "X" in done.stderr and "5" not in done.stderr.replace("-T", "")  # 5 is -T's
    result = analyze("chrt -T 5 0 rm -rf x", sandbox=sandbox)
    assert result.verdict != "allow" and "rm" in " ".join(result.reasons)
