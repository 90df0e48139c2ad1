"""False blocks (issue #11): ordinary read-only commands an agent runs are allowed.

The closing of bypass classes (control characters, braces, globs, the environment
allow-list, arithmetic) must not turn everyday reads into questions: at most 5% of this
corpus may be asked about or refused. The workspace holds the files the commands name.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

READ_ONLY = [
    "ls",
    "ls -la",
    "ls -lah src",
    "ls src/*.py",
    "ls -1 | wc -l",
    "pwd",
    "cat README.md",
    "cat src/app.py src/util.py",
    "cat -n src/app.py | head -40",
    "head -n 20 src/app.py",
    "head -50 data.csv",
    "tail -n 100 logs/app.log",
    "tail -f -n 0 logs/app.log | head -1",
    "wc -l src/*.py",
    "wc -l $(git ls-files '*.py')",
    "grep -rn TODO src",
    "grep -rn 'def main' --include='*.py' .",
    "grep -c import src/app.py",
    "grep -E 'error|warning' logs/app.log | tail -20",
    "grep -v '^#' config.ini",
    "grep -rl foo . | sort",
    "rg -n 'class .*:' src",
    "rg --files | head",
    "find . -name '*.py'",
    "find . -type f -name '*.md' | head",
    "find src -maxdepth 1 -type f",
    "find . -name '*.py' -newer README.md",
    "find . -type d -name __pycache__ -prune -o -type f -print | head",
    "tree -L 2",
    "du -sh src",
    "du -sh * | sort -h",
    "df -h .",
    "stat src/app.py",
    "file src/app.py",
    "sort data.csv | uniq -c | sort -rn | head",
    "cut -d, -f1,3 data.csv",
    "awk -F, '{print $2}' data.csv | sort -u",
    "awk 'NR>1 {s+=$3} END {print s}' data.csv",
    "awk '{ if ($1 > 3) print $2 }' data.csv",
    "awk 'length($0) > 80 {print FILENAME\": \"FNR}' src/app.py",
    "sed -n '10,20p' src/app.py",
    "sed 's/foo/bar/g' src/app.py | head",
    "tr '[:lower:]' '[:upper:]' < README.md",
    "jq '.name' package.json",
    "jq -r '.dependencies | keys[]' package.json",
    "diff src/app.py src/util.py",
    "diff -u src/app.py src/util.py | head -50",
    "cmp data.csv data.csv",
    "md5sum src/*.py",
    "sha256sum README.md",
    "xxd src/app.py | head",
    "od -c README.md | head -5",
    "strings logs/app.log | head",
    "nl src/app.py",
    "column -t -s, data.csv",
    "paste -sd, data.csv",
    "sort -t, -k2 -n data.csv",
    "echo hello",
    "echo $HOME",
    'echo "$PWD"',
    "printf '%s\\n' a b c",
    "date",
    "date -u +%Y-%m-%dT%H:%M:%SZ",
    "whoami",
    "id -u",
    "uname -a",
    "hostname",
    "nproc",
    "which python3",
    "command -v git",
    "type ls",
    "env | sort",
    "printenv PATH",
    "basename src/app.py .py",
    "dirname src/app.py",
    "realpath src/app.py",
    "readlink -f src",
    "seq 1 10",
    "seq 5 | paste -sd+ | bc -l 2>/dev/null || true",
    "expr 1 + 2",
    "test -f README.md && echo yes",
    "[ -d src ] && ls src",
    "[[ -f package.json ]] && jq . package.json",
    "git status",
    "git status --short",
    "git log --oneline -n 20",
    "git log -p -1 -- src/app.py",
    "git log --stat --since='2 weeks ago'",
    "git diff",
    "git diff --stat",
    "git diff HEAD~1 -- src",
    "git diff --cached",
    "git show HEAD --stat",
    "git show HEAD:README.md",
    "git branch -a",
    "git branch --show-current",
    "git rev-parse HEAD",
    "git rev-parse --abbrev-ref HEAD",
    "git remote -v",
    "git tag -l",
    "git blame src/app.py | head",
    "git ls-files",
    "git ls-files | grep test",
    "git shortlog -sn | head",
    "git config --get user.name",
    "git stash list",
    "git describe --tags --always",
    "GIT_PAGER=cat git log -n 3",
    "LC_ALL=C sort data.csv",
    "LANG=C grep -r foo src",
    "for f in src/app.py src/util.py; do wc -l $f; done",
    "for i in 1 2 3; do echo $i; done",
    "for i in {1..3}; do echo $i; done",
    "cat {README,CHANGELOG}.md",
    "ls src/{app,util}.py",
    "echo {a,b,c}",
    "x=$(git rev-parse HEAD); echo $x",
    "n=$(wc -l < data.csv); echo $((n - 1))",
    "cd src && ls",
    "(cd src && grep -n def app.py)",
    "cat src/app.py | grep -n import | head -5",
    "head -c 100 README.md; echo",
    "python3 --version",
    "node --version",
    "ls -la ~",
    "cat package.json | jq .version",
    "grep -n 'TODO' src/*.py || echo none",
    "wc -c README.md",
    "sort -u data.csv > /dev/null",
    "ls 2>/dev/null",
    "ls nonexistent 2>&1 | head -1",
    "set -euo pipefail; ls",
    "true",
    "sleep 0",
    "tac logs/app.log | head",
    "fold -w 80 README.md | head",
    "comm -12 <(sort data.csv) <(sort data.csv)",
    "diff <(ls src) <(ls src)",
    "find . -name '*.py' | xargs grep -n main",
    "find . -name '*.py' -exec wc -l {} +",
    "xargs -n1 echo < data.csv",
    "echo 'rm -rf /' ",
    "grep -rn 'sudo' README.md",
]

FALSE_BLOCK_LIMIT = 0.05


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "logs").mkdir()
    (ws / "src" / "app.py").write_text("import os\n\ndef main():\n    pass\n")
    (ws / "src" / "util.py").write_text("def util():\n    return 1\n")
    (ws / "README.md").write_text("# readme\n")
    (ws / "CHANGELOG.md").write_text("# changes\n")
    (ws / "data.csv").write_text("a,b,1\nc,d,2\n")
    (ws / "config.ini").write_text("[x]\n")
    (ws / "package.json").write_text('{"name": "x", "dependencies": {}}\n')
    (ws / "logs" / "app.log").write_text("error: x\n")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(ws)
    return ws


def test_the_corpus_is_large_and_distinct() -> None:
    assert len(READ_ONLY) >= 140
    assert len(set(READ_ONLY)) == len(READ_ONLY)


def test_false_blocks_of_read_only_commands_stay_at_or_below_5_percent(workspace: Path) -> None:
    sandbox = PathSandbox([Root(str(workspace), True)], str(workspace))
    blocked = {}
    for command in READ_ONLY:
        result = analyze(command, sandbox=sandbox)
        if result.verdict != "allow":
            blocked[command] = (result.verdict, result.reasons[:1])
    rate = len(blocked) / len(READ_ONLY)
    assert rate <= FALSE_BLOCK_LIMIT, f"{rate:.1%} blocked: {blocked}"
    # None of them is refused outright: a DENY of an ordinary read is a bug, not a policy.
    assert not [c for c, (verdict, _) in blocked.items() if verdict == "deny"], blocked


def test_false_blocks_in_a_repository_with_protected_reads(workspace: Path) -> None:
    """The same corpus inside a git repository whose history never held a denied file,
    with `**/.env` denied: git forms that print history (`git diff HEAD~1 -- src`,
    `git diff --cached`) are judged against the history the checker reads, not asked
    wholesale (they made this 5.6% before)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workspace.parent / "home"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for step in (
        "git init -q -b main .",
        "git add -A && git commit -qm one",
        "echo more >> README.md && git commit -qam two",
    ):
        subprocess.run(["bash", "-c", step], cwd=workspace, env=env, check=True)
    denied = ("**/.env",)
    sandbox = PathSandbox([Root(str(workspace), True)], str(workspace), denied_read_globs=denied)
    blocked = {}
    for command in READ_ONLY:
        result = analyze(command, sandbox=sandbox, denied_read_globs=denied)
        if result.verdict != "allow":
            blocked[command] = (result.verdict, result.reasons[:1])
    rate = len(blocked) / len(READ_ONLY)
    assert rate <= FALSE_BLOCK_LIMIT, f"{rate:.1%} blocked: {blocked}"
    assert not [c for c, (verdict, _) in blocked.items() if verdict == "deny"], blocked
