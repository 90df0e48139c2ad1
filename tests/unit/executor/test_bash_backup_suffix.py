"""Issue 11, red-team pass (session 6): a write through a backup suffix (EXE-8e).

GNU cp, mv, ln and install keep the file they replace as TARGET+SUFFIX when asked for
backups (`-b`, `--backup`, or `-S SUFFIX` alone). `cp -S rc x .bash` renames an existing
`.bash` (an ordinary file the agent wrote first) to `.bashrc`: a shell start-up file,
created with the agent's content. The checker judged only `.bash` (an ASK acceptEdits
settles), and at run time `.bashrc` did not exist yet, so nothing bound it read-only.
Backups are now judged as the writes they are (TARGET+SUFFIX, and DIR/SOURCE+SUFFIX in a
target directory); a suffix only known at run time is an immune ASK, and
SIMPLE_BACKUP_SUFFIX (the default suffix) is refused like the other variables that make
commands write elsewhere.

Each attack first runs in real bash inside a throwaway directory. Attack strings are data
here, never pasted into a shell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root


def _judge(command: str, root: Path) -> tuple[str, bool]:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    result = analyze(command, sandbox=sandbox)
    return result.verdict, result.bypass_immune


@pytest.mark.parametrize(
    "command",
    [
        "cp -S rc y .bash",
        "cp -b -S rc y .bash",
        "cp --backup --suffix=rc y .bash",
        "cp --backup=simple --suf=rc y .bash",
        "cp -bSrc y .bash",
        "mv -b -S rc y .bash",
        "install -b -S rc y .bash",
        "install --suffix rc y .bash",
        "ln -f -b -S rc y .bash",
        "mkdir -p s && cp y s/.bash && cp -b -S rc -t . s/.bash",
        "SIMPLE_BACKUP_SUFFIX=rc cp -b y .bash",
    ],
)
def test_the_backup_becomes_a_protected_file_and_is_refused(command: str, tmp_path: Path) -> None:
    (tmp_path / ".bash").write_text("echo planted\n")
    (tmp_path / "y").write_text("x\n")
    subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert (tmp_path / ".bashrc").read_text() == "echo planted\n"
    assert _judge(command, tmp_path)[0] == "deny"


@pytest.mark.parametrize(
    ("command", "verdict"),
    [
        ("cp -S /hooks/pre-commit y .git", "deny"),
        ("cp -b -S .d/tasks.json y .vscode", "deny"),
        ('cp -S "$s" y z', "ask"),
        ("cp -b y z", "ask"),
        ("cp y z", "ask"),
        ("cp -b -S .bak y z", "ask"),
    ],
)
def test_other_suffixes(command: str, verdict: str, tmp_path: Path) -> None:
    assert _judge(command, tmp_path)[0] == verdict
