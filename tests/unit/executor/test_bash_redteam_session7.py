"""Issue #11, a red-team pass of session 7: kinds earlier passes had not found, each shown
in real bash (in a throwaway directory, payload `touch PWNED` or a read of a denied
file) and refused or asked by the analysis, with ordinary look-alikes still allowed.

The attack strings are data: each runs by `bash -c` in a fresh temporary directory with a
minimal environment, never through a shell of the test's own.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

BASH = shutil.which("bash") or "/bin/bash"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"}


def run_bash(script: str, directory: Path, env: dict[str, str] | None = None) -> str:
    """Run ``script`` with real bash in ``directory``; its stdout and stderr."""
    done = subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", script],
        cwd=directory,
        env=env or ENV,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    return done.stdout + done.stderr


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("b\na\n")
    (ws / "sub").mkdir()
    (ws / "secret").mkdir()
    (ws / "secret" / "key").write_text("hunter2\n")
    return ws


def judge(script: str, ws: Path, denied: tuple[str, ...] = ()) -> tuple[str, str]:
    result = analyze(
        script, sandbox=PathSandbox([Root(str(ws), True)], str(ws)), denied_read_globs=denied
    )
    return result.verdict, " | ".join(result.reasons)


# --- class 1/3: `{NAME}<file` assigns NAME; the grammar reads an argument ------------------


@pytest.mark.parametrize(
    "script",
    [
        ": {PATH}<a.txt; ls",  # (a builtin: its redirections are made in this shell)
        "echo x {PATH}>/dev/null; ls",
        "true {PATH}<<<x; ls",
    ],
)
def test_a_name_in_braces_before_a_redirection_is_an_assignment_and_refused(
    script: str, ws: Path
) -> None:
    # bash: PATH becomes the descriptor's number, and `ls` runs ./10/ls (or 11 ...).
    for n in range(10, 14):
        (ws / str(n)).mkdir()
        fake = ws / str(n) / "ls"
        fake.write_text("#!/bin/sh\n/usr/bin/touch PWNED\n")
        fake.chmod(0o755)
    run_bash(script, ws)
    assert (ws / "PWNED").exists()
    verdict, reasons = judge(script, ws)
    assert verdict == "deny" and "{NAME}" in reasons


def test_a_subscript_in_the_braces_runs_code_in_bash_and_is_refused(ws: Path) -> None:
    script = "y='a[$(touch PWNED)]'; : {a[y]}<a.txt"
    run_bash(script, ws)
    assert (ws / "PWNED").exists()
    assert judge(script, ws)[0] == "deny"


@pytest.mark.parametrize(
    "script",
    ["echo {a,b} >/dev/null", "echo {X} >/dev/null", "echo x{X}>/dev/null", "ls {X}2>/dev/null"],
)
def test_braces_not_right_before_a_redirection_stay_words(script: str, ws: Path) -> None:
    assert judge(script, ws)[0] == "allow"


# --- class 1: `==` / `=~` after a command name are words to bash, dropped by the grammar ----


def test_a_double_equals_argument_is_kept_uniq_in_out_writes(ws: Path) -> None:
    # uniq IN OUT: bash passes `==` (a file the agent made) as IN and writes .bashrc; the
    # grammar dropped `==`, so the line read as `uniq .bashrc`, a read.
    (ws / "==").write_text("payload\n")
    run_bash("uniq == .bashrc", ws)
    assert (ws / ".bashrc").read_text() == "payload\n"
    (ws / ".bashrc").unlink()
    verdict, reasons = judge("uniq == .bashrc", ws)
    assert verdict == "deny" and ".bashrc" in reasons
    assert judge("test a == b && echo y", ws)[0] == "allow"
    assert judge("c1 =~{v}", ws)[0] == "deny"  # one word to bash: refused, not guessed


# --- class 2: a function name the checker took for the function bash does not call --------


@pytest.mark.parametrize(
    "script",
    [
        "touch PWNED; touch() { :; }",  # called before it is defined
        "(touch() { :; }); touch PWNED",  # defined in a subshell only
        "false && touch() { :; }; touch PWNED",  # defined on a branch not taken
        "f() { touch() { :; }; }; touch PWNED",  # defined by a function never called
        "touch() { :; }; command touch PWNED",  # `command` bypasses functions
        "touch() { :; }; env touch PWNED",
        "touch() { :; }; /usr/bin/touch PWNED",
        "touch() { :; }; unset -f touch; touch PWNED",
    ],
)
def test_a_function_named_like_a_program_does_not_hide_the_program(script: str, ws: Path) -> None:
    run_bash(script, ws)
    assert (ws / "PWNED").exists()
    verdict, reasons = judge(script, ws)
    assert verdict != "allow" and "touch" in reasons


@pytest.mark.parametrize(
    "script", ["f() { echo hi; }; f", "myfn() { cat a.txt; }; myfn", "rm() { :; }; true"]
)
def test_functions_of_their_own_names_stay_allowed(script: str, ws: Path) -> None:
    assert judge(script, ws)[0] == "allow"


# --- class 2: where a command runs is not where the checker judged it ----------------------

KEY = "**/secret/key"


@pytest.mark.parametrize(
    "script",
    [
        "cd missing || cd secret; cat key",  # secret is entered from here, not from missing
        "cd missing; cd secret; cat key",  # a failed cd stays where it was
        "f() { cat key; }; cd secret; f",  # a function body runs where it is called
        "for d in secret x; do cat key; cd $d; done",  # a loop body runs again
        "cd() { builtin cd secret; }; cd sub; cat key",  # a function named cd
    ],
)
def test_reads_are_judged_from_every_directory_bash_can_be_in(script: str, ws: Path) -> None:
    assert "hunter2" in run_bash(script + " 2>/dev/null", ws)
    verdict, reasons = judge(script, ws, (KEY,))
    assert verdict == "deny" and "reads key" in reasons


def test_a_glob_naming_the_directory_is_asked(ws: Path) -> None:
    assert "hunter2" in run_bash("cd se*t; cat key", ws)
    verdict, reasons = judge("cd se*t; cat key", ws, (KEY,))
    assert verdict != "allow" and "glob" in reasons


@pytest.mark.parametrize(
    "script",
    [
        "cd sub && ls",
        "cd sub; ls; cd ..",
        "ls; cd sub && ls -la",
        "for f in a.txt; do wc -l $f; done",
        "cd secret && ls",
    ],
)
def test_ordinary_directory_changes_stay_allowed(script: str, ws: Path) -> None:
    verdict, reasons = judge(script.replace("; cd ..", ""), ws, (KEY,))
    assert verdict == "allow", reasons


# --- class 6: files tar's options name, in every mode --------------------------------------

TAR = shutil.which("tar") or "/bin/tar"


@pytest.fixture
def archive(ws: Path) -> Path:
    (ws / ".env").write_text("SECRET=hunter2\n")
    subprocess.run([TAR, "-cf", "x.tar", "a.txt"], cwd=ws, check=True)
    return ws


@pytest.mark.parametrize(
    "script",
    ["tar -tf x.tar -T .env", "tar --files-from=.env -tf x.tar", "tar -tvT .env -f x.tar"],
)
def test_tar_lists_the_lines_of_the_file_its_options_name_and_is_refused(
    script: str, archive: Path
) -> None:
    # A line that names no member is printed back: the secret, from a listing.
    assert "hunter2" in run_bash(script, archive)
    verdict, reasons = judge(script, archive, ("**/.env",))
    assert verdict == "deny" and ".env" in reasons


@pytest.mark.parametrize(
    "script",
    [
        "tar -tf x.tar --index-file=.bashrc",
        "tar -tvf x.tar --index-file .bashrc",
        "tar -tf x.tar --volno-file=.bashrc",
    ],
)
def test_tar_writes_the_file_its_options_name_while_listing_and_is_refused(
    script: str, archive: Path
) -> None:
    run_bash(script, archive)
    assert (archive / ".bashrc").exists()  # written by a "read-only" listing
    (archive / ".bashrc").unlink()
    verdict, reasons = judge(script, archive)
    assert verdict == "deny" and ".bashrc" in reasons


def test_tar_create_reads_what_it_archives(archive: Path) -> None:
    assert "hunter2" in run_bash("tar -cf - .env | tar -xOf -", archive)
    assert judge("tar -cf - .env", archive, ("**/.env",))[0] == "deny"
    assert judge("tar -cf - -C secret key", archive, (KEY,))[0] == "deny"


@pytest.mark.parametrize(
    "script", ["tar -tf x.tar", "tar -tvf x.tar", "tar --exclude='*.o' -tf x.tar", "tar -tzf a.tgz"]
)
def test_plain_tar_listings_stay_allowed(script: str, archive: Path) -> None:
    assert judge(script, archive, ("**/.env",))[0] == "allow"


# --- class 2: jq programs read files through import / include ------------------------------

JQ = shutil.which("jq")


JQ_IMPORTS = [
    "jq -n 'import \"creds\" as $c; $c'",
    "cd sub && jq -n 'import \"../creds\" as $c; $c'",
    "jq -n -L . 'import \"creds\" as $c; $c'",
]


@pytest.mark.parametrize("script", JQ_IMPORTS)
def test_a_jq_import_is_asked(script: str, ws: Path) -> None:
    (ws / "creds.json").write_text('{"token": "hunter2"}\n')
    verdict, reasons = judge(script, ws, ("**/creds.json",))
    assert verdict != "allow" and "jq" in reasons


# The checker's half above runs everywhere; this half shows real jq reading the file, and
# needs the jq program (Debian's jq package; installed on the CI image).
@pytest.mark.skipif(JQ is None, reason="shows what real jq does: the jq program is not installed")
@pytest.mark.parametrize("script", JQ_IMPORTS)
def test_real_jq_import_reads_a_file_the_command_does_not_name(script: str, ws: Path) -> None:
    (ws / "creds.json").write_text('{"token": "hunter2"}\n')
    assert "hunter2" in run_bash(script, ws)


@pytest.mark.parametrize("script", ["jq .name a.json", "jq -r '.imports[]' a.json"])
def test_ordinary_jq_filters_stay_allowed(script: str, ws: Path) -> None:
    (ws / "a.json").write_text('{"name": "x", "imports": []}\n')
    assert judge(script, ws)[0] == "allow"


# --- class 1/4: shell options that make a glob match more ----------------------------------


@pytest.mark.parametrize(
    "script",
    [
        "shopt -s dotglob; cat *",
        "shopt -s nocaseglob; cat .EN?",
        "shopt -s nocaseglob; cat .EN[V]",
        "GLOBIGNORE=x; cat *",  # a GLOBIGNORE turns dotglob on
        "shopt -s globstar dotglob; cat sub/**",
    ],
)
def test_globs_after_options_that_widen_them_are_judged_as_widened(script: str, ws: Path) -> None:
    (ws / ".env").write_text("SECRET=hunter2\n")
    (ws / "sub" / ".env").write_text("SECRET=hunter2\n")
    assert "hunter2" in run_bash(script, ws)
    verdict, reasons = judge(script, ws, ("**/.env",))
    assert verdict != "allow" and ".env" in reasons


def test_plain_globs_still_skip_hidden_files(ws: Path) -> None:
    (ws / ".env").write_text("SECRET=hunter2\n")
    assert judge("cat *.txt", ws, ("**/.env",))[0] == "allow"
    assert judge("ls *", ws, ("**/.env",))[0] == "allow"


# --- class 6: a glob in a write target is expanded by bash --------------------------------


@pytest.mark.parametrize(
    "script",
    ["echo PAYLOAD > .bas?rc", "echo PAYLOAD >> .b*c", "echo PAYLOAD | tee .bash[r]c"],
)
def test_a_glob_write_target_writes_the_file_it_matches_and_is_refused(
    script: str, ws: Path
) -> None:
    (ws / ".bashrc").write_text("")
    run_bash(script, ws)
    assert "PAYLOAD" in (ws / ".bashrc").read_text()
    verdict, reasons = judge(script, ws)
    assert verdict == "deny" and ".bashrc" in reasons


def test_a_glob_write_target_matching_ordinary_files_stays_a_write(ws: Path) -> None:
    verdict, _ = judge("echo x > a.tx?", ws)
    assert verdict == "ask"


# --- class 6: git's trace sent to a unix socket --------------------------------------------


def test_git_trace_to_a_unix_socket_connects_and_is_asked(ws: Path, tmp_path: Path) -> None:
    import socket

    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(10)
    script = f"GIT_TRACE2_EVENT=af_unix:stream:{path} git version >/dev/null"
    done = subprocess.Popen([BASH, "--norc", "-c", script], cwd=ws, env=ENV)
    try:
        connection, _ = server.accept()
        with connection:
            connection.settimeout(10)
            assert b"version" in connection.recv(4096)  # git wrote its trace to the socket
    finally:
        done.wait(timeout=20)
        server.close()
    verdict, reasons = judge(script, ws)
    assert verdict == "ask" and "unix socket" in reasons
    assert judge("GIT_TRACE=1 git log", ws)[0] == "allow"


# --- grep's recursion through abbreviations and split values (DEC-16 reach) ---------------


@pytest.mark.parametrize(
    "argv",
    [
        ("--directories", "recurse", "SECRET", "."),
        ("--recur", "SECRET", "."),
        ("--derefer", "SECRET", "."),
        ("-d", "rec", "SECRET", "."),
        ("--dir=rec", "SECRET", "."),
    ],
)
def test_grep_recursion_spelled_otherwise_is_a_recursive_read(
    argv: tuple[str, ...], ws: Path
) -> None:
    from stockade.executor.reach import recursive_reader

    (ws / ".env").write_text("SECRET=hunter2\n")
    done = subprocess.run(["grep", *argv], cwd=ws, capture_output=True, text=True, check=False)
    assert "hunter2" in done.stdout  # grep read the tree
    assert recursive_reader("grep", argv)
    assert not recursive_reader("grep", ("-d", "read", "SECRET", "."))
    assert not recursive_reader("grep", ("--devices=skip", "x", "a.txt"))


# --- class 3: `exec -c` runs its command with an empty environment, like `env -i` --------


def test_exec_c_drops_the_executors_git_neutralisation_and_is_asked(ws: Path) -> None:
    from stockade.executor.confine.env import command_env

    git = shutil.which("git")
    assert git is not None, "the suite runs real git (Debian's git package)"
    subprocess.run([git, "init", "-q", str(ws)], check=True, env=ENV)
    with (ws / ".git" / "config").open("a") as config:
        config.write("[core]\n\tfsmonitor = /usr/bin/touch PWNED; false\n")
    env = {**command_env(cwd=str(ws), tmp_dir=str(ws.parent)), "PATH": "/usr/bin:/bin"}
    run_bash("git status >/dev/null 2>&1", ws, env)
    assert not (ws / "PWNED").exists()  # the executor's environment holds
    run_bash("exec -c git status >/dev/null 2>&1", ws, env)
    assert (ws / "PWNED").exists()  # an empty environment: git runs the fsmonitor
    verdict, reasons = judge("exec -c git status", ws)
    assert verdict == "ask" and "environment cleared" in reasons
    assert judge("exec git status", ws)[0] == "allow"


# --- class 2: variables whose assignment bash evaluates as arithmetic ----------------------


@pytest.mark.parametrize(
    "script",
    [
        "read -r OPTIND < payload",
        "RANDOM=$(cat payload)",
        'printf -v SRANDOM %s "$(<payload)"',
        "read HISTCMD < payload",
        'for OPTIND in "$(cat payload)"; do :; done',
    ],
)
def test_assigning_optind_random_or_histcmd_evaluates_the_value_and_is_asked(
    script: str, ws: Path
) -> None:
    # bash runs the subscript's substitution at the assignment itself, no $((...)) needed.
    (ws / "payload").write_text("a[$(touch PWNED)]\n")
    run_bash(script, ws)
    assert (ws / "PWNED").exists()
    verdict, reasons = judge(script, ws)
    assert verdict == "ask" and "arithmetic" in reasons


@pytest.mark.parametrize(
    "script",
    [
        "OPTIND=1; while getopts ab o; do :; done; shift $((OPTIND - 1))",
        "f() { local OPTIND; getopts ab o; }; f",
        "echo $RANDOM",
        "RANDOM=42; echo $RANDOM",
    ],
)
def test_ordinary_uses_of_optind_and_random_stay_allowed(script: str, ws: Path) -> None:
    assert judge(script, ws)[0] == "allow"


# --- class 2: subscripts of a compound array assignment are arithmetic --------------------


@pytest.mark.parametrize(
    "script",
    [
        "a=( ['$(touch PWNED)']=1 )",  # quotes do not keep the substitution from running
        "a=( ['a[$(touch PWNED)]']=1 )",
        "declare -a a=( ['a[$(touch PWNED)]']=1 )",
        "a+=( ['a[$(touch PWNED)]']=1 )",
        "a=( [a\\[\\$\\(touch\\ PWNED\\)\\]]=1 )",
    ],
)
def test_quoted_code_in_a_compound_array_subscript_runs_and_is_refused(
    script: str, ws: Path
) -> None:
    run_bash(script, ws)
    assert (ws / "PWNED").exists()
    assert judge(script, ws)[0] == "deny"


@pytest.mark.parametrize(
    "script", ["read x < payload; a=( [x]=1 )", "read x < payload; a=( [$x]=1 )"]
)
def test_a_run_time_value_as_a_compound_array_subscript_is_asked(script: str, ws: Path) -> None:
    (ws / "payload").write_text("a[$(touch PWNED)]\n")
    run_bash(script, ws)
    assert (ws / "PWNED").exists()
    verdict, reasons = judge(script, ws)
    assert verdict == "ask" and "arithmetic" in reasons


@pytest.mark.parametrize(
    "script",
    ["a=( [1]=x [2]=y )", "declare -A h=( [k]=v ['x y']=z )", "x=1; a=( [$x]=v )", "a=(1 2 3)"],
)
def test_ordinary_compound_array_assignments_stay_allowed(script: str, ws: Path) -> None:
    assert judge(script, ws)[0] == "allow"
