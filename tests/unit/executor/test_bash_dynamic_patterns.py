"""Issue 11, red-team pass (session 6): one word only known at run time becomes several
arguments (EXE-8c) where the checker did not look: the pattern of grep/rg/jq and the values
of options.

The checker judged a dynamic file operand (`cat $f`: an immune ASK) but skipped a dynamic
*pattern* or *filter* (the first operand of grep, rg, ag, fd, jq) and a dynamic option
*value* (`head -n $n`) without a look. Unquoted, bash splits such a word into any number
of words: `grep $p a.txt` with p='-h SECRET .env' reads .env, `head -n $n a.txt` with
n='9 .env' prints it, `jq $f a.json` with f='-R . .env' prints it — each was ALLOWED.
Quoted but before `--`, the pattern can still be an option (`rg "$p" .` with p='--pre=sh'
runs sh on every file). Now: an unquoted dynamic pattern or value, or a quoted dynamic
pattern that may start with `-` before `--`, is a bypass-immune ASK. `grep -e "$p"`,
`grep -- "$p"`, `head -n "$n"`, patterns starting with a literal character and loops over
static words stay allowed.

Each attack first runs in real bash inside a throwaway directory (the secret comes out);
the value comes from a command substitution, so only run time knows it. Attack strings
are data here, never pasted into a shell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

_SECRET = "hunter2-dynamic"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / ".env").write_text(f"SECRET={_SECRET}\n")
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "a.json").write_text('{"a": 1}\n')
    return tmp_path


def _judge(command: str, root: Path) -> tuple[str, bool]:
    sandbox = PathSandbox([Root(str(root), True)], str(root))
    result = analyze(command, sandbox=sandbox, denied_read_globs=("**/.env",))
    return result.verdict, result.bypass_immune


_LEAKS = [
    "p=$(printf %s '-h SECRET .env'); grep $p a.txt",
    "p=$(printf %s 'SECRET .env'); grep -- $p a.txt",
    "p=$(printf %s 'SECRET .env'); grep -h -e $p a.txt",
    "p=$(printf %s '-R . .env'); jq $f $p a.json",
    "n=$(printf %s '9 .env'); head -n $n a.txt",
    "n=$(printf %s '1 .env'); tail -n $n a.txt",
    "k=$(printf %s '1 .env'); sort -k $k a.txt",
    'p=$(printf %s \'--file=.env\'); grep -o "$p" a.txt; grep "$p" -r .',
]


@pytest.mark.parametrize("command", _LEAKS)
def test_bash_splits_the_word_and_reads_the_secret(command: str, workspace: Path) -> None:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command],
        cwd=workspace,
        env={"PATH": "/usr/bin:/bin", "HOME": str(workspace), "LC_ALL": "C"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert _SECRET in done.stdout + done.stderr
    assert _judge(command, workspace) == ("ask", True)


@pytest.mark.parametrize(
    "command",
    [
        'rg "$p" .',
        'rg "$(cat pat)" .',
        "ag $p",
        'fd "$p"',
        'egrep "$p" a.txt',
        'grep "-$p" a.txt',
        "grep ${x:---file=/etc/shadow} a.txt",
        "jq `cat f` a.json",
        "cut -d $d -f1 a.txt",
    ],
)
def test_variants_are_immune_asks(command: str, workspace: Path) -> None:
    assert _judge(command, workspace) == ("ask", True)


@pytest.mark.parametrize(
    "command",
    [
        'grep -e "$p" a.txt',
        'grep -- "$p" a.txt',
        'grep "x$p" a.txt',
        'head -n "$n" a.txt',
        'for p in foo bar; do grep "$p" a.txt; done',
        'grep -e "$(cat a.txt)" a.txt',
        "p=hello; grep $p a.txt",
    ],
)
def test_safe_spellings_stay_allowed(command: str, workspace: Path) -> None:
    assert _judge(command, workspace) == ("allow", False)
