"""Policy sources (DEC-7): TOML/YAML files, environment, versions, hot reload with last-good."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stockade.decision.modes import Mode
from stockade.decision.policy import (
    PolicyStore,
    env_policy,
    load_policy,
    parse_policy_text,
    split_patterns,
)
from stockade.decision.rules import Effect, Source
from stockade.errors import InvalidArgument, InvalidPattern

ISSUE_TOML = """
mode = "default"            # default | acceptEdits | bypassPermissions | dontAsk | plan
[permissions]
deny  = ["run_bash(rm *)", "read_file(**/.env)"]
ask   = ["file_write"]
allow = ["run_bash(git status)", "read_file"]
[limits]
denial_max_consecutive = 3
denial_max_total = 20
approval_timeout_seconds = 120
"""


def test_issue_toml_shape(tmp_path: Path) -> None:
    f = tmp_path / "policy.toml"
    f.write_text(ISSUE_TOML)
    p = load_policy(f, {}, cwd="/w")
    assert [(r.effect, r.pattern) for r in p.rules] == [
        (Effect.DENY, "run_bash(rm *)"),
        (Effect.DENY, "read_file(**/.env)"),
        (Effect.ASK, "file_write"),
        (Effect.ALLOW, "run_bash(git status)"),
        (Effect.ALLOW, "read_file"),
    ]
    assert all(r.source is Source.MANAGED for r in p.rules)
    assert (p.denial_max_consecutive, p.denial_max_total, p.approval_timeout_seconds) == (
        3,
        20,
        120,
    )
    assert p.version.startswith("sha256:")


def test_yaml_and_rule_tables(tmp_path: Path) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text(
        "mode: plan\npermissions:\n  deny:\n    - {pattern: 'run_bash(curl *)', reason: no net}\n"
    )
    p = load_policy(f, {})
    assert p.mode is Mode.PLAN
    assert p.rules[0].reason == "no net"


def test_environment_variables_from_the_seed() -> None:
    doc = env_policy(
        {
            "AGENT_PERMISSIONS_DENY": "run_bash(rm *),run_bash(a,b)",
            "AGENT_PERMISSIONS_ASK": "file_write",
            "AGENT_PERMISSIONS_ALLOW": " read_file , ",
            "AGENT_PERMISSION_MODE": "acceptEdits",
            "AGENT_DENIAL_MAX_CONSECUTIVE": "5",
            "AGENT_DENIAL_MAX_TOTAL": "9",
        }
    )
    assert [r.pattern for r in doc.rules] == [
        "run_bash(rm *)",
        "run_bash(a,b)",
        "file_write",
        "read_file",
    ]
    assert all(r.source is Source.ENV for r in doc.rules)
    assert doc.mode is Mode.ACCEPT_EDITS
    assert doc.limits == {"denial_max_consecutive": 5.0, "denial_max_total": 9.0}


def test_split_patterns_keeps_commas_in_parentheses() -> None:
    assert split_patterns("a(x,y),b,,c(d)") == ["a(x,y)", "b", "c(d)"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[permissions]\ndeny = ['run_bash(rm *']", "run_bash(rm *"),
        ("mode = 'yolo'", "yolo"),
        ("colour = 1", "colour"),
        ("[permissions]\nmaybe = []", "maybe"),
        ("[limits]\ndenial_max_total = -1", "denial_max_total"),
        ("[permissions\n", "parse"),
        ("[permissions]\ndeny = 'x'", "list"),
    ],
)
def test_bad_policies_say_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_policy_text(text)
    assert needle in err.value.message


def test_bad_pattern_is_invalid_pattern() -> None:
    with pytest.raises(InvalidPattern) as err:
        parse_policy_text("[permissions]\nallow = ['read file']")
    assert err.value.metadata["pattern"] == "read file"


def test_version_changes_with_rules_and_not_with_formatting() -> None:
    from stockade.decision.policy import compile_policy

    a = compile_policy(parse_policy_text("[permissions]\ndeny=['x']"))
    b = compile_policy(parse_policy_text("[permissions]\n\ndeny = [ 'x' ]  # same"))
    c = compile_policy(parse_policy_text("[permissions]\ndeny=['y']"))
    assert a.version == b.version != c.version


def test_reload_keeps_last_good_policy(tmp_path: Path) -> None:
    """DEC-7: a bad file keeps the last good policy and reports why."""
    f = tmp_path / "policy.toml"
    f.write_text("[permissions]\ndeny = ['run_bash']")
    store = PolicyStore(f, {})
    good = store.current.version
    f.write_text("[permissions]\ndeny = ['run_bash(oops']\n# longer so the size changes")
    result = store.reload_if_changed()
    assert result is not None and not result.changed
    assert "run_bash(oops" in result.error and "run_bash(oops" in store.last_error
    assert store.current.version == good
    f.write_text("[permissions]\ndeny = ['read_file']\nask = ['file_write']")
    result = store.reload_if_changed()
    assert result is not None and result.changed and not result.error
    assert [r.pattern for r in store.current.rules] == ["read_file", "file_write"]
    assert store.last_error == ""
    assert store.reload_if_changed() is None  # unchanged file: nothing to do


def test_reload_of_a_deleted_file_keeps_policy(tmp_path: Path) -> None:
    f = tmp_path / "policy.toml"
    f.write_text("[permissions]\ndeny = ['run_bash']")
    store = PolicyStore(f, {})
    f.unlink()
    result = store.reload()
    assert "cannot read" in result.error
    assert store.current.rules[0].pattern == "run_bash"


async def test_watch_picks_up_changes(tmp_path: Path) -> None:
    f = tmp_path / "policy.toml"
    f.write_text("[permissions]\ndeny = ['run_bash']")
    store = PolicyStore(f, {})
    task = asyncio.create_task(store.watch(0.01))
    try:
        f.write_text("[permissions]\ndeny = ['read_file', 'file_write']")
        for _ in range(500):
            if store.current.rules[0].pattern == "read_file":
                break
            await asyncio.sleep(0.01)
        assert [r.pattern for r in store.current.rules] == ["read_file", "file_write"]
    finally:
        task.cancel()


def test_project_file_rules_follow_managed_ones_with_their_source(tmp_path: Path) -> None:
    managed = tmp_path / "managed.toml"
    project = tmp_path / "project.yaml"
    managed.write_text("mode = 'plan'\n[permissions]\ndeny = ['run_bash(rm *)']\n")
    project.write_text("mode: dontAsk\npermissions:\n  allow: ['read_file']\n")
    store = PolicyStore(managed, {"AGENT_PERMISSIONS_ASK": "file_write"}, project_path=project)
    rules = [(r.pattern, r.source) for r in store.current.rules]
    assert rules == [
        ("run_bash(rm *)", Source.MANAGED),
        ("read_file", Source.PROJECT),
        ("file_write", Source.ENV),
    ]
    assert store.current.mode is Mode.PLAN  # the managed file's mode beats the project's
    project.write_text("permissions:\n  allow: ['read_file(']\n# a bad edit, longer")
    result = store.reload_if_changed()
    assert result is not None and str(project) in result.error
    assert [r.pattern for r in store.current.rules][1] == "read_file"  # last good kept
