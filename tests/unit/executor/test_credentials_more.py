"""Issue 11, red-team pass (session 6): credential files the list did not know.

With the agent started in the person's home (HOME inside a root), `cat
~/.config/containers/auth.json`, `~/.codex/auth.json`, `~/.claude/.credentials.json`,
`~/.cache/huggingface/token`, `~/.s3cfg`, `~/.psql_history`… were ALLOWED (and readable by
the file tools): only the credential list refuses reads inside a root. Outside the roots
they were a bypass-immune ASK instead of the DENY a credential gets. Registry, agent-CLI,
model-hub, object-store, cloud and password-manager tokens, database and shell histories,
and node credentials (/etc/kubernetes, k3s, kubelet, TLS private keys) are now on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.executor.bash import analyze
from stockade.executor.paths import PathSandbox, Root

IN_HOME = [
    ".config/containers/auth.json",
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".cache/huggingface/token",
    ".huggingface/token",
    ".s3cfg",
    ".boto",
    ".databrickscfg",
    ".config/op/config",
    ".config/doctl/config.yaml",
    ".config/configstore/firebase-tools.json",
    ".config/helm/repositories.yaml",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".rediscli_history",
    ".node_repl_history",
    ".local/share/fish/fish_history",
]

SYSTEM = [
    "/run/user/1000/containers/auth.json",
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/pki/ca.key",
    "/etc/rancher/k3s/k3s.yaml",
    "/var/lib/kubelet/pki/kubelet-client-current.pem",
    "/etc/pki/tls/private/server.key",
    "/etc/letsencrypt/live/example.org/privkey.pem",
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    for rel in [*IN_HOME, "proj/main.py", "proj/.s3cfg"]:
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("token=hunter2\n")
    monkeypatch.setenv("HOME", str(home))
    yield home


@pytest.mark.parametrize("rel", IN_HOME)
def test_credentials_in_a_home_root_are_refused(home: Path, rel: str) -> None:
    sandbox = PathSandbox([Root(str(home), True)], str(home))
    assert not sandbox.check(rel).allowed
    assert analyze(f"cat {rel}", sandbox=sandbox).verdict == "deny"
    assert analyze(f"cat ~/{rel}", sandbox=sandbox).verdict == "deny"


@pytest.mark.parametrize("rel", IN_HOME)
def test_credentials_outside_the_roots_are_denied_not_asked(
    home: Path, rel: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = PathSandbox([Root(str(workspace), True)], str(workspace))
    assert analyze(f"cat ~/{rel}", sandbox=sandbox).verdict == "deny"


@pytest.mark.parametrize("path", SYSTEM)
def test_node_credentials_are_denied(path: str, tmp_path: Path) -> None:
    sandbox = PathSandbox([Root(str(tmp_path), True)], str(tmp_path))
    assert analyze(f"cat {path}", sandbox=sandbox).verdict == "deny"
    assert analyze(f"head -c 10 {path}", sandbox=sandbox).verdict == "deny"


def test_a_project_file_of_the_same_name_stays_readable(home: Path) -> None:
    sandbox = PathSandbox([Root(str(home), True)], str(home))
    assert sandbox.check("proj/.s3cfg").allowed
    assert analyze("cat proj/.s3cfg proj/main.py", sandbox=sandbox).verdict == "allow"
