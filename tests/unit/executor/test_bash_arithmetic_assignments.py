"""Issue 11, red-team pass (session 6): assignments hidden in arithmetic (EXE-8b).

bash evaluates arithmetic in `(( ))`, `$(( ))`, `$[ ]`, `let`, array subscripts (of
`${a[…]}`, `a[…]=`, and of the names `unset`, `test -v`, `read`, `printf -v`, `declare`,
`wait -p`, `getopts`, `mapfile` take), `[[ … -eq … ]]`, and in the values of variables used
there. An assignment in any of them sets the variable, and the checker judged none:
`((PATH=1)); ls` was ALLOWED and ran ./1/ls (a file an approved write put there);
`((BASH_CMDS[ls]=5)); ls` ran ./5. Now each assignment is judged like any other (PATH,
HOME, BASH_* refused; bash's own variables asked; ordinary counters stay allowed), and a
target named by an expansion (`(( $n = 1 ))`) is refused.

Each attack first runs in real bash inside a throwaway directory (a planted program
prints a marker), then is judged. Attack strings are data here, never pasted into a shell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

_MARKER = "PLANTED-PROGRAM-RAN"

# Each makes `ls` run ./1/ls (or ./5) in real bash.
_RUNS = [
    "(( PATH=1 )); ls",
    "(( PATH = 1 )); ls",
    "echo $[PATH=1]; ls",
    "echo $(( x = PATH = 1 )); ls",
    "(( 1 ? PATH=1 : 0 )); ls",
    "for ((PATH=1; 0;)); do :; done; ls",
    "a=(x); echo ${a[PATH=1]}; ls",
    "a=(x); : ${#a[PATH=1]}; ls",
    "a[PATH=1]=x; ls",
    "[[ PATH=1 -eq 1 ]]; ls",
    "let 'PATH=1'; ls",
    "a=(1); unset 'a[PATH=1]'; ls",
    "a=(1); [ -v 'a[PATH=1]' ]; ls",
    "a=(1); test -v 'a[PATH=1]'; ls",
    "read 'a[PATH=1]' <<< x; ls",
    "printf -v 'a[PATH=1]' x; ls",
    "declare 'a[PATH=1]=x'; ls",
    "y='PATH=1'; : $((y)); ls",
    "y='PATH=1'; [[ y -eq 1 ]]; ls",
    "y='PATH=1'; a=(1); : ${a[y]}; ls",
    "y=PATH=1; let y; ls",
    "for y in 'PATH=1'; do echo $((y)); done; ls",
    "n=PATH; (( $n = 1 )); ls",
    "(( BASH_CMDS[ls]=5 )); ls",
    "let 'BASH_CMDS[ls]=5'; ls",
    # bash removes double quotes inside arithmetic: the name is PATH again.
    '(( "PATH"=1 )); ls',
    'a=(1); : ${a[PA""TH=1]}; ls',
    '[[ PA""TH=1 -eq 1 ]]; ls',
]

# More spellings of the class, judged only.
_VARIANTS = [
    "(( PATH |= 1 )); ls",
    "(( PATH <<= 1 )); ls",
    "(( ++PATH )); ls",
    "(( PATH-- )); ls",
    "(( x, PATH=1 )); ls",
    "echo $(( PATH+=1 ))",
    "n=PATH; (( ${n}++ )); ls",
    "(( BASH_ALIASES[x]=1 ))",
    "(( HOME=1 )); cd; ls",
    "local -i n=PATH=1; ls",
    "declare -i n; n='PATH=1'; ls",
    "declare -i n='PATH=1'; ls",
    "wait -p 'a[PATH=1]'; ls",
    "getopts a 'a[PATH=1]'; ls",
    "mapfile -t 'a[PATH=1]' < /dev/null; ls",
    "export 'a[PATH=1]'; ls",
    "(( OLDPWD=1 )); ls",
    "(( FUNCNEST=1 ))",
]

_ORDINARY = [
    "for ((i=0; i<3; i++)); do echo $((i*2)); done",
    "i=0; while (( i < 3 )); do (( i++ )); done; echo $i",
    "(( count += 1 ))",
    "x=5; (( x >= 3 && x <= 9 && x != 4 && x == 5 ))",
    "a=(1 2); echo ${a[i++]}",
    "read -p 'continue [y/n]? ' r < /dev/null",
    "[ a = '[x]' ]",
    "let i=i+1",
    "echo $(( LINES - 2 ))",
    "echo $(( ${#PWD} + 1 ))",
]


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A workspace where an approved write left two programs: ./1/ls and ./5."""
    (tmp_path / "1").mkdir()
    for program in (tmp_path / "1" / "ls", tmp_path / "5"):
        program.write_text(f"#!/bin/sh\necho {_MARKER}\n")
        program.chmod(0o755)
    return tmp_path


def _judge(command: str, root: Path) -> str:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    return analyze(command, sandbox=sandbox).verdict


@pytest.mark.parametrize("command", _RUNS)
def test_bash_runs_the_planted_program_and_the_checker_refuses(command: str, planted: Path) -> None:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=planted,
        env={"PATH": "/usr/bin:/bin", "HOME": str(planted), "LC_ALL": "C"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert _MARKER in done.stdout
    assert _judge(command, planted) == "deny"


@pytest.mark.parametrize("command", _VARIANTS)
def test_variants_are_not_allowed(command: str, planted: Path) -> None:
    assert _judge(command, planted) != "allow"


@pytest.mark.parametrize("command", _ORDINARY)
def test_ordinary_arithmetic_stays_allowed(command: str, planted: Path) -> None:
    assert _judge(command, planted) == "allow"
