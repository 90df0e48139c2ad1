"""The sample policy shipped in the policy ConfigMap: it parses with the decision service's
own loader, has no shadowed rules, is the exact file the cluster mounts, and what it
forbids read_file to read is also masked for bash by the executor."""

from __future__ import annotations

import pytest

from stockade.decision.lint import lint_rules
from stockade.decision.policy import parse_policy_text
from stockade.decision.rules import Effect

from .conftest import DEPLOY, OVERLAYS, Manifest, env_of, find, main_container

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
def test_read_denials_are_masked_for_bash_too(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    """read_file(**/.env) alone would leave `cat .env` open: the executor must mask the same
    paths for commands (EXE-9)."""
    doc = parse_policy_text(POLICY_FILE.read_text(), "toml")
    read_denials = {
        rule.pattern[len("read_file(") : -1]
        for rule in doc.rules
        if rule.effect is Effect.DENY and rule.pattern.startswith("read_file(")
    }
    assert read_denials
    env = env_of(main_container(rendered[overlay], "executor"))
    masked = set(env["STOCKADE_EXECUTOR_DENIED_READ_GLOBS"]["value"].split(","))
    assert read_denials <= masked, read_denials - masked
