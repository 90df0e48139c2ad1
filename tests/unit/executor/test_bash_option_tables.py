"""Issue 11, red-team pass (session 3): option tables that disagree with the programs.

The checker skips the value of an option it believes takes one (`head -n 5`); when the
program does not take one there, the skipped word is a file the program reads — never
judged. Found: `column -t` (`--table`, a flag), `od -w` and `uniq --group` /
`--all-repeated` (values attached only), `iconv -f/-t` (a name with `/` is a charmap
file iconv reads), and a wrapper option that runs its value (`fakeroot --faked PROG`).
The first two tests ask the real programs installed here about every option the tables
say takes a value, so the next wrong entry fails here too. Also: `tar -f host:file`
(a remote archive through rsh/ssh), `sort --files0-from=F` (prints files only F names)
and `find -files0-from F`.

Real programs run only inside throwaway directories; attack strings are data here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from stockade.contract.shell import WRAPPERS
from stockade.executor.bash import analyze, lists
from stockade.executor.paths import PathSandbox, Root

_PATH = "/usr/bin:/bin"


def _opens(program: str, option: str, directory: Path) -> bool:
    """Whether ``program OPTION FIFO`` opens FIFO (so it did not take FIFO as the
    option's value but as a file). A FIFO shows the open: a writer's non-blocking open
    succeeds only while a reader has it open."""
    fifo = directory / "P"
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [program, option, str(fifo)],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": _PATH, "HOME": str(directory), "LC_ALL": "C"},
    )
    opened = False
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                opened = True
                break
            except OSError:
                time.sleep(0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return opened


def test_value_options_of_read_only_commands_really_take_a_value(tmp_path: Path) -> None:
    probed = 0
    wrong: list[tuple[str, str]] = []
    for name, spec in sorted(lists.SAFE_COMMANDS.items()):
        program = shutil.which(name, path=_PATH)
        if program is None:
            continue
        for option in sorted(spec.value_options):
            probed += 1
            if _opens(program, option, tmp_path):
                wrong.append((name, option))
    assert probed >= 100  # the table is really exercised on this machine
    assert not wrong, f"these options do not take the next word as a value: {wrong}"


def test_value_options_of_wrappers_do_not_run_their_value(tmp_path: Path) -> None:
    marker = tmp_path / "RAN"
    program_file = tmp_path / "P"
    program_file.write_text(f"#!/bin/sh\ntouch {marker}\n")
    program_file.chmod(0o755)
    probed = 0
    wrong: list[tuple[str, str]] = []
    for name, spec in sorted(WRAPPERS.items()):
        program = shutil.which(name, path=_PATH + ":/usr/sbin:/sbin")
        if program is None:
            continue
        for option in sorted(spec.value_options - spec.deny_options):
            probed += 1
            marker.unlink(missing_ok=True)
            try:
                subprocess.run(
                    [program, option, str(program_file), "true"],
                    cwd=tmp_path,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=5,
                    env={"PATH": _PATH, "HOME": str(tmp_path)},
                )
            except subprocess.TimeoutExpired:
                pass
            if marker.exists():
                wrong.append((name, option))
    assert probed >= 20
    assert not wrong, f"these wrapper options run their value: {wrong}"


def _ws(tmp_path: Path) -> tuple[Path, PathSandbox]:
    ws = Path(os.path.realpath(tmp_path)) / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("b\na\n")
    return ws, PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=("**/.env",))


@pytest.mark.parametrize(
    ("command", "printed"),
    [
        ("column -t {secret}", "TOKEN=SEKRIT"),
        ("od -c -w {secret}", "S   E   K"),
        ("uniq --group {secret}", "TOKEN=SEKRIT"),
        ("uniq --all-repeated {secret} /dev/null", ""),
    ],
)
def test_a_flag_read_as_taking_a_value_hid_the_file(
    tmp_path: Path, command: str, printed: str
) -> None:
    """The secret lies outside the roots: the real program prints it, the checker must
    not allow the read (it skipped the path as the option's value before)."""
    outside = Path(os.path.realpath(tmp_path)) / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("TOKEN=SEKRIT\nTOKEN=SEKRIT\n")
    ws, sandbox = _ws(tmp_path)
    line = command.format(secret=secret)
    program = shutil.which(line.split()[0], path=_PATH)
    assert program is not None
    done = subprocess.run(line.split(), cwd=ws, capture_output=True, text=True, timeout=30)
    assert printed in done.stdout
    result = analyze(line, sandbox=sandbox)
    assert result.verdict != "allow", result.reasons
    assert str(secret) in " ".join(result.reasons)


def test_iconv_reads_an_encoding_name_with_a_slash_as_a_file(tmp_path: Path) -> None:
    ws, sandbox = _ws(tmp_path)
    assert shutil.which("iconv", path=_PATH) is not None
    assert _opens(shutil.which("iconv", path=_PATH) or "iconv", "-f", ws)  # the real iconv
    result = analyze("iconv -f /etc/shadow -t UTF-8 a.txt", sandbox=sandbox)
    assert result.verdict == "deny"
    assert analyze("iconv -f UTF-8 -t ASCII//TRANSLIT a.txt", sandbox=sandbox).verdict == "allow"


def test_fakeroot_options_that_run_programs_are_refused(tmp_path: Path) -> None:
    ws, sandbox = _ws(tmp_path)
    fakeroot = shutil.which("fakeroot", path=_PATH)
    assert fakeroot is not None
    marker = ws / "PWNED"
    payload = ws / "x"
    payload.write_text(f"#!/bin/sh\ntouch {marker}\n")
    payload.chmod(0o755)
    subprocess.run(
        [fakeroot, "--faked", str(payload), "true"], cwd=ws, capture_output=True, timeout=30
    )
    assert marker.exists()  # bash would run the payload
    for command in ("fakeroot --faked ./x true", "fakeroot -l ./x.so ls", "fakeroot --lib=./x ls"):
        assert analyze(command, sandbox=sandbox).verdict == "deny", command
    assert analyze("fakeroot -- ls", sandbox=sandbox).verdict == "allow"


@pytest.mark.parametrize(
    "command",
    ["tar -tf host:x", "tar tf user@host:/dev/st0", "tar --file=h:x -t", "tar -t --file h:x",
     "tar -xvf h:x"],
)  # fmt: skip
def test_tar_with_a_remote_archive_uses_the_network(tmp_path: Path, command: str) -> None:
    ws, sandbox = _ws(tmp_path)
    done = subprocess.run(
        ["tar", "-tf", "nohost.invalid:x"], cwd=ws, capture_output=True, text=True, timeout=60
    )
    assert "Cannot connect to nohost.invalid" in done.stderr  # the real tar goes remote
    result = analyze(command, sandbox=sandbox)
    assert result.verdict == "deny" and result.needs_network, result.reasons
    assert analyze(command, sandbox=sandbox, network_enabled=True).verdict != "allow"


def test_a_local_name_with_a_colon_stays_local(tmp_path: Path) -> None:
    _, sandbox = _ws(tmp_path)
    for command in ("tar -tf ./host:x", "tar --force-local -tf host:x", "tar -tf /tmp/a:b"):
        assert not analyze(command, sandbox=sandbox).needs_network, command


def test_files_named_in_a_file_are_only_known_at_run_time(tmp_path: Path) -> None:
    ws, sandbox = _ws(tmp_path)
    outside = Path(os.path.realpath(tmp_path)) / "outside.txt"
    outside.write_text("TOKEN=SEKRIT\n")
    (ws / "l").write_bytes(str(outside).encode() + b"\0")
    done = subprocess.run(
        ["sort", "--files0-from=l"], cwd=ws, capture_output=True, text=True, timeout=30
    )
    assert "SEKRIT" in done.stdout  # sort prints a file the command line never names
    for command in ("sort --files0-from=l", "sort --files0-f l", "find . -files0-from l"):
        result = analyze(command, sandbox=sandbox)
        assert result.verdict == "ask" and result.bypass_immune, command
