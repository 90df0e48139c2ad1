"""Issue #11 classes 1-4 (SPEC EXE-8a, 8b, 8c): for every attack, real bash runs the payload
(in a throwaway directory, payload `touch PWNED`) and the analysis does not allow it.

The attack strings are data: each is run by `bash -c` in a fresh temporary directory with a
minimal environment, never through a shell of the test's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

BASH = shutil.which("bash") or "/bin/bash"
GIT = shutil.which("git") or "/usr/bin/git"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"}


def bash_runs_payload(script: str, directory: Path) -> bool:
    """Run ``script`` with real bash in ``directory``; whether it created PWNED."""
    subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", script],
        cwd=directory,
        env={**ENV, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"},
        capture_output=True,
        timeout=20,
        check=False,
    )
    return (directory / "PWNED").exists()


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("b\na\n")
    yield ws


def _sandbox(ws: Path) -> PathSandbox:
    return PathSandbox([Root(str(ws), True)], str(ws))


def _judge(script: str, ws: Path) -> tuple[str, tuple[str, ...]]:
    result = analyze(script, sandbox=_sandbox(ws))
    return result.verdict, result.reasons


# --- class 1 (EXE-8a): characters bash and the parser read differently ------------------------

CONTROL = [chr(c) for c in (*range(1, 9), *range(11, 32), 127)]


@pytest.mark.parametrize("char", CONTROL, ids=[f"U+{ord(c):04X}" for c in CONTROL])
def test_bash_reads_every_control_character_as_a_word_character_and_it_is_refused(
    char: str, workspace: Path
) -> None:
    # What bash does: the character is part of the word (no split, no comment, no newline).
    script = f"printf '[%s]' a{char}b c"
    done = subprocess.run(
        [BASH, "--norc", "-c", script], cwd=workspace, env=ENV, capture_output=True, check=False
    )
    assert done.stdout == f"[a{char}b][c]".encode()
    verdict, reasons = _judge(script, workspace)
    assert verdict == "deny" and "control character" in " ".join(reasons) or "U+" in reasons[0]


CHARACTER_ATTACKS = [
    # backslash-CR-LF: tree-sitter joins the lines, bash ends the command at LF.
    "echo a\\\r\ntouch PWNED",
    "echo a\\\r\nbash -c 'touch PWNED'",
    # A `#` after CR/FF/VT is a comment to tree-sitter, part of a word to bash.
    "echo a\r#$(touch PWNED)",
    "echo a\x0c#$(touch PWNED)",
    "echo a\x0b#`touch PWNED`",
    # CR as a blank: `x\rtouch` is one (unknown) command to bash, so use it to hide a `;`.
    "echo a\r;touch PWNED",
]


@pytest.mark.parametrize("script", CHARACTER_ATTACKS)
def test_character_attacks_run_in_bash_and_are_refused(script: str, workspace: Path) -> None:
    assert bash_runs_payload(script, workspace)
    verdict, reasons = _judge(script, workspace)
    assert verdict == "deny", reasons


# --- class 2 (EXE-8b): code hidden in data ------------------------------------------------

P = "a[$(touch PWNED)]"

DATA_ATTACKS = [
    f"for y in '{P}'; do echo $((y)); done",
    f"for y in 1 '{P}'; do echo $((y)); done",
    f"set -- '{P}'; echo $(($1))",
    f"f() {{ echo $(($1)); }}; f '{P}'",
    f"echo '{P}' >/dev/null; echo $(($_))",
    f"x='{P}'; let x",
    f"x='{P}'; echo ${{!x}}",
    f"a=(1); v='{P}'; unset \"$v\"",
    f"declare -A a; v='{P}'; unset \"$v\"",
    f"v='{P}'; sleep 0 & wait -p \"$v\" -n",
    f"declare -i x; x='{P}'",
    f"declare -i x='{P}'",
    f"f() {{ local -i y=\"$1\"; }}; f '{P}'",
    f"x='{P}'; s=abc; echo ${{s:x}}",
    f"k='{P}'; a[$k]=1",
    f"printf -v '{P}' x",
    f"x='{P}'; [[ $x -eq 1 ]]",
    f"x='{P}'; test -v \"$x\"",
    "compgen -W '$(touch PWNED)'",
    "w='$(touch PWNED)'; compgen -W \"$w\"",
    "compgen -W'`touch PWNED`'",
    "BASH_CMDS[cat]=/usr/bin/touch; cat PWNED",
    "hash -p /usr/bin/touch cat; cat PWNED",
    "hash -rp /usr/bin/touch cat; cat PWNED",
]


@pytest.mark.parametrize("script", DATA_ATTACKS)
def test_code_hidden_in_data_runs_in_bash_and_is_not_allowed(script: str, workspace: Path) -> None:
    assert bash_runs_payload(script, workspace)
    verdict, reasons = _judge(script, workspace)
    assert verdict != "allow", reasons


def test_static_values_in_arithmetic_are_denied_dynamic_ones_asked(workspace: Path) -> None:
    assert _judge(f"for y in '{P}'; do echo $((y)); done", workspace)[0] == "deny"
    assert _judge("read y; echo $((y))", workspace)[0] == "ask"
    # Literal numbers and plain arithmetic stay allowed.
    assert _judge("for i in 1 2 3; do echo $((i * 2)); done", workspace)[0] == "allow"
    assert _judge("declare -i n=5; echo $n", workspace)[0] == "allow"
    assert _judge("x=0x1f; echo $((x + 1))", workspace)[0] == "allow"


# --- class 3 (EXE-8b): environment the parser does not see -------------------------------


@pytest.fixture
def repo(workspace: Path) -> Path:
    """A git repository with a committed file and a change (git diff has work to do)."""

    def git(*args: str) -> None:
        subprocess.run(
            [GIT, *args],
            cwd=workspace,
            env={**ENV, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"},
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "m")
    (workspace / "a.txt").write_text("changed\n")
    return workspace


ENVIRONMENT_ATTACKS = [
    # set -k: NAME=value words after the command name go to its environment.
    "set -k; git diff GIT_EXTERNAL_DIFF='touch PWNED; :'",
    "set -o keyword; git diff GIT_EXTERNAL_DIFF='touch PWNED; :'",
    "shopt -s -o keyword; git diff GIT_EXTERNAL_DIFF='touch PWNED; :'",
    "set -euk; git diff GIT_EXTERNAL_DIFF='touch PWNED; :'",
    # Quoted declaration arguments assign.
    "export 'GIT_EXTERNAL_DIFF=touch PWNED; :'; git diff",
    'declare -x "GIT_EXTERNAL_DIFF=touch PWNED; :"; git diff',
    "typeset -x GIT_EXTERNAL_DIFF='touch PWNED; :'; git diff",
    "export GIT_EXTERNAL_DIFF; GIT_EXTERNAL_DIFF='touch PWNED; :'; git diff",
    # set -a exports every later assignment.
    "set -a; GIT_EXTERNAL_DIFF='touch PWNED; :'; git diff",
    "env GIT_EXTERNAL_DIFF='touch PWNED; :' git diff",
    "GIT_EXTERNAL_DIFF='touch PWNED; :' git diff",
]


@pytest.mark.parametrize("script", ENVIRONMENT_ATTACKS)
def test_environment_attacks_run_in_bash_and_are_denied(script: str, repo: Path) -> None:
    assert bash_runs_payload(script, repo)
    verdict, reasons = _judge(script, repo)
    assert verdict == "deny", reasons


@pytest.mark.parametrize(
    ("script", "verdict"),
    [
        ("LANG=C sort a.txt", "allow"),
        ("LC_ALL=C.UTF-8 TZ=UTC date", "allow"),
        ("NO_COLOR=1 ls", "allow"),
        ("COLUMNS=200 ls", "allow"),
        ("PAGER=cat git log -n 1", "allow"),
        ("IFS= read -r line < a.txt", "allow"),
        ("x=1; echo $x", "allow"),
        ("FOO=1 ls", "ask"),  # not on the allow-list: ask
        ("export FOO=1", "ask"),
        ("env FOO=1 ls", "ask"),
        ("set -a; FOO=1; ls", "ask"),  # exported by set -a
        ("TMPDIR=/tmp ls", "deny"),  # a write outside the roots (filevars.py)
        ("TMPDIR=./t ls", "ask"),
        ("GIT_TRACE=1 git status", "allow"),
        ("PAGER=less git log", "deny"),
        ("LD_PRELOAD=/tmp/x.so ls", "deny"),
        ("env BASH_ENV=x ls", "deny"),
        ("PYTHONPATH=. python3 -V", "deny"),
        ("NODE_OPTIONS=--require=./x node -v", "deny"),
        ("npm_config_script_shell=./x ls", "deny"),
        ("PS4='$(id)' ls", "deny"),
        ("PATH=.:$PATH ls", "deny"),
        ("export {PATH,X}=/tmp", "deny"),
        ("declare 'LD_PRELOAD=/tmp/x'", "deny"),
        ('readonly "BASH_ENV=x"', "deny"),
        ("local GIT_DIR=x", "deny"),
        ("export -f ls", "ask"),
        ("SHELLOPTS=xtrace ls", "deny"),
    ],
)
def test_the_allow_list_of_environment_variables(
    script: str, verdict: str, workspace: Path
) -> None:
    got, reasons = _judge(script, workspace)
    assert got == verdict, (script, reasons)


# --- class 4 (EXE-8c): one word becomes several arguments -------------------------------------

BRACE_ATTACKS = [
    "find . -maxdepth 0 {-exec,touch,PWNED,\\;}",
    "sort {--output=PWNED,a.txt}",
    "sort a.txt {--output,PWNED}",
    "sort a.txt {'-o',PWNED}",
    "sort a.txt -{o..o} PWNED",
    'sort a.txt {-o,"PWNED"}',
    "xargs -a a.txt {-I,X,touch,PWNED}",
    "find . -maxdepth 0 {{-exec,touch},{PWNED,\\;}}",
]


@pytest.mark.parametrize("script", BRACE_ATTACKS)
def test_brace_expansion_attacks_run_in_bash_and_are_not_allowed(
    script: str, workspace: Path
) -> None:
    assert bash_runs_payload(script, workspace)
    verdict, reasons = _judge(script, workspace)
    assert verdict != "allow", reasons


def test_brace_expansion_reaches_git_options(workspace: Path) -> None:
    verdict, reasons = _judge("git -C {.,-c,core.fsmonitor=id} status", workspace)
    assert verdict == "deny" and any("core.fsmonitor" in r for r in reasons), reasons
    verdict, reasons = _judge("sort {--output=/etc/x,a.txt}", workspace)
    assert verdict == "deny", reasons


def test_the_checker_sees_the_words_bash_makes(workspace: Path) -> None:
    result = analyze("echo {a,b}{1..2} x{'-c',\\,d} {01..03} {c..a} {a} {} '{x,y}'",
                     sandbox=_sandbox(workspace))  # fmt: skip
    assert result.commands[0].argv == (
        "a1", "a2", "b1", "b2", "x-c", "x,d", "01", "02", "03", "c", "b", "a", "{a}", "{}",
        "{x,y}",
    )  # fmt: skip
    done = subprocess.run(
        [BASH, "-c", "printf '%s\\n' {a,b}{1..2} x{'-c',\\,d} {01..03} {c..a} {a} {} '{x,y}'"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert tuple(done.stdout.split()) == result.commands[0].argv


def test_brace_expansion_past_the_bound_is_refused(workspace: Path) -> None:
    verdict, reasons = _judge("echo {1..100000}", workspace)
    assert verdict == "deny" and "brace expansion" in reasons[0]
    verdict, reasons = _judge("echo {a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}", workspace)
    assert verdict == "deny"


def test_a_glob_that_expands_to_an_option_is_asked(workspace: Path) -> None:
    (workspace / "--output=PWNED").write_text("")
    script = "sort *"
    assert bash_runs_payload(script, workspace)
    (workspace / "PWNED").unlink()
    verdict, reasons = _judge(script, workspace)
    assert verdict == "ask" and "reads as an option" in " ".join(reasons)
    # After `--` (or without such files) a glob is an ordinary operand.
    assert _judge("sort -- *", workspace)[0] == "allow"
    os.unlink(workspace / "--output=PWNED")
    assert _judge("sort *", workspace)[0] == "allow"


def test_ordinary_braces_and_globs_stay_allowed(workspace: Path) -> None:
    (workspace / "b.txt").write_text("x\n")
    for script in ("cat {a,b}.txt", "ls *.txt", "wc -l *", "echo {1..5}", "head -n 1 {a,b}.txt"):
        verdict, reasons = _judge(script, workspace)
        assert verdict == "allow", (script, reasons)


# --- found attacking the checker again (issue #11, last pass) -------------------------------


def test_loop_values_are_not_trusted_when_the_script_changes_ifs(workspace: Path) -> None:
    # A loop over static words is judged value by value, but IFS splits an unquoted value
    # again: `.x/etc/shadow` with IFS=x is `.` and `/etc/shadow` to bash.
    script = "IFS=x; for f in .x/etc/shadow; do printf '[%s]' $f; done"
    done = subprocess.run(
        [BASH, "--norc", "-c", script], cwd=workspace, env=ENV, capture_output=True, check=False
    )
    assert done.stdout == b"[.][/etc/shadow]"
    for attack in (
        "IFS=x; for f in .x/etc/shadow; do cat $f; done",
        "for f in .x/etc/shadow; do IFS=x cat $f; done",
        "read IFS; for f in .x/etc/shadow; do cat $f; done",
    ):
        assert _judge(attack, workspace)[0] != "allow", attack
    # Quoted, the value is one word whatever IFS holds.
    assert _judge('IFS=x; for f in a.txt; do cat "$f"; done', workspace)[0] == "allow"
    assert _judge("for f in a.txt /etc/shadow; do cat $f; done", workspace)[0] == "deny"


@pytest.mark.parametrize(
    ("script", "verdict"),
    [
        ("env - LD_PRELOAD=/tmp/x.so ls", "deny"),  # `env -` is `env -i`, not a command
        ("env - PATH=/tmp ls", "deny"),
        ("env 'BASH_FUNC_ls%%=() { id; }' make", "deny"),  # env's names need not be valid
        ("env BASH_FUNC_x%%=y make", "deny"),
        ("LC_ALL=/tmp/x ls", "ask"),  # a locale loaded from a file
        ("TZ=/etc/shadow date", "ask"),
        ("LC_ALL=C.UTF-8 ls", "allow"),
        ("unset f", "allow"),  # a name, not an expansion
        ("export LANG=C", "allow"),
    ],
)
def test_environment_forms_found_later(script: str, verdict: str, workspace: Path) -> None:
    got, reasons = _judge(script, workspace)
    assert got == verdict, (script, reasons)


def test_ansi_c_strings_end_at_a_nul_as_in_bash(workspace: Path) -> None:
    done = subprocess.run(
        [BASH, "--norc", "-c", "printf '[%s]' $'a\\0b' $'/etc/shadow\\x00x' $'c\\c@d'"],
        capture_output=True,
        check=True,
    )
    assert done.stdout == b"[a][/etc/shadow][c]"
    result = analyze("cat $'/etc/shadow\\x00x'", sandbox=_sandbox(workspace))
    assert result.verdict == "deny" and "credentials" in " ".join(result.reasons)


@pytest.mark.parametrize(
    "script",
    [
        "echo a | xargs -i sh -c 'touch PWNED'",
        "echo a | xargs -l sh -c 'touch PWNED'",
        "echo a | xargs -e sh -c 'touch PWNED'",
        "echo a | xargs --replace sh -c 'touch PWNED'",
        "echo a | xargs --eof sh -c 'touch PWNED'",
        "echo a | xargs --max-lines sh -c 'touch PWNED'",
    ],
)
def test_xargs_options_with_optional_values_do_not_swallow_the_command(
    script: str, workspace: Path
) -> None:
    # -i/-e/-l (and their long forms) take a value only when it is attached: the next
    # word is the command. Judged as a swallowed value, `sh -c` was allowed as `id`-like.
    assert bash_runs_payload(script, workspace)
    verdict, reasons = _judge(script, workspace)
    assert verdict == "deny" and any("spawns a shell" in r for r in reasons), reasons


@pytest.mark.parametrize(
    "script",
    [
        "echo " + "{" * 3000 + "a,b" + "}" * 3000,
        "echo " + "{a," * 3000 + "b" + "}" * 3000,
        "echo " + "{a,b}" * 5000,
        "echo " + "{,}" * 65,
    ],
    ids=["nested", "nested-lists", "many-groups", "65-groups"],
)
def test_huge_brace_expressions_are_refused_without_blowing_up(
    script: str, workspace: Path
) -> None:
    # Found attacking the checker: thousands of groups overflowed the recursion (an
    # exception out of analyze) or cost minutes. Past MAX_BRACE_GROUPS: refused.
    verdict, reasons = _judge(script, workspace)
    assert verdict == "deny" and "brace" in reasons[0], reasons
