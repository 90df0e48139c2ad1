"""`stockade policy test`: expected verdicts next to a policy, decided offline by the
same engine as `policy check`; the shipped example policies carry theirs and pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stockade.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = [
    ROOT / "clients" / "stockade" / "demo" / "policy.tests.toml",
    ROOT / "deploy" / "k8s" / "base" / "policy.tests.toml",
]

POLICY = """
[permissions]
deny = ["run_bash(rm *)"]
ask = ["file_write"]
allow = ["read_file", "run_bash(git status)"]
"""


@pytest.mark.parametrize("tests_file", SHIPPED, ids=lambda p: p.parent.name)
def test_shipped_policies_pass_their_tests(
    tests_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "test", str(tests_file)]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "FAIL" not in out and " 0 failed" in out


def _write(tmp_path: Path, cases: str, policy: str = POLICY) -> Path:
    (tmp_path / "policy.toml").write_text(policy)
    tests = tmp_path / "policy.tests.toml"
    tests.write_text(cases)
    return tests


def test_a_wrong_expectation_fails_with_a_readable_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = _write(
        tmp_path,
        """
[[case]]
name = "rm is denied"
tool = "run_bash"
args = { command = "rm -rf build" }
expect = "deny"
rule = "run_bash(rm *)"

[[case]]
name = "writes are allowed (wrong)"
tool = "file_write"
args = { file_path = "a.txt", content = "x" }
expect = "allow"
""",
    )
    assert main(["policy", "test", str(tests)]) == 1
    out = capsys.readouterr().out
    assert "PASS  rm is denied" in out
    assert "FAIL  writes are allowed (wrong)" in out
    assert "expected: allow" in out
    assert "got:      ask by 'file_write' [managed]" in out
    assert "1 passed, 1 failed" in out


def test_the_expected_rule_is_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = _write(
        tmp_path,
        """
[[case]]
tool = "read_file"
args = { file_path = "a.txt" }
expect = "allow"
rule = "read_file(src/**)"
""",
    )
    assert main(["policy", "test", str(tests), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    case = report["files"][0]["cases"][0]
    assert report["passed"] is False
    assert case["got"]["verdict"] == "allow" and case["got"]["rule"] == "read_file"
    assert case["expected"] == {"verdict": "allow", "rule": "read_file(src/**)"}


def test_mode_subagent_and_facts_per_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = _write(
        tmp_path,
        """
[defaults]
mode = "plan"

[[case]]
name = "plan mode refuses a write"
tool = "file_write"
args = { file_path = "a.txt", content = "x" }
expect = "deny"

[[case]]
name = "the same write in default mode asks"
tool = "file_write"
args = { file_path = "a.txt", content = "x" }
mode = "default"
expect = "ask"
""",
    )
    assert main(["policy", "test", str(tests)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    ("cases", "says"),
    [
        ('[[case]]\ntool = "read_file"\nexpect = "maybe"\n', "case.0.expect"),
        ('[[case]]\ntool = "read_file"\nexpect = "allow"\ncolour = 1\n', "colour"),
        ("[[case]\n", "not valid TOML"),
        ('policy = "missing.toml"\n[[case]]\ntool = "x"\nexpect = "allow"\n', "missing.toml"),
        ("# nothing\n", "no [[case]] tables"),
    ],
)
def test_unusable_files_are_a_usage_error(
    tmp_path: Path, cases: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = _write(tmp_path, cases)
    assert main(["policy", "test", str(tests)]) == 2
    assert says in capsys.readouterr().err


def test_the_policy_can_be_named_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = _write(
        tmp_path, '[[case]]\ntool = "run_bash"\nargs = { command = "rm x" }\nexpect = "deny"\n'
    )
    other = tmp_path / "candidate.toml"
    other.write_text('[permissions]\nallow = ["run_bash(rm *)"]\n')
    assert main(["policy", "test", str(tests)]) == 0
    # The candidate allows rm: the same expectations catch the regression.
    assert main(["policy", "test", str(tests), "--policy", str(other)]) == 1
    assert "FAIL" in capsys.readouterr().out
