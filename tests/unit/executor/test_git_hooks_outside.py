"""Class 5 of issue 11, the part outside `.git`: hooks and programs that git (or a hook
manager that a git hook starts) runs from the WORK TREE, so that a person's next git command
on the host runs what the agent wrote (EXE-3 rev 2, EXE-8d).

Three ways the work tree becomes code for a person's git:

* the repository's configuration names it: `core.hooksPath` (a hooks directory, husky's
  `.husky/_`), `include.path` / `includeIf.*.path` (more configuration), and the programs
  its commands name (`diff.*.textconv`, `alias.* = !…`, `gpg.program`, `filter.*.clean`
  …): protected by reading that configuration (stockade.executor.gitconfig);
* a hook manager's own files, which the hook installed in `.git/hooks` reads and runs
  (`.husky/`, `.pre-commit-config.yaml`, `lefthook.yml`, `.overcommit.yml` …): protected
  by name (DEFAULT_PROTECTED_WRITES);
* and, refused before: setting any of it (`git config`, `-c`, `--config-env`,
  `GIT_CONFIG_*`, `HOME` / `XDG_CONFIG_HOME` for a planted global config).

Each attack is first run with the real git on this machine in a throwaway repository (the
payload only touches a marker file), then refused by the path sandbox (the file tools,
path-check, policy check), by the bash analysis (bash-check, run_bash), and kept read-only
at run time. What git does NOT take from the work tree is pinned too: `.gitattributes`
only selects drivers the configuration defines, and `.gitmodules` cannot run a command.
Attack strings are data here, never typed into a shell of ours.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.confine import Launcher, Rlimits
from stockade.executor.gitconfig import named_paths, parse_config
from stockade.executor.paths import PathSandbox, Root
from stockade.executor.tools.run_bash import confinement_policy
from tests.hostgit import host_bash, host_git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert host_git(ws, "init", "-q", ".").returncode == 0
    (ws / "README.md").write_text("hello\n")
    assert host_git(ws, "add", "README.md").returncode == 0
    assert host_git(ws, "commit", "-qm", "init").returncode == 0
    return ws


def _sandbox(ws: Path) -> PathSandbox:
    return PathSandbox([Root(str(ws), True)], str(ws))


def _refused_everywhere(ws: Path, rel: str, *, readable: bool = True) -> None:
    """The path sandbox refuses writing ``rel`` and the bash analysis denies every way of
    writing it that a command line can take."""
    decision = _sandbox(ws).check(rel, write=True)
    assert not decision.allowed, rel
    assert _sandbox(ws).check(rel).allowed == readable, f"reading {rel}"
    for command in (
        f"echo 'touch /tmp/x' > {rel}",
        f"printf x >> {rel}",
        f"cp README.md {rel}",
        f"tee {rel} < README.md",
        f"sed -i s/a/b/ {rel}",
        f"install -m 755 README.md {rel}",
        f"mv README.md {rel}",
    ):
        verdict = analyze(command, sandbox=_sandbox(ws)).verdict
        assert verdict == "deny", (command, verdict)


def _hook(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)


# --- core.hooksPath: a hooks directory in the work tree ------------------------------------


@pytest.mark.parametrize(
    "hooks_path, hook",
    [
        (".myhooks", ".myhooks/pre-commit"),
        ("tools/git-hooks", "tools/git-hooks/post-checkout"),
        ("./scripts/hooks/", "scripts/hooks/pre-commit"),
        ("{ws}/abs-hooks", "abs-hooks/pre-commit"),  # an absolute path inside the root
        ("ci/_", "ci/pre-commit"),  # husky's layout under a custom name: `_/h` runs ../<hook>
    ],
)
def test_hooks_path_directory_is_protected(
    repo: Path, tmp_path: Path, hooks_path: str, hook: str
) -> None:
    hooks_path = hooks_path.format(ws=repo)
    marker = tmp_path / "MARK-hooks"
    assert host_git(repo, "config", "core.hooksPath", hooks_path).returncode == 0
    hooks_dir = repo / hooks_path if not os.path.isabs(hooks_path) else Path(hooks_path)
    if hooks_dir.name == "_":
        # husky v9's dispatcher: every hook in `_` runs the script of that name one level up.
        script = '#!/bin/sh\nexec sh "$(dirname "$0")/../$(basename "$0")"\n'
        for name in ("pre-commit", "post-checkout"):
            (hooks_dir).mkdir(parents=True, exist_ok=True)
            (hooks_dir / name).write_text(script)
            (hooks_dir / name).chmod(0o755)
    _hook(repo / hook, marker)
    host_git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    host_git(repo, "checkout", "-q", "HEAD")
    assert marker.exists(), "host git did not run the work-tree hook: the repro is broken"
    _refused_everywhere(repo, hook)
    assert "git's configuration names" in _sandbox(repo).check(hook, write=True).reason
    # A new hook in that directory, not only the existing one.
    new_hook = str(Path(hook).parent / "pre-push")
    assert not _sandbox(repo).check(new_hook, write=True).allowed
    # Ordinary files beside it stay writable.
    assert _sandbox(repo).check("src/main.py", write=True).allowed


def test_hooks_path_through_a_symlink_and_in_a_subdirectory(repo: Path) -> None:
    """A hooks directory reached through a symlink is protected where it really is, and a
    write from a subdirectory of the work tree (or naming it by another spelling) too."""
    (repo / "real-hooks").mkdir()
    (repo / "h").symlink_to("real-hooks")
    host_git(repo, "config", "core.hooksPath", "h")
    (repo / "sub").mkdir()
    sub = PathSandbox([Root(str(repo), True)], str(repo / "sub"))
    for path in ("../real-hooks/pre-commit".replace("..", str(repo)), f"{repo}/h/pre-commit"):
        assert not sub.check(path, write=True).allowed, path
    assert not _sandbox(repo).check("real-hooks/pre-commit", write=True).allowed
    assert not _sandbox(repo).check("Real-Hooks/pre-commit", write=True).allowed  # folded


def test_hooks_path_that_does_not_exist_yet(repo: Path) -> None:
    """Configured but not created: creating it would arm it."""
    host_git(repo, "config", "core.hooksPath", ".hooks-to-be")
    assert not (repo / ".hooks-to-be").exists()
    _refused_everywhere(repo, ".hooks-to-be/pre-commit")
    assert analyze("mkdir -p .hooks-to-be/x", sandbox=_sandbox(repo)).verdict == "deny"


def test_hooks_path_from_a_linked_worktree_and_a_gitdir_file(repo: Path, tmp_path: Path) -> None:
    """A `.git` FILE (linked worktree, submodule) leads to the config through `gitdir:` and
    `commondir`: the hooks directory it names is found too."""
    host_git(repo, "config", "core.hooksPath", "wt-hooks")
    other = tmp_path / "ws" / "wt"
    assert host_git(repo, "worktree", "add", "-q", str(other)).returncode == 0
    assert (other / ".git").is_file()
    sb = PathSandbox([Root(str(tmp_path / "ws"), True)], str(other))
    assert not sb.check(str(other / "wt-hooks" / "pre-commit"), write=True).allowed


def test_global_relative_hooks_path_applies_to_every_repository(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`core.hooksPath` in the global config, relative: every repository's `<top>/.ci-hooks`
    is its hooks directory for the person (read from the executor's own HOME/XDG)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core]\n\thooksPath = .ci-hooks\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert not _sandbox(repo).check(".ci-hooks/pre-commit", write=True).allowed


def test_a_directory_above_the_hooks_directory_is_protected(repo: Path, tmp_path: Path) -> None:
    """Writing a directory ABOVE a named path lays it out: a symlink `tools -> evil`
    (or `mv evil tools`, `cp -r evil tools`) makes `tools/hooks` the agent's directory."""
    marker = tmp_path / "MARK-above"
    host_git(repo, "config", "core.hooksPath", "tools/hooks")
    _hook(repo / "evil" / "hooks" / "pre-commit", marker)
    (repo / "tools").symlink_to("evil")
    host_git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    assert marker.exists(), "host git did not follow the symlinked parent: the repro is broken"
    (repo / "tools").unlink()
    sb = _sandbox(repo)
    for command in (
        "ln -s evil tools",
        "mv evil tools",
        "cp -r evil tools",
        "cp -a evil/. tools",
        "rm -rf tools",
        "mkdir tools && mv evil/hooks tools/",
    ):
        assert analyze(command, sandbox=sb).verdict == "deny", command
    assert not sb.check("tools", write=True).allowed
    # Writes into the top itself, and elsewhere, are not writes above it.
    for command in ("cp README.md .", "mkdir -p src/x", "mv evil src", "cp -r evil docs"):
        assert analyze(command, sandbox=sb).verdict != "deny", command


def test_a_directory_above_a_protected_glob_is_protected(repo: Path) -> None:
    """The same for the fixed list: `.config` holds `.config/fish/**`."""
    (repo / "evil" / "fish").mkdir(parents=True)
    sb = _sandbox(repo)
    for command in ("mv evil .config", "ln -s evil .config", "cp -r evil .CONFIG"):
        assert analyze(command, sandbox=sb).verdict == "deny", command
    for command in ("mkdir -p .config/nvim", "echo x > .config/app.toml"):
        assert analyze(command, sandbox=sb).verdict != "deny", command


# --- include.path: work-tree files that are configuration ----------------------------------


@pytest.mark.parametrize(
    "section",
    [
        "[include]\n\tpath = ../project.gitconfig\n",
        '[includeIf "onbranch:*"]\n\tpath = ../project.gitconfig\n',
    ],
)
def test_included_config_in_the_work_tree_is_protected(
    repo: Path, tmp_path: Path, section: str
) -> None:
    marker = tmp_path / "MARK-include"
    with (repo / ".git" / "config").open("a") as f:
        f.write(section)
    # What an agent would plant there, and what the person's `git status` then does.
    (repo / "project.gitconfig").write_text(f'[core]\n\tfsmonitor = "touch {marker}; false"\n')
    host_git(repo, "status")
    assert marker.exists(), "host git did not honour the included config: the repro is broken"
    (repo / "project.gitconfig").unlink()
    _refused_everywhere(repo, "project.gitconfig")


def test_programs_named_by_an_included_config_are_protected_too(repo: Path) -> None:
    with (repo / ".git" / "config").open("a") as f:
        f.write("[include]\n\tpath = ../cfg/shared.inc\n")
    (repo / "cfg").mkdir()
    (repo / "cfg" / "shared.inc").write_text("[gpg]\n\tprogram = bin/gpg-wrap\n")
    for rel in ("cfg/shared.inc", "bin/gpg-wrap"):
        assert not _sandbox(repo).check(rel, write=True).allowed, rel


# --- programs the configuration runs from the work tree -----------------------------------


def test_textconv_program_in_the_work_tree_runs_on_git_diff(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "MARK-textconv"
    host_git(repo, "config", "diff.conv.textconv", "sh tools/conv.sh")
    (repo / ".gitattributes").write_text("*.md diff=conv\n")
    (repo / "tools").mkdir()
    (repo / "tools" / "conv.sh").write_text(f'touch {marker}\ncat "$1"\n')
    (repo / "README.md").write_text("changed\n")
    host_git(repo, "diff")
    assert marker.exists(), "host git did not run the textconv program: the repro is broken"
    _refused_everywhere(repo, "tools/conv.sh")


def test_alias_script_in_the_work_tree_runs_on_git_alias(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "MARK-alias"
    host_git(repo, "config", "alias.lint", "!./scripts/lint.sh --fix")
    _hook(repo / "scripts" / "lint.sh", marker)
    host_git(repo, "lint")
    assert marker.exists()
    _refused_everywhere(repo, "scripts/lint.sh")


@pytest.mark.parametrize(
    "key, value, target",
    [
        ("gpg.program", "./tools/gpg-wrapper", "tools/gpg-wrapper"),
        ("gpg.ssh.program", "bin/keygen", "bin/keygen"),
        ("gpg.ssh.allowedSignersFile", ".signers", ".signers"),  # who verifies as good
        ("filter.x.clean", "python3 filters/clean.py %f", "filters/clean.py"),
        ("filter.x.process", "node filters/proc.js", "filters/proc.js"),
        ("diff.tool.command", "bash diffcmd.sh", "diffcmd.sh"),
        ("merge.ours.driver", "./merge-driver %O %A %B", "merge-driver"),
        ("core.fsmonitor", "fsmon.sh", "fsmon.sh"),
        ("core.pager", "./pager", "pager"),
        ("core.editor", "~/bin/ed", "home/bin/ed"),
        ("credential.helper", "!./cred.sh", "cred.sh"),
        ("pager.log", "sh pg.sh", "pg.sh"),
        ("mergetool.mt.path", "tools/mt", "tools/mt"),
        ("sequence.editor", "'tools/seq ed'", "tools/seq ed"),
    ],
)
def test_programs_named_by_the_configuration_are_protected(
    repo: Path, key: str, value: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(repo / "home"))
    assert host_git(repo, "config", key, value).returncode == 0
    assert not _sandbox(repo).check(target, write=True).allowed, (key, value)


def test_gpg_program_in_the_work_tree_runs_on_a_signature_check(repo: Path, tmp_path: Path) -> None:
    """`git log --show-signature` (allowed: read-only) runs gpg.program; when the
    configuration names a work-tree program, that program is protected."""
    marker = tmp_path / "MARK-gpg"
    fake_sig = "-----BEGIN PGP SIGNATURE-----\n\n iQ==\n -----END PGP SIGNATURE-----"
    tree = host_git(repo, "rev-parse", "HEAD^{tree}").stdout.strip()
    commit_text = (
        f"tree {tree}\nauthor t <t@t> 0 +0000\ncommitter t <t@t> 0 +0000\n"
        f"gpgsig {fake_sig}\n\nsigned\n"
    )
    (tmp_path / "c.txt").write_text(commit_text)
    oid = host_git(
        repo, "hash-object", "-t", "commit", "-w", str(tmp_path / "c.txt")
    ).stdout.strip()
    host_git(repo, "config", "gpg.program", "./tools/gpg")
    _hook(repo / "tools" / "gpg", marker)
    host_git(repo, "log", "--show-signature", "-1", oid)
    assert marker.exists(), "host git did not run gpg.program: the repro is broken"
    assert analyze("git log --show-signature -1", sandbox=_sandbox(repo)).verdict == "allow"
    _refused_everywhere(repo, "tools/gpg")


def test_program_words_on_path_name_nothing(repo: Path) -> None:
    """`less`, `git-lfs`, `%f` are programs from PATH or placeholders, not work-tree files:
    ordinary configuration does not make ordinary names unwritable."""
    host_git(repo, "config", "core.pager", "less -R")
    host_git(repo, "config", "filter.lfs.process", "git-lfs filter-process")
    host_git(repo, "config", "diff.x.textconv", "exiftool %f")
    for rel in ("less", "git-lfs", "exiftool", "notes.txt", "src/app.py"):
        assert _sandbox(repo).check(rel, write=True).allowed, rel


# --- hook managers: files the installed hook reads and runs --------------------------------


@pytest.mark.parametrize(
    "rel",
    [
        ".husky/pre-commit",
        ".husky/_/h",
        ".HUSKY/pre-commit",
        ".huskyrc",
        ".huskyrc.json",
        "husky.config.js",
        ".pre-commit-config.yaml",
        ".pre-commit-config.yml",
        ".pre-commit-hooks.yaml",
        "lefthook.yml",
        ".lefthook.yml",
        "lefthook.toml",
        "lefthook.jsonc",
        ".config/lefthook.yaml",
        "lefthook-local.yml",
        ".lefthook-local.json",
        ".lefthook/pre-commit/check.sh",
        ".lefthook-local/pre-push/x.sh",
        ".overcommit.yml",
        ".git-hooks/pre_commit/x.rb",
        ".githooks/pre-commit",
        ".lfsconfig",  # steers where a person's push sends the large files
        "packages/web/.husky/pre-commit",  # a monorepo package
    ],
)
def test_hook_manager_files_are_protected(repo: Path, rel: str) -> None:
    _refused_everywhere(repo, rel)


@pytest.mark.parametrize(
    "rel",
    [
        ".config/git/config",  # git's XDG global config
        ".config/git/attributes",
        ".config/husky/init.sh",  # sourced by every husky hook
        ".cache/pre-commit/repo1a2b3c/hooks/check.py",  # pre-commit's cloned hooks
        ".gnupg/gpg-agent.conf",  # pinentry-program runs on `git commit -S`
        ".local/bin/git",  # shadows git on a login PATH
        "bin/git",
    ],
)
def test_home_files_git_and_its_hooks_run_are_protected(
    tmp_path: Path, rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent started in the home directory (HOME is a root)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (home / "README.md").write_text("x\n")
    _refused_everywhere(home, rel, readable=not rel.startswith(".gnupg"))  # a credential
    assert analyze(f"echo x >> ~/{rel}", sandbox=_sandbox(home)).verdict == "deny"


def test_home_anchored_entries_leave_projects_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~/bin/**` is the home's bin, not every project's `bin/`."""
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    sb = PathSandbox([Root(str(home / "proj"), True)], str(home / "proj"))
    assert sb.check("bin/build.sh", write=True).allowed
    assert sb.check(".local/bin/tool", write=True).allowed
    assert not any(g.startswith("~") for g in sb.protected_write_globs)


def test_xdg_global_config_is_what_host_git_reads(tmp_path: Path) -> None:
    marker = tmp_path / "MARK-xdg"
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "config").write_text(
        f'[core]\n\tfsmonitor = "touch {marker}; false"\n'
    )
    ws = home / "proj"
    ws.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "."], cwd=ws, env=env, check=True)
    subprocess.run(["git", "status"], cwd=ws, env=env, capture_output=True, check=True)
    assert marker.exists()


def test_husky_layout_runs_the_parent_script_in_host_git(repo: Path, tmp_path: Path) -> None:
    """husky v9: core.hooksPath=.husky/_, whose dispatcher runs `.husky/<hook>`: the script
    an agent would edit is outside the configured directory."""
    marker = tmp_path / "MARK-husky"
    host_git(repo, "config", "core.hooksPath", ".husky/_")
    dispatcher = repo / ".husky" / "_" / "pre-commit"
    dispatcher.parent.mkdir(parents=True)
    dispatcher.write_text('#!/bin/sh\nexec sh "$(dirname "$0")/../$(basename "$0")"\n')
    dispatcher.chmod(0o755)
    (repo / ".husky" / "pre-commit").write_text(f"touch {marker}\n")
    host_git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    assert marker.exists()
    _refused_everywhere(repo, ".husky/pre-commit")


def test_work_tree_files_an_installed_hook_runs_are_protected(repo: Path, tmp_path: Path) -> None:
    """The hook in `.git/hooks` is trusted; the work-tree files it names are what it runs:
    a script it execs, pre-commit's `--config=` file, husky v4's `node_modules/...`."""
    marker = tmp_path / "MARK-installed"
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(
        "#!/usr/bin/env bash\n"
        "ARGS=(hook-impl --config=ci/pc.yaml --hook-type=pre-commit)\n"
        "node node_modules/husky/run.js || true\n"
        'exec "./scripts/pre-commit.sh" "$@"\n'
    )
    hook.chmod(0o755)
    _hook(repo / "scripts" / "pre-commit.sh", marker)
    host_git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    assert marker.exists(), "host git did not run the installed hook: the repro is broken"
    for rel in ("scripts/pre-commit.sh", "ci/pc.yaml", "node_modules/husky/run.js"):
        _refused_everywhere(repo, rel)
    # Sample hooks are not installed: what they name stays writable.
    (repo / ".git" / "hooks" / "post-update.sample").write_text("exec tools/sample.sh\n")
    assert _sandbox(repo).check("tools/sample.sh", write=True).allowed


def test_scripts_a_hook_manager_config_runs_are_protected(repo: Path) -> None:
    """pre-commit's `entry:` and lefthook's `run:` (a block scalar too) are the commands
    their installed hooks run on the person's commits: the work-tree files they name are
    protected like the configuration that names them."""
    (repo / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: local\n  hooks:\n  - id: check\n    name: check\n"
        "    entry: ./scripts/check.sh --strict  # local\n    language: script\n"
        "- repo: https://github.com/psf/black\n  rev: 24.1.0\n  hooks:\n  - id: black\n"
    )
    (repo / "lefthook.yml").write_text(
        "pre-commit:\n  commands:\n    lint:\n      run: node tools/lint.js {staged_files}\n"
        "    multi:\n      run: |\n        sh ci/one.sh\n        python3 ci/two.py\n"
        "    other:\n      glob: '*.js'\n"
    )
    sb = _sandbox(repo)
    for rel in ("scripts/check.sh", "tools/lint.js", "ci/one.sh", "ci/two.py"):
        assert not sb.check(rel, write=True).allowed, rel
    for rel in ("tools/other.js", "ci/three.sh", "README.md"):
        assert sb.check(rel, write=True).allowed, rel


def test_template_directory_is_protected(repo: Path) -> None:
    """`init.templateDir`: a person's next `git init` / `git clone` copies its hooks."""
    host_git(repo, "config", "init.templateDir", "tmpl")
    assert not _sandbox(repo).check("tmpl/hooks/post-checkout", write=True).allowed


def test_hook_manager_lookalikes_stay_writable(repo: Path) -> None:
    for rel in ("docs/husky.md", "lefthook", "pre-commit-config.yaml.bak", "src/githooks.py"):
        assert _sandbox(repo).check(rel, write=True).allowed, rel


# --- setting any of it is refused ----------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "git config core.hooksPath .myhooks",
        "git config CORE.HooksPath .myhooks",
        "git config set core.hooksPath .myhooks",
        "git config --add core.hooksPath .myhooks",
        "git config --global core.hooksPath .myhooks",
        "git config --file .git/config core.hooksPath x",
        "git config include.path ../x.inc",
        "git config --global includeIf.gitdir:~/.path x",
        "git config diff.x.textconv ./conv",
        "git config alias.x '!sh x.sh'",
        "git config gpg.program ./gpg",
        "git -c core.hooksPath=.h commit -m x",
        "git -ccore.hooksPath=.h status",
        "git -c include.path=x.inc status",
        "git -c gpg.program=./g log --show-signature",
        "git -c gpg.format=ssh -c log.showSignature=1 log",
        "git --config-env=core.hooksPath=HOME status",
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=.h git status",
        "export 'GIT_CONFIG_PARAMETERS=x'; git status",
        "HOME=. git log --show-signature",
        "XDG_CONFIG_HOME=. git status",
        "GIT_CONFIG_GLOBAL=./g git status",
        "PATH=./bin:$PATH git verify-commit HEAD",
        "git -C {.,-c,core.hooksPath=.h} status",
    ],
)
def test_setting_what_git_runs_is_refused(repo: Path, command: str) -> None:
    assert analyze(command, sandbox=_sandbox(repo)).verdict == "deny", command


def test_signature_checks_with_trusted_config_stay_allowed(repo: Path) -> None:
    for command in (
        "git log --show-signature -3",
        "git verify-commit HEAD",
        "git config core.hooksPath",
        "git config --get include.path",
        "git -c log.showSignature=true log -1",
    ):
        assert analyze(command, sandbox=_sandbox(repo)).verdict == "allow", command


# --- what git does not take from the work tree --------------------------------------------


def test_gitattributes_only_selects_drivers_the_config_defines(repo: Path, tmp_path: Path) -> None:
    """`.gitattributes` is writable: `filter=x` / `diff=x` / `merge=x` name drivers, and
    git runs only drivers its configuration defines (whose programs are protected above)."""
    (repo / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    (repo / "README.md").write_text("changed\n")
    result = host_bash(
        repo, "git add -A && git commit -qm a && git diff HEAD~1 && git checkout -q HEAD~1 -- ."
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]  # nothing ran
    assert _sandbox(repo).check(".gitattributes", write=True).allowed


def test_gitmodules_cannot_run_a_command_and_is_protected(repo: Path, tmp_path: Path) -> None:
    """`submodule.<name>.update = !cmd` from `.gitmodules` is refused by git itself (since
    2.24.1); `.gitmodules` is a protected write all the same (it steers URLs and paths)."""
    sub = tmp_path / "sub"
    sub.mkdir()
    host_git(sub, "init", "-q", ".")
    host_git(sub, "commit", "-q", "--allow-empty", "-m", "s")
    added = host_git(
        repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub"
    )
    assert added.returncode == 0, added.stderr
    marker = tmp_path / "MARK-gitmodules"
    host_git(repo, "config", "-f", ".gitmodules", "submodule.sub.update", f"!touch {marker}")
    result = host_git(repo, "-c", "protocol.file.allow=always", "submodule", "update", "--init")
    assert result.returncode != 0 and "invalid value" in result.stderr
    assert not marker.exists()
    _refused_everywhere(repo, ".gitmodules")


# --- run time: kept read-only for programs the analysis cannot see into --------------------


async def test_config_named_paths_are_read_only_at_run_time(
    launcher: Launcher, repo: Path, tmp_path: Path
) -> None:
    host_git(repo, "config", "core.hooksPath", ".myhooks")
    host_git(repo, "config", "diff.conv.textconv", "sh tools/conv.sh")
    (repo / ".myhooks").mkdir()
    (repo / ".myhooks" / "pre-commit").write_text("#!/bin/sh\n")
    (repo / "tools").mkdir()
    (repo / "tools" / "conv.sh").write_text('cat "$1"\n')
    (repo / ".husky").mkdir()
    (tmp_path / "w.py").write_text(
        "import sys\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        open(p, 'a').write('touch /tmp/pwned\\n')\n"
        "        print('WROTE', p)\n"
        "    except OSError as e:\n"
        "        print('REFUSED', p, e.errno)\n"
    )
    sandbox = PathSandbox([Root(str(repo), True), Root(str(tmp_path), False)], str(repo))
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    targets = [repo / ".myhooks" / "pre-commit", repo / "tools" / "conv.sh", repo / "README.md"]
    outcome = await launcher.run(
        f"python3 {tmp_path / 'w.py'} " + " ".join(map(str, targets)),
        cwd=str(repo),
        policy=policy,
        timeout_s=60,
    )
    lines = outcome.stdout.splitlines()
    assert f"WROTE {repo / 'README.md'}" in lines, outcome.stdout + outcome.stderr
    for target in targets[:2]:
        assert f"REFUSED {target} 30" in lines, (target, outcome.stdout)  # EROFS


# --- the configuration reader --------------------------------------------------------------


def test_config_parser_reads_git_syntax() -> None:
    text = (
        '# comment\n[core]\n\thooksPath = "a b" ; trailing\n\tbare\n'
        '[diff "x y"]\n\ttextconv = sh \\\n tools/c.sh\n'
        '[Alias]\n\tL = "!f() { ./s.sh; }; f"\n[broken\nnot a line\n'
        "[branch.Main]\n\tremote = o\n"
    )
    assert parse_config(text) == [
        ("core.hookspath", "a b"),
        ("core.bare", None),
        ("diff.x y.textconv", "sh  tools/c.sh"),
        ("alias.l", "!f() { ./s.sh; }; f"),
        ("branch.main.remote", "o"),
    ]


def test_config_reading_is_bounded_and_follows_changes(repo: Path, tmp_path: Path) -> None:
    """Include loops end (git's depth limit; git itself refuses such a config), and a
    changed config is read again (the cache is keyed by the files' stat signatures)."""
    top, git_dir, home = str(repo), str(repo / ".git"), str(tmp_path / "nohome")
    assert str(repo / "later") not in named_paths(top, git_dir, home)
    host_git(repo, "config", "core.hooksPath", "later")
    assert str(repo / "later") in named_paths(top, git_dir, home)
    with (repo / ".git" / "config").open("a") as f:
        f.write("[include]\n\tpath = loop.inc\n")
    (repo / ".git" / "loop.inc").write_text("[include]\n\tpath = loop.inc\n")
    looped = named_paths(top, git_dir, home)
    assert str(repo / ".git" / "loop.inc") in looped and str(repo / "later") in looped


# --- writes hidden in a file's content: git apply ------------------------------------------

_EVIL_PATCH = (
    "diff --git a/.husky/pre-commit b/.husky/pre-commit\nnew file mode 100755\n"
    "--- /dev/null\n+++ b/.husky/pre-commit\n@@ -0,0 +1 @@\n+touch {marker}\n"
)
_TOOL_PATCH = (
    "diff --git a/tools/conv.sh b/tools/conv.sh\n--- a/tools/conv.sh\n+++ b/tools/conv.sh\n"
    '@@ -1 +1,2 @@\n cat "$1"\n+touch {marker}\n'
)
_PLAIN_PATCH = (
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
    "@@ -1 +1 @@\n-hello\n+changed\n"
)


def test_git_apply_targets_are_judged_by_the_sandbox(repo: Path, tmp_path: Path) -> None:
    """The files a patch creates or changes are writes: a patch that plants a hook (or
    changes a program the configuration runs) is refused, not merely asked."""
    marker = tmp_path / "MARK-apply"
    (repo / "evil.patch").write_text(_EVIL_PATCH.format(marker=marker))
    probe = tmp_path / "probe"
    probe.mkdir()
    host_git(probe, "init", "-q", ".")
    (probe / "evil.patch").write_text(_EVIL_PATCH.format(marker=marker))
    assert host_git(probe, "apply", "evil.patch").returncode == 0
    assert (probe / ".husky" / "pre-commit").exists(), "git apply did not plant the hook"
    host_git(repo, "config", "diff.conv.textconv", "sh tools/conv.sh")
    (repo / "tools").mkdir()
    (repo / "tools" / "conv.sh").write_text('cat "$1"\n')
    (repo / "tool.patch").write_text(_TOOL_PATCH.format(marker=marker))
    (repo / "plain.patch").write_text(_PLAIN_PATCH)
    sb = _sandbox(repo)
    for command in (
        "git apply evil.patch",
        "git apply -p0 evil.patch",
        "git apply --directory=pkg evil.patch",
        "git -C . apply --reject evil.patch",
        "git apply plain.patch tool.patch",
    ):
        assert analyze(command, sandbox=sb).verdict == "deny", command
    for command in ("git apply plain.patch", "git apply --check evil.patch"):
        assert analyze(command, sandbox=sb).verdict == "ask", command


def test_git_config_file_is_a_read(repo: Path) -> None:
    """`git config -f FILE -l` prints an INI file: judged as reading FILE."""
    sb = _sandbox(repo)
    assert analyze("git config -f ../outside.ini -l", sandbox=sb).verdict == "ask"
    assert analyze("git config --file=../outside.ini --list", sandbox=sb).verdict == "ask"
    assert analyze("git config -f ~/.aws/credentials -l", sandbox=sb).verdict == "deny"
    assert analyze("git config -f .gitmodules -l", sandbox=sb).verdict == "allow"


def test_fifos_under_names_git_reads_do_not_hang_the_check(repo: Path) -> None:
    """A FIFO where a hook manager's config, an included file or an installed hook would
    be (a program the analysis cannot see into can make one) is skipped, not opened for
    reading: the write check still answers."""
    with (repo / ".git" / "config").open("a") as f:
        f.write("[include]\n\tpath = ../shared.inc\n")
    os.mkfifo(repo / "shared.inc")
    os.mkfifo(repo / ".pre-commit-config.yaml")
    os.mkfifo(repo / ".git" / "hooks" / "pre-commit")
    sb = _sandbox(repo)
    assert sb.check("src/app.py", write=True).allowed
    assert not sb.check("shared.inc", write=True).allowed


_CONFIG_SYNTAX = [
    "[core]\n\thooksPath = .hk\n",
    "[core]hooksPath=.hk\n",
    "[CoRe]\nHOOKSPATH=.hk\n",
    '[core]\n\thooksPath = ".h k" \n',
    "[core]\n\thooksPath = .h\\\nk\n",
    "[core]\r\n\thooksPath = .hk\r\n",
    "[core] ; c\n\thooksPath = .hk # c\n",
    '[core]\n\thooksPath = "a;b#c"\n',
    "[core]\n\thooksPath = a\\tb\n",
    "[core]\n\thooksPath =\n",
    '[core ""]\n\thooksPath = .x\n',
    "[core.sub]\n\thooksPath = .x\n",
    "[core]\n\thooksPath = .a\n\thooksPath = .b\n",
    "  [core]  \n  hooksPath   =   spaced   value  \n",
    '[core]\n\thooksPath = a"b"c\n',
    '[core]\n\thooksPath = \\"q\\"\n',
    "[include]\n\tpath = x\n[core]\n\thooksPath = .y\n",
    "\ufeff[core]\n\thooksPath = .bom\n",
    "[core]\n\thooks-path = .dash\n",
]


@pytest.mark.parametrize("text", _CONFIG_SYNTAX)
def test_config_parser_agrees_with_git(tmp_path: Path, text: str) -> None:
    """Differential: the values git itself reads for core.hooksPath from each spelling."""
    config = tmp_path / "c"
    config.write_text(text)
    result = host_git(tmp_path, "config", "-f", str(config), "--get-all", "core.hookspath")
    assert result.returncode in (0, 1), result.stderr
    mine = [v for k, v in parse_config(text) if k == "core.hookspath" and v is not None]
    assert mine == result.stdout.splitlines()


async def test_config_named_paths_a_command_creates_are_removed(
    launcher: Launcher, repo: Path, tmp_path: Path
) -> None:
    """Configured but absent (nothing to bind read-only), or re-created after renaming its
    parent: the hooks a program the analysis cannot see into writes there are gone when
    the command ends, before a person's git can run them."""
    host_git(repo, "config", "core.hooksPath", "tools/hooks")
    (tmp_path / "w.py").write_text(
        "import os\n"
        "os.makedirs('tools/hooks')\n"
        "open('tools/hooks/pre-commit', 'w').write('#!/bin/sh\\ntouch /tmp/pwned\\n')\n"
        "os.rename('tools', 'tools.old')\n"
        "os.makedirs('tools/hooks')\n"
        "open('tools/hooks/pre-commit', 'w').write('#!/bin/sh\\ntouch /tmp/pwned\\n')\n"
        "open('kept.txt', 'w').write('x')\n"
    )
    sandbox = PathSandbox([Root(str(repo), True), Root(str(tmp_path), False)], str(repo))
    policy = confinement_policy(sandbox, network_enabled=False, masked_globs=(), rlimits=Rlimits())
    outcome = await launcher.run(
        f"python3 {tmp_path / 'w.py'}", cwd=str(repo), policy=policy, timeout_s=60
    )
    assert (repo / "kept.txt").exists(), outcome.stdout + outcome.stderr
    assert not (repo / "tools" / "hooks" / "pre-commit").exists(), outcome.stderr
