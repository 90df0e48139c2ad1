"""Issue 11, gaps (session 7): `$"..."` is translated by bash at run time.

bash looks a `$"..."` string up in the message catalog that TEXTDOMAIN and TEXTDOMAINDIR
name, when the line is read: an agent that writes a `.mo` file into the workspace and sets
the two variables (a bare assignment, `read`, `printf -v`, a `for` variable ...) on an
earlier line turns `cat $"a.txt"` into a read of any file, in the executor's own
environment (`LC_ALL=C.UTF-8` translates too). The checker took the string's text as its
value; it is now a word only known at run time, like `$x`.

Real bash runs only inside throwaway directories; attack strings are data here.
"""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.bash.parser import parse
from stockade.executor.confine.env import command_env
from stockade.executor.paths import PathSandbox, Root


def _mo(original: str, translated: str) -> bytes:
    """A GNU message catalog with one entry (and the header gettext wants)."""
    pairs = sorted([("", "Content-Type: text/plain; charset=UTF-8\n"), (original, translated)])
    ids = [k.encode() for k, _ in pairs]
    strs = [v.encode() for _, v in pairs]
    count = len(pairs)
    data = 7 * 4 + count * 16
    table_ids, table_strs, offset = b"", b"", data
    for item in ids:
        table_ids += struct.pack("<2I", len(item), offset)
        offset += len(item) + 1
    for item in strs:
        table_strs += struct.pack("<2I", len(item), offset)
        offset += len(item) + 1
    header = struct.pack("<7I", 0x950412DE, 0, count, 28, 28 + count * 8, 0, 0)
    body = b"".join(i + b"\0" for i in ids) + b"".join(s + b"\0" for s in strs)
    return header + table_ids + table_strs + body


def _setup(tmp_path: Path) -> tuple[Path, Path, PathSandbox]:
    base = Path(os.path.realpath(tmp_path))
    ws = base / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("plain\n")
    secret = base / "outside" / "secret"
    secret.parent.mkdir()
    secret.write_text("SEKRIT\n")
    catalog = ws / "locale" / "C.UTF-8" / "LC_MESSAGES"
    catalog.mkdir(parents=True)
    (catalog / "evil.mo").write_bytes(_mo("a.txt", str(secret)))
    return ws, secret, PathSandbox([Root(str(ws), True)], str(ws))


def test_bash_translates_a_string_through_a_planted_catalog(tmp_path: Path) -> None:
    ws, _, sandbox = _setup(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = 'TEXTDOMAINDIR=./locale TEXTDOMAIN=evil\ncat $"a.txt"'
    done = subprocess.run(
        ["/bin/bash", "-c", script],
        cwd=ws,
        env=command_env(cwd=str(ws), tmp_dir=str(tmp)),  # the executor's environment
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "SEKRIT" in done.stdout  # bash read the file outside the roots
    result = analyze(script, sandbox=sandbox)
    assert result.verdict != "allow" and result.bypass_immune, result.reasons
    assert "only known at run time" in " ".join(result.reasons)


@pytest.mark.parametrize(
    "command",
    ['cat $"a.txt"', 'cat x$"a.txt"', 'cat $"a"b', 'cat < $"a.txt"', 'x=$"a.txt"; cat $x',
     'for f in $"a.txt"; do cat "$f"; done', 'read TEXTDOMAIN\ncat $"a.txt"',
     'sort -o $"a.txt" a.txt', '$"ls" .'],
)  # fmt: skip
def test_a_translated_string_is_only_known_at_run_time(tmp_path: Path, command: str) -> None:
    _, _, sandbox = _setup(tmp_path)
    result = analyze(command, sandbox=sandbox)
    assert result.verdict != "allow", (command, result.reasons)
    assert result.verdict == "deny" or result.bypass_immune, (command, result.reasons)


@pytest.mark.parametrize(
    "command",
    ['echo $"Hello"', 'echo $"Hello, $USER"', 'cat "a.txt"', 'echo "cost $"', "cat 'a.txt'",
     'printf "%s\\n" "$"', 'cat a.txt | grep "a"'],
)  # fmt: skip
def test_look_alikes_stay_allowed(tmp_path: Path, command: str) -> None:
    _, _, sandbox = _setup(tmp_path)
    assert analyze(command, sandbox=sandbox).verdict == "allow", command


def test_a_dollar_before_a_string_is_dropped_as_bash_drops_it(tmp_path: Path) -> None:
    """`x$"a"` is `xa` to bash (translated or not), never `x$a`."""
    ws, _, _ = _setup(tmp_path)
    done = subprocess.run(
        ["/bin/bash", "-c", 'printf "%s\\n" x$"a"'], cwd=ws, capture_output=True, text=True
    )
    assert done.stdout == "xa\n"
    for line in ('printf "%s\\n" x$"a"', 'printf "%s\\n" $"a"', 'printf "%s\\n" $"a"b'):
        (command,) = parse(line).commands
        assert command.args[-1].value is None, line  # not `x$a`, not `a`: a run-time value
    (command,) = parse('printf "%s\\n" x"$"').commands
    assert command.args[-1].value == "x$"
