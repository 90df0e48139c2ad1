"""git forms a red-team pass found allowed (issue 11, EXE-8d), one class each, every one
first shown with real git in a throwaway repository, then refused or asked by the
checker, with ordinary look-alikes still allowed:

- object names read as git reads them: ``REV:path`` splits at the first colon outside
  braces (``HEAD^{/[:]*}:.env`` printed the secret; the checker split at the first colon
  and saw a path ``]*}:.env``), ``:/regex`` and ``HEAD^{/…:…}`` are commits (a patch), not
  named paths; an object id keeps naming its blob with a suffix (``abcd^{}``);
- short options bundled in one word (git's parse-options): ``git grep -nOCMD`` runs CMD
  as the pager, ``git difftool -yx CMD`` runs CMD;
- a subcommand whose arguments are another git command: ``git bisect view difftool -x
  CMD`` runs CMD;
- merge diffs print patches without ``-p`` (``git log --diff-merges=on``), ``--check``
  prints the added lines with whitespace errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root
from tests.hostgit import host_bash, host_git

DENIED = ("**/.env",)
SECRET = "TOKEN=s3cret"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    host_git(ws, "init", "-q", "-b", "main", ".")
    (ws / ".env").write_text(SECRET + " \n")  # a trailing blank: a whitespace error
    (ws / "src" / "a.py").write_text("print(1)\n")
    host_git(ws, "add", "-A")
    host_git(ws, "commit", "-qm", "init")
    for n in range(4):
        (ws / "src" / "a.py").write_text(f"print({n})\n")
        host_git(ws, "commit", "-qam", f"c{n}")
    host_git(ws, "checkout", "-qb", "side", "HEAD~2")
    (ws / ".env").write_text("TOKEN=side\n")
    host_git(ws, "commit", "-qam", "side")
    host_git(ws, "checkout", "-q", "main")
    host_git(ws, "merge", "-q", "--no-edit", "-X", "theirs", "side")
    return ws


def _verdict(ws: Path, command: str) -> str:
    sandbox = PathSandbox([Root(str(ws), True)], str(ws), denied_read_globs=DENIED)
    return analyze(command, sandbox=sandbox, denied_read_globs=DENIED).verdict


def _blob(ws: Path) -> str:
    return host_git(ws, "rev-parse", "HEAD~1:.env").stdout.strip()[:10]


def test_object_names_print_the_secret_in_real_git(repo: Path) -> None:
    assert SECRET in host_git(repo, "show", "HEAD~1^{/[:]*}:.env").stdout
    assert SECRET in host_git(repo, "cat-file", "-p", "main~1^{/i:*}:.env").stdout
    assert SECRET in host_git(repo, "show", ":/init").stdout  # a commit, with its patch
    blob = _blob(repo)
    assert SECRET in host_git(repo, "show", "-s", blob + "^{}").stdout
    assert SECRET in host_git(repo, "cat-file", "blob", blob + "^{blob}").stdout


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git show 'HEAD~1^{/[:]*}:.env'", "deny"),
        ("git cat-file -p 'main~1^{/i:*}:.env'", "deny"),
        ("git show 'HEAD@{0:00}:.env'", "deny"),
        ("git config --blob 'HEAD^{/[:]*}:.env' --list", "deny"),
        ("git show ':/init'", "ask"),
        ("git show 'HEAD^{/[:]*}'", "ask"),
        ("git show -s BLOB^{}", "ask"),
        ("git show --stat BLOB^{blob}", "ask"),
        ("git cat-file -p BLOB^{}", "ask"),
        ("git cat-file blob BLOB^{blob}", "ask"),
    ],
)
def test_object_names_are_judged_as_git_reads_them(repo: Path, command: str, expected: str) -> None:
    command = command.replace("BLOB", _blob(repo))
    assert _verdict(repo, command) == expected, command


def test_bundled_short_options_run_commands_in_real_git(repo: Path, tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    host_bash(repo, f"git grep -nO'touch {mark}' print")
    assert mark.exists()
    mark.unlink()
    host_bash(repo, f"git difftool -yx 'touch {mark}' HEAD~1 HEAD")
    assert mark.exists()


@pytest.mark.parametrize(
    "command",
    [
        "git grep -nO'touch x' print",
        "git grep -lOvim print",
        "git grep -iwOless print",
        "git difftool -yx 'touch x' HEAD~1 HEAD",
        "git difftool -dyx id",
        "git rebase -kx id HEAD~1",
        "git clone -qu 'sh -c id' ../other x",
        "git clone -qc core.sshCommand=id ../other x",
    ],
)
def test_bundled_short_options_that_run_commands_are_refused(repo: Path, command: str) -> None:
    assert _verdict(repo, command) == "deny", command


def test_bisect_view_runs_a_git_command_in_real_git(repo: Path, tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    host_git(repo, "bisect", "start", "HEAD", "HEAD~4")
    host_bash(repo, f"git bisect view difftool -y -x 'touch {mark}'")
    assert mark.exists()


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git bisect view difftool -x 'touch x'", "deny"),
        ("git bisect visualize difftool --extcmd=id", "deny"),
        ("git bisect view submodule foreach id", "deny"),
        ("git bisect view grep -Oid print", "deny"),
        ("git bisect view tig", "ask"),
        ("git bisect view git-upload-pack .", "ask"),
        ("git bisect view show HEAD~1:.env", "deny"),
        ('git bisect view "$x"', "ask"),
    ],
)
def test_bisect_view_judges_the_nested_command(repo: Path, command: str, expected: str) -> None:
    assert _verdict(repo, command) == expected, command


def test_merge_diffs_and_check_print_contents_in_real_git(repo: Path) -> None:
    assert "TOKEN=side" in host_git(repo, "log", "--diff-merges=on", "-1").stdout
    assert SECRET in host_git(repo, "show", "--check", "HEAD~1^{/init}").stdout


@pytest.mark.parametrize(
    "command",
    [
        "git log --diff-merges=on -1",
        "git log --diff-merges=m --stat -1",
        "git log -m -1",
        "git log --remerge-diff",
        "git show --check ':/init'",
        "git log --check",
    ],
)
def test_merge_diffs_and_check_are_asked(repo: Path, command: str) -> None:
    assert _verdict(repo, command) == "ask", command


@pytest.mark.parametrize(
    "command",
    [
        "git log --oneline -5",
        "git show --stat HEAD",
        "git show HEAD:src/a.py",
        "git show 'HEAD^{/c1}:src/a.py'",
        "git show HEAD~1:src/a.py",
        "git grep -n print",
        "git grep -e print -n",
        "git grep -nw print -- src",
        "git log --graph --oneline --all",
        "git bisect log",
        "git cat-file -t HEAD",
        "git rev-parse HEAD",
        "git log -3 --format=%H -- src",
        "git diff --stat HEAD~1",
    ],
)
def test_ordinary_look_alikes_stay_allowed(repo: Path, command: str) -> None:
    assert _verdict(repo, command) == "allow", command


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # git's documentation: these run a command (send-email is not installed here, so
        # not shown in real git); with the network enabled they were only asked.
        ("git send-email --sendmail-cmd='touch x' --to=a@b 0001.patch", "deny"),
        ("git send-email --to-cmd=./list.sh 0001.patch", "deny"),
        ("git send-email --cc-cmd 'sh -c id' 0001.patch", "deny"),
        ("git send-email --header-cmd=id 0001.patch", "deny"),
        ("git send-email --smtp-server=/tmp/prog 0001.patch", "deny"),
        ("git send-email --smtp-server ./prog 0001.patch", "deny"),
        ("git send-email --smtp-server=smtp.example.com --to=a@b 0001.patch", "ask"),
    ],
)
def test_send_email_options_that_run_commands_are_refused(
    repo: Path, command: str, expected: str
) -> None:
    sandbox = PathSandbox([Root(str(repo), True)], str(repo), denied_read_globs=DENIED)
    verdict = analyze(
        command, sandbox=sandbox, denied_read_globs=DENIED, network_enabled=True
    ).verdict
    assert verdict == expected, command


def test_config_blob_by_id_prints_a_committed_ini_secret(repo: Path) -> None:
    (repo / "conf").mkdir()
    (repo / "conf" / ".env").write_text("[aws]\nkey = AKIASECRET\n")
    host_git(repo, "add", "conf/.env")
    host_git(repo, "commit", "-qm", "ini")
    blob = host_git(repo, "rev-parse", "--short", "HEAD:conf/.env").stdout.strip()
    assert "AKIASECRET" in host_git(repo, "config", f"--blob={blob}", "-l").stdout
    for command in (
        f"git config --blob={blob} -l",
        f"git config --blob {blob} --get aws.key",
        f"git config --blob={blob}^{{}} --list",
        "git config --blob=HEAD^{tree} -l",
    ):
        assert _verdict(repo, command) == "ask", command
    assert _verdict(repo, "git config --blob=HEAD:conf/.env -l") == "deny"
    assert _verdict(repo, "git config --blob=HEAD:src/a.py -l") == "allow"
    assert _verdict(repo, "git config --list") == "allow"


# actions/checkout keeps its token in the repository's config (`http.<url>.extraheader`),
# and remotes often carry `https://user:token@`: git prints them on ordinary reads.
HEADER = "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA=="


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("http.https://github.com/.extraheader", HEADER),
        ("remote.origin.url", "https://ci:hunter2secret@example.com/r.git"),
        ("remote.origin.url", "https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r"),
    ],
)
def test_credentials_in_the_repository_config_are_asked(
    repo: Path, setting: str, value: str
) -> None:
    host_git(repo, "config", setting, value)
    secret = value.split("@")[0][-8:] if "@" in value else value[-12:]
    assert secret in host_git(repo, "config", "-l").stdout
    for command in (
        "git config -l",
        "git config --list --show-origin",
        "git config --get-regexp .",
        f"git config --get {setting}",
        "git remote -v",
        "git remote get-url origin",
        "git var -l",
    ):
        if "remote" in command and not setting.startswith("remote."):
            continue
        assert _verdict(repo, command) == "ask", command
    for command in ("git config --get user.name", "git status", "git remote", "git log -1"):
        assert _verdict(repo, command) == "allow", command


def test_config_without_credentials_stays_allowed(repo: Path) -> None:
    host_git(repo, "config", "remote.origin.url", "https://github.com/o/r.git")
    host_git(repo, "config", "remote.up.url", "git@github.com:o/r.git")
    for command in ("git config -l", "git remote -v", "git remote get-url origin"):
        assert _verdict(repo, command) == "allow", command
