"""``stockade policy check|lint|replay`` offline (DEC-15), with the executor's real analysis."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from stockade.cli import policy as policy_cli

POLICY = """
mode = "default"
[permissions]
deny  = ["run_bash(rm *)", "read_file(**/.env)"]
ask   = ["file_write"]
allow = ["run_bash(git status)", "run_bash(git log *)", "read_file"]
"""


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stockade")
    sub = parser.add_subparsers()
    policy_cli.register(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


@pytest.fixture
def pfile(tmp_path: Path) -> Path:
    f = tmp_path / "policy.toml"
    f.write_text(POLICY)
    return f


def check(pfile: Path, tool: str, args: dict[str, str], *extra: str) -> list[str]:
    return ["policy", "check", "--policy", str(pfile), "--tool", tool, "--args", json.dumps(args),
            "--cwd", str(pfile.parent), "--json", *extra]  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "args", "verdict", "pattern"),
    [
        ("run_bash", {"command": "git status"}, "allow", "run_bash(git status)"),
        ("run_bash", {"command": "git status; rm -rf ~"}, "deny", "run_bash(rm *)"),
        ("run_bash", {"command": "git status && git log -3"}, "allow", "run_bash(git status)"),
        ("run_bash", {"command": "make"}, "ask", "run_bash(make)"),  # as Decide names it
        ("read_file", {"file_path": "notes.txt"}, "allow", "read_file"),
        ("read_file", {"file_path": "sub/.env"}, "deny", "read_file(**/.env)"),
        ("file_write", {"file_path": "a.txt", "content": "x"}, "ask", "file_write"),
        ("search_papers", {"query": "x"}, "allow", None),
    ],
)
def test_check_json_contract(
    pfile: Path,
    capsys: pytest.CaptureFixture[str],
    tool: str,
    args: dict[str, str],
    verdict: str,
    pattern: str | None,
) -> None:
    assert run(check(pfile, tool, args)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == verdict, out
    assert isinstance(out["reason"], str) and out["reason"]
    assert isinstance(out["conflicts"], list)
    if pattern is None:
        assert out["rule"] is None
    else:
        assert out["rule"]["pattern"] == pattern
        assert set(out["rule"]) == {"pattern", "effect", "source"}


def test_check_modes_and_subagent(pfile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = check(pfile, "file_write", {"file_path": "a.txt", "content": "x"}, "--mode", "dontAsk")
    assert run(argv) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "deny"
    argv = check(pfile, "file_write", {"file_path": "a.txt", "content": "x"}, "--subagent")
    assert run(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "deny" and "subagent" in out["reason"]


def test_check_usage_errors_exit_2(pfile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["policy", "check", "--policy", str(pfile), "--tool", "run_bash"]
    assert run([*base, "--args", "{not json"]) == 2
    assert run([*base, "--args", "[1]"]) == 2
    assert run([*base, "--args", "{}", "--mode", "yolo"]) == 2
    assert "yolo" in capsys.readouterr().err
    bad = pfile.parent / "bad.toml"
    bad.write_text("[permissions]\ndeny = ['run_bash(x']")
    assert run(["policy", "check", "--policy", str(bad), "--tool", "x", "--args", "{}"]) == 2
    assert "run_bash(x" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run(["policy", "check", "--policy", str(pfile), "--args", "{}"])
    assert exc.value.code == 2


def test_lint(tmp_path: Path, capsys: pytest.CaptureFixture[str], pfile: Path) -> None:
    assert run(["policy", "lint", str(pfile)]) == 0
    shadowed = tmp_path / "s.yaml"
    shadowed.write_text(
        "permissions:\n  deny: ['run_bash(git *)']\n  allow: ['run_bash(git log)']\n"
    )
    capsys.readouterr()
    assert run(["policy", "lint", str(shadowed), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["findings"][0]["rule"]["pattern"] == "run_bash(git log)"
    assert out["findings"][0]["fix"]
    assert run(["policy", "lint", str(tmp_path / "missing.toml")]) == 2
