"""The sample policy shipped in the policy ConfigMap: it parses with the decision service's
own loader, has no shadowed rules, is the exact file the cluster mounts, and what it
forbids read_file to read is also masked for bash by the executor."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from stockade.contract.protected import load_protected_reads
from stockade.decision.lint import lint_rules
from stockade.decision.policy import PolicyStore, parse_policy_text
from stockade.decision.rules import Effect

from .conftest import DEPLOY, OVERLAYS, Manifest, env_of, find, main_container, workload

POLICY_FILE = DEPLOY / "k8s" / "base" / "policy.toml"


def test_policy_parses_and_has_no_shadowed_rules() -> None:
    doc = parse_policy_text(POLICY_FILE.read_text(), "toml")
    assert doc.rules
    assert lint_rules(list(doc.rules)) == []
    effects = {rule.effect for rule in doc.rules}
    assert effects == {Effect.DENY, Effect.ASK, Effect.ALLOW}
    assert doc.limits["denial_max_consecutive"] >= 1


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cluster_mounts_this_policy(rendered: dict[str, list[Manifest]], overlay: str) -> None:
    objs = rendered[overlay]
    configmap = find(objs, "ConfigMap", "stockade-policy")
    assert configmap["data"]["policy.toml"] == POLICY_FILE.read_text()
    env = env_of(main_container(objs, "decision"))
    assert env["STOCKADE_DECISION_POLICY_FILE"]["value"].endswith("/policy.toml")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_executor_reads_the_same_policy_file(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    """read_file(**/.env) alone would leave `cat .env` open: the executor must take the
    same read denials (DEC-16), from the same ConfigMap, with no second list to drift."""
    objs = rendered[overlay]
    dec, exe = main_container(objs, "decision"), main_container(objs, "executor")
    path = env_of(dec)["STOCKADE_DECISION_POLICY_FILE"]["value"]
    env = env_of(exe)
    assert env["STOCKADE_EXECUTOR_POLICY_FILE"]["value"] == path
    assert "STOCKADE_EXECUTOR_DENIED_READ_GLOBS" not in env  # one source, nothing to drift

    def policy_mount(container: Manifest, pod_volumes: list[Manifest]) -> str:
        names = {v["name"] for v in pod_volumes if v.get("configMap", {}).get("name") ==
                 "stockade-policy"}  # fmt: skip
        mounts = [m for m in container["volumeMounts"] if m["name"] in names]
        assert len(mounts) == 1 and mounts[0].get("readOnly") is True
        return str(mounts[0]["mountPath"])

    for name, container in (("decision", dec), ("executor", exe)):
        volumes = workload(objs, name)["spec"]["template"]["spec"]["volumes"]
        assert path.startswith(policy_mount(container, volumes) + "/")
    # what the policy denies read_file is what the executor protects
    doc = parse_policy_text(POLICY_FILE.read_text(), "toml")
    read_denials = {
        rule.pattern[len("read_file(") : -1]
        for rule in doc.rules
        if rule.effect is Effect.DENY and rule.pattern.startswith("read_file(")
    }
    reads = load_protected_reads([POLICY_FILE], "/var/lib/stockade/workspace")
    assert read_denials and read_denials <= set(reads.deny), read_denials - set(reads.deny)


def _kubelet_publish(volume: Path, generation: str, files: dict[str, str]) -> None:
    """Publish ConfigMap contents the way kubelet's atomic writer does: a new timestamped
    folder, then one rename that swaps the ``..data`` symlink, then the old folder goes."""
    folder = volume / f"..{generation}"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    old = os.readlink(volume / "..data") if (volume / "..data").is_symlink() else None
    tmp_link = volume / "..data_tmp"
    tmp_link.symlink_to(folder.name)
    os.replace(tmp_link, volume / "..data")
    for name in files:
        if not (volume / name).is_symlink():
            (volume / name).symlink_to(f"..data/{name}")
    if old is not None:
        shutil.rmtree(volume / old)


def test_configmap_update_reaches_the_decision_service(tmp_path: Path) -> None:
    """The mounted policy.toml is a symlink into a folder kubelet swaps on every update;
    the decision service's change detection must see through it, and a bad edit must keep
    the last good policy."""
    base = POLICY_FILE.read_text()
    _kubelet_publish(tmp_path, "gen1", {"policy.toml": base})
    store = PolicyStore(tmp_path / "policy.toml", {})
    first = store.current.version
    assert store.reload_if_changed() is None

    stricter = base.replace("denial_max_total = 20", "denial_max_total = 10")
    assert stricter != base
    _kubelet_publish(tmp_path, "gen2", {"policy.toml": stricter})
    result = store.reload_if_changed()
    assert result is not None and result.changed
    assert store.current.version != first
    good = store.current.version

    _kubelet_publish(tmp_path, "gen3", {"policy.toml": base + "\n[permissions\n"})
    broken = store.reload_if_changed()
    assert broken is not None and not broken.changed and broken.error
    assert store.current.version == good
