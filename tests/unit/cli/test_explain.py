"""`stockade explain`: risk, explanation and decision of one call, offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

STOCKADE = [sys.executable, "-m", "stockade.cli.main"]


def _explain(*argv: str, cwd: Path) -> dict[str, object]:
    done = subprocess.run(
        [*STOCKADE, "explain", "--json", *argv], capture_output=True, text=True, cwd=cwd
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_without_a_policy_the_executor_findings_decide(tmp_path: Path) -> None:
    out = _explain("--tool", "run_bash", "--args", '{"command": "npm install"}', cwd=tmp_path)
    assert out["verdict"] == "ask" and out["risk"] == "medium"
    assert "npm install" in str(out["explanation"])
    assert out["sub_commands"] == ["npm install"]


def test_a_compound_command_is_judged_per_sub_command(tmp_path: Path) -> None:
    out = _explain(
        "--tool", "run_bash", "--args", '{"command": "git status; rm -rf ~"}', cwd=tmp_path
    )
    assert out["verdict"] == "deny" and out["risk"] == "high"


def test_with_a_policy_the_rule_that_decides_is_named(tmp_path: Path) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text('[permissions]\ndeny = ["read_file(**/.env)"]\n')
    (tmp_path / ".env").write_text("X=1\n")
    out = _explain(
        "--tool",
        "read_file",
        "--args",
        '{"file_path": ".env"}',
        "--policy",
        str(policy),
        cwd=tmp_path,
    )
    assert out["verdict"] == "deny"
    assert out["rule"] == {"pattern": "read_file(**/.env)", "effect": "deny", "source": "managed"}


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [*STOCKADE, "explain", "--tool", "read_file", "--args", "not json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "not valid JSON" in done.stderr
