"""Issue 11, class 6 (EXE-8e): files and directories read through OPTIONS of read-only
programs are judged by the path sandbox exactly as the same path given as an operand
(`fd --base-directory DIR` as `ls DIR`, `date -r FILE` as `stat FILE`), and options or
flags that make a program read the files another file names (`wc --files0-from=F`,
`md5sum -c LIST`, `file -f LIST`) are asked: which files is only known at run time.

Attack strings are data here; real programs run only inside throwaway directories.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

_PATH = "/usr/bin:/bin"


@pytest.fixture
def ws(tmp_path: Path) -> tuple[Path, Path, PathSandbox]:
    """A workspace (the writable root) and a secret file beside it, outside the roots."""
    base = Path(os.path.realpath(tmp_path))
    root = base / "ws"
    root.mkdir()
    (root / "a.txt").write_text("b\na\n")
    (root / "patterns.txt").write_text("a\n")
    (root / "src").mkdir()
    (root / "src" / "m.py").write_text("x = 1\n")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOKEN=SEKRIT\n")
    sandbox = PathSandbox([Root(str(root), True)], str(root), denied_read_globs=("**/.env",))
    return root, outside, sandbox


def _verdict(command: str, sandbox: PathSandbox) -> str:
    return analyze(command, sandbox=sandbox).verdict


# (the option form, the operand form it must be judged like); {p} is the path.
_FORMS = [
    ("fd --base-directory {p} .", "ls {p}"),
    ("fd --base-directory={p}", "ls {p}"),
    ("fd --search-path {p} x", "ls {p}"),
    ("fd --search-path={p}", "ls {p}"),
    ("fd --ignore-file {p}/secret.txt x", "cat {p}/secret.txt"),
    ("rg --files {p}", "ls {p}"),
    ("rg -l --files {p}", "ls {p}"),
    ("rg --ignore-file {p}/secret.txt x", "cat {p}/secret.txt"),
    ("rg -f {p}/secret.txt a.txt", "cat {p}/secret.txt"),
    ("ag -p {p}/secret.txt x", "cat {p}/secret.txt"),
    ("ag --path-to-ignore={p}/secret.txt x", "cat {p}/secret.txt"),
    ("ag -g x {p}", "ls {p}"),
    ("grep -f {p}/secret.txt a.txt", "cat {p}/secret.txt"),
    ("grep --file={p}/secret.txt a.txt", "cat {p}/secret.txt"),
    ("grep --exclude-from={p}/secret.txt x a.txt", "cat {p}/secret.txt"),
    ("du --exclude-from={p}/secret.txt .", "cat {p}/secret.txt"),
    ("diff --from-file={p}/secret.txt a.txt", "cat {p}/secret.txt"),
    ("diff --to-file {p}/secret.txt a.txt", "cat {p}/secret.txt"),
    ("file -m {p}/secret.txt a.txt", "cat {p}/secret.txt"),
    ("date -r {p}/secret.txt", "stat {p}/secret.txt"),
    ("date --reference={p}/secret.txt", "stat {p}/secret.txt"),
    ("realpath --relative-to={p} a.txt", "realpath {p}"),
    ("realpath --relative-base {p} a.txt", "realpath {p}"),
    ("tree --gitfile {p}/secret.txt", "cat {p}/secret.txt"),
    ("tree --infofile={p}/secret.txt", "cat {p}/secret.txt"),
    ("tree --hintro {p}/secret.txt -H x", "cat {p}/secret.txt"),
    ("comm {p}/secret.txt a.txt", "cat {p}/secret.txt"),
    ("join a.txt {p}/secret.txt", "cat {p}/secret.txt"),
    ("paste -d, a.txt {p}/secret.txt", "cat {p}/secret.txt"),
    ("xargs -a {p}/secret.txt", "cat {p}/secret.txt"),
    ("hexdump -f {p}/secret.txt a.txt", "cat {p}/secret.txt"),
    ("find . -newermm {p}/secret.txt", "stat {p}/secret.txt"),
    ("find . -newerBa {p}/secret.txt", "stat {p}/secret.txt"),
    ("find . -newer {p}/secret.txt", "stat {p}/secret.txt"),
    ("whereis -B {p} -f x", "ls {p}"),
    ("whereis -b -B /usr/bin {p} -f x", "ls {p}"),
    ("whereis -M {p} -f x", "ls {p}"),
    ("lsof +D {p}", "ls {p}"),
    ("lsof -n +d {p}", "ls {p}"),
]


@pytest.mark.parametrize(("option_form", "operand_form"), _FORMS)
@pytest.mark.parametrize("where", ["credential", "outside"])
def test_a_path_given_through_an_option_is_judged_like_an_operand(
    ws: tuple[Path, Path, PathSandbox], option_form: str, operand_form: str, where: str
) -> None:
    _, outside, sandbox = ws
    path = "/root/.ssh" if where == "credential" else str(outside)
    if where == "credential" and "secret.txt" in option_form:
        option_form = option_form.replace("{p}/secret.txt", "{p}/id_rsa")
        operand_form = operand_form.replace("{p}/secret.txt", "{p}/id_rsa")
    expected = _verdict(operand_form.format(p=path), sandbox)
    assert expected != "allow"  # the operand form is refused or asked
    result = analyze(option_form.format(p=path), sandbox=sandbox)
    assert result.verdict == expected, result.reasons
    if where == "credential":
        assert result.verdict == "deny"


@pytest.mark.parametrize(
    "command",
    [
        "fd --base-directory / x root/.ssh",
        "fd --base-directory=/root --search-path .ssh",
        "fd --base-directory /root --search-path=.ssh x",
    ],
)
def test_fd_resolves_relative_paths_from_its_base_directory(
    ws: tuple[Path, Path, PathSandbox], command: str
) -> None:
    _, _, sandbox = ws
    assert _verdict(command, sandbox) == "deny"


@pytest.mark.parametrize(
    "command",
    [
        "wc --files0-from=l",
        "wc --files0-from l",
        "du --files0-from=l",
        "sort --files0-from=l",
        "file -f l",
        "file --files-from=l",
        "md5sum -c l",
        "md5sum -bc l",
        "md5sum --check l",
        "md5sum --ch l",  # an abbreviation GNU getopt accepts
        "md5sum -c",  # the list from stdin
        "sha1sum -c l",
        "sha224sum -c l",
        "sha256sum --check l",
        "sha384sum -c l",
        "sha512sum -c l",
        "b2sum -l 256 -c l",
        "cksum -a md5 --check l",
    ],
)
def test_files_named_in_a_list_are_asked(ws: tuple[Path, Path, PathSandbox], command: str) -> None:
    _, _, sandbox = ws
    result = analyze(command, sandbox=sandbox)
    assert result.verdict == "ask" and result.bypass_immune, result.reasons


def test_md5sum_check_reads_a_file_the_command_line_never_names(
    ws: tuple[Path, Path, PathSandbox],
) -> None:
    """The real md5sum -c opens every file the list names (here one outside the roots);
    wc --files0-from prints their counts."""
    root, outside, _ = ws
    secret = outside / "secret.txt"
    digest = subprocess.run(
        ["md5sum", str(secret)], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    (root / "l").write_text(digest)
    assert shutil.which("md5sum", path=_PATH) is not None
    done = subprocess.run(
        ["md5sum", "-c", "l"], cwd=root, capture_output=True, text=True, timeout=30
    )
    assert f"{secret}: OK" in done.stdout
    (root / "z").write_bytes(str(secret).encode() + b"\0")
    done = subprocess.run(
        ["wc", "-c", "--files0-from=z"], cwd=root, capture_output=True, text=True, timeout=30
    )
    assert str(secret) in done.stdout


@pytest.mark.parametrize(
    "command",
    [
        "grep -f patterns.txt a.txt",
        "grep --exclude-from=patterns.txt -r a .",
        "rg -f patterns.txt src",
        "rg --files",
        "rg --files src",
        "rg -n x src",
        "fd -e py",
        "fd -e py m src",
        "fd --base-directory src -e py",
        "fd --search-path src m",
        "fd --ignore-file patterns.txt m",
        "ag -g py",
        "ag -p patterns.txt x src",
        "date -r a.txt",
        "date",
        "realpath --relative-to=src a.txt",
        "md5sum a.txt",
        "sha256sum a.txt src/m.py",
        "cksum -a md5 a.txt",
        "wc -l a.txt",
        "file a.txt",
        "tree -L 2",
        "tree -I node_modules src",
        "ls --hide='*.pyc' --ignore=x src",
        "comm a.txt patterns.txt",
        "diff --from-file=a.txt patterns.txt",
        "find . -newermt 2020-01-01",
        "find . -newer a.txt -name '*.py'",
        "whereis -b ls",
        "whereis -B src -f m",
        "lsof -p 1",
        "lsof +D src",
    ],
)
def test_ordinary_uses_stay_allowed(ws: tuple[Path, Path, PathSandbox], command: str) -> None:
    _, _, sandbox = ws
    result = analyze(command, sandbox=sandbox)
    assert result.verdict == "allow", result.reasons
