"""Lint catches patterns that can never match (issue #15 item 2): other agents'
spellings, unknown tools, regex syntax in globs, unbalanced parentheses — each with
the Stockade spelling suggested — and stays quiet on the patterns people rightly write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stockade.cli.main import main
from stockade.decision.lint import lint_rules
from stockade.decision.rules import Effect, Rule, Source

ROOT = Path(__file__).resolve().parents[3]


def lint_one(pattern: str, effect: Effect = Effect.ALLOW) -> list[tuple[str, str]]:
    return [(f.kind, f.fix) for f in lint_rules([Rule(effect, pattern, Source.MANAGED)])]


@pytest.mark.parametrize(
    ("pattern", "fix"),
    [
        ("Bash(rm *)", "write run_bash(rm *)"),
        ("Bash", "write run_bash"),
        ("Read(./x)", "write read_file(./x)"),
        ("Read(**/.env)", "write read_file(**/.env)"),
        ("Edit(src/**)", "write file_edit(src/**) and file_write(src/**)"),
        ("Write(docs/*)", "write file_write(docs/*)"),
        ("Grep", "write grep_files"),
        ("Glob(*.py)", "write glob_files(*.py)"),
        ("Bash(git:*)", "write run_bash(git *)"),
        ("run_bash(git:*)", "write run_bash(git *)"),
        ("run_bash(npm run test:*)", "write run_bash(npm run test *)"),
        ("shell(ls)", "write run_bash(ls)"),
        ("read(a.txt)", "write read_file(a.txt)"),
    ],
)
def test_other_agents_spellings_get_the_stockade_spelling(pattern: str, fix: str) -> None:
    assert lint_one(pattern) == [("foreign_spelling", fix)]


def test_a_tool_stockade_does_not_have_says_so() -> None:
    [(kind, fix)] = lint_one("WebFetch(domain:example.com)", Effect.DENY)
    assert kind == "foreign_spelling" and "delete it" in fix


@pytest.mark.parametrize(
    ("pattern", "fix"),
    [
        ("read_fle", "write read_file"),
        ("run_bsh(ls)", "write run_bash(ls)"),
        ("file_writes", "write file_write"),
    ],
)
def test_a_misspelt_tool_gets_the_closest_declared_name(pattern: str, fix: str) -> None:
    assert lint_one(pattern) == [("unknown_tool", fix)]


def test_an_undeclared_tool_is_reported_unless_declared() -> None:
    [(kind, fix)] = lint_one("frobnicate")
    assert kind == "unknown_tool" and "--tool" in fix
    rules = [Rule(Effect.ALLOW, "frobnicate", Source.MANAGED)]
    assert lint_rules(rules, known_tools=["frobnicate"]) == []


@pytest.mark.parametrize(
    ("pattern", "fix"),
    [
        (
            "run_bash(git (status|log))",
            "write one rule per alternative: run_bash(git status), run_bash(git log)",
        ),
        (
            "run_bash(npm (install|ci) *)",
            "write one rule per alternative: run_bash(npm install *), run_bash(npm ci *)",
        ),
        ("run_bash(git.*)", "write run_bash(git *)"),
        ("run_bash(^git status$)", "write run_bash(git status)"),
        ("run_bash(^rm)", "write run_bash(rm)"),
        ("read_file([a-z]+.txt)", "write glob rules"),
        ("run_bash(kill \\d+)", "write glob rules"),
        ("run_bash(git (?:status))", "write glob rules"),
        ("run_bash(curl .+)", "write run_bash(curl *)"),
    ],
)
def test_regex_looking_patterns_are_reported(pattern: str, fix: str) -> None:
    [(kind, got)] = lint_one(pattern, Effect.DENY)
    assert kind == "regex" and got.startswith(fix), got


@pytest.mark.parametrize(
    ("pattern", "fix"),
    [
        ("run_bash(git status))", "write run_bash(git status)"),
        ("run_bash(echo (a)", "balance the parentheses"),
        ("read_file(a))", "write read_file(a)"),
    ],
)
def test_unbalanced_parentheses_are_reported(pattern: str, fix: str) -> None:
    assert lint_one(pattern) == [("unbalanced", fix)]


@pytest.mark.parametrize(
    "pattern",
    [
        "*",
        "*(sudo)",
        "run_bash",
        "run_bash(git status)",
        "run_bash(ls*)",
        "run_bash(rm -rf .*)",
        "run_bash(echo $(date))",
        "run_bash(echo $(a|b))",
        "run_bash(echo $HOME)",
        "run_bash(grep -E 'a|b' f.txt)",
        "run_bash(awk '{print $1}' f)",
        "run_bash(git log --format=%H)",
        "run_bash(python -c print(1))",
        "read_file(**/.env)",
        "read_file(config.*)",
        "read_file(/abs/**/*.pem)",
        "glob_files",
        "search_papers",
        "download_paper",
        "file_edit(src/**)",
    ],
)
def test_patterns_people_rightly_write_are_not_reported(pattern: str) -> None:
    assert lint_one(pattern) == []


@pytest.mark.parametrize(
    "policy",
    [ROOT / "clients/stockade/demo/policy.toml", ROOT / "deploy/k8s/base/policy.toml"],
    ids=lambda p: p.parent.name,
)
def test_shipped_policies_lint_clean(policy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "lint", str(policy)]) == 0, capsys.readouterr().out


def test_lint_and_check_report_the_same_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(
        '[permissions]\ndeny = ["Bash(rm *)"]\n'
        'allow = ["run_bash(git (status|log))", "read_file"]\n'
    )
    assert main(["policy", "lint", str(policy), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    kinds = [(f["rule"]["pattern"], f["kind"]) for f in report["findings"]]
    assert kinds == [
        ("Bash(rm *)", "foreign_spelling"),
        ("run_bash(git (status|log))", "regex"),
    ]
    assert report["findings"][0]["shadowed_by"] is None
    # `policy check` decides as before and warns about the same rules on stderr.
    args = ["policy", "check", "--policy", str(policy), "--tool", "run_bash"]
    assert main([*args, "--args", '{"command": "rm -rf x"}', "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"] != "deny"  # Bash(rm *) never matched
    assert "Bash(rm *) never takes effect" in err and "write run_bash(rm *)" in err
    assert "git (status|log)" in err
