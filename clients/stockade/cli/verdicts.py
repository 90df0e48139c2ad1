"""``stockade policy test``: expected verdicts written next to a policy, checked offline.

The ``opa test`` habit for Stockade policies. A tests file (TOML) lists calls and the
verdict each must get; every case is decided by the same engine and executor analysis as
``stockade policy check``, and a failure prints what was expected, what came out and
which rule decided it. Exit 0 when every case passes, 1 when one fails, 2 when the files
are unusable::

    # policy.tests.toml, next to policy.toml
    policy = "policy.toml"          # optional: default, this file's name without .tests

    [defaults]                       # optional, for every case
    mode = "default"
    cwd = "."                        # relative to this file; also the allowed root
    roots = ["."]

    [[case]]
    name = "secrets stay unread"
    tool = "read_file"
    args = { file_path = "app/.env" }
    expect = "deny"
    rule = "read_file(**/.env)"      # optional: the rule that must decide it

    [[case]]
    tool = "run_bash"
    args = { command = "git status" }
    expect = "allow"
    subagent = true                  # optional: the call comes from a subagent
    mode = "plan"                    # optional: this case's mode
    facts = { read_only = true }     # optional: findings for a tool the executor does not own
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stockade.decision.engine import CompiledPolicy, Decision, DecisionRequest, Facts, decide
from stockade.decision.modes import Mode, parse_mode
from stockade.decision.policy import load_policy
from stockade.decision.rules import Source
from stockade.errors import StockadeError

USAGE_ERROR = 2
MAX_CASES = 10_000
"""A tests file is read whole; past this many cases it is refused rather than run."""


class FactsSpec(BaseModel):
    """Findings to assume for a tool whose analysis the executor does not provide."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    read_only: bool | None = None
    inside_working_dir: bool | None = None
    needs_network: bool = False
    sub_commands: list[str] | None = None


class CaseDefaults(BaseModel):
    """Values every case gets unless it says otherwise."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: str | None = None
    cwd: str = "."
    roots: list[str] | None = None
    subagent: bool = False


class Case(BaseModel):
    """One call and the verdict it must get."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = ""
    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    expect: Literal["allow", "ask", "deny"]
    rule: str | None = None
    """The pattern of the rule that must decide it (``default`` for no rule)."""
    mode: str | None = None
    subagent: bool | None = None
    cwd: str | None = None
    roots: list[str] | None = None
    facts: FactsSpec | None = None


class TestsFile(BaseModel):
    """A policy tests file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str | None = None
    defaults: CaseDefaults = Field(default_factory=CaseDefaults)
    case: list[Case] = Field(default_factory=list, max_length=MAX_CASES)


@dataclass(frozen=True)
class Outcome:
    """What one case got."""

    case: Case
    label: str
    passed: bool
    verdict: str
    rule: str
    source: str
    reason: str
    step: str


FactsFor = Callable[[str, Mapping[str, Any], list[str], str], Facts | None]


def default_policy_path(tests_path: Path) -> Path:
    """``policy.tests.toml`` → ``policy.toml`` (the file the tests sit next to)."""
    name = tests_path.name
    for suffix in (".tests.toml", ".tests.yaml", ".tests.yml"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            for ext in (".toml", ".yaml", ".yml"):
                if (tests_path.parent / f"{stem}{ext}").exists():
                    return tests_path.parent / f"{stem}{ext}"
            return tests_path.parent / f"{stem}.toml"
    raise StockadeError(
        f'{tests_path}: say which policy it tests (policy = "...") or name it '
        "<policy>.tests.toml next to the policy"
    )


def load_tests(path: Path) -> TestsFile:
    """Parse and validate a tests file; ``StockadeError`` says what is wrong and where."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise StockadeError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise StockadeError(f"{path}: not valid TOML: {exc}") from None
    try:
        return TestsFile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()[:10]
        )
        raise StockadeError(f"{path}: {problems}") from None


def _label(index: int, case: Case) -> str:
    if case.name:
        return case.name
    return f"case {index + 1}: {case.tool} {json.dumps(case.args, ensure_ascii=False)}"


def _facts(case: Case, found: Facts | None) -> Facts:
    if case.facts is None:
        return found or Facts()
    spec = case.facts
    base = found or Facts()
    return Facts(
        tool_rules=base.tool_rules,
        sub_commands=tuple(spec.sub_commands)
        if spec.sub_commands is not None
        else base.sub_commands,
        inside_working_dir=spec.inside_working_dir
        if spec.inside_working_dir is not None
        else base.inside_working_dir,
        read_only=spec.read_only if spec.read_only is not None else base.read_only,
        needs_network=spec.needs_network or base.needs_network,
        analysis_reasons=base.analysis_reasons,
        explanation=base.explanation,
    )


def run_case(
    policy_file: Path,
    tests: TestsFile,
    base_dir: Path,
    index: int,
    case: Case,
    *,
    facts_for: FactsFor,
    cache: dict[tuple[str, str | None], CompiledPolicy],
) -> Outcome:
    """Decide one case as ``policy check`` would and compare."""
    d = tests.defaults
    cwd = os.path.realpath(base_dir / (case.cwd or d.cwd))
    roots = [os.path.realpath(base_dir / r) for r in (case.roots or d.roots or [])]
    mode_text = case.mode or d.mode
    key = (cwd, mode_text)
    policy = cache.get(key)
    if policy is None:
        mode: Mode | None = parse_mode(mode_text) if mode_text else None
        policy = cache[key] = load_policy(policy_file, {}, cwd=cwd, mode_override=mode)
    facts = _facts(case, facts_for(case.tool, case.args, roots, cwd))
    decision: Decision = decide(
        policy,
        DecisionRequest(
            tool_name=case.tool,
            arguments=case.args,
            mode=policy.mode,
            from_subagent=case.subagent if case.subagent is not None else d.subagent,
            facts=facts,
        ),
    )
    winner = decision.winning_rule
    rule = "default" if winner.source is Source.DEFAULT else winner.pattern
    verdict = decision.verdict.value
    passed = verdict == case.expect and (case.rule is None or case.rule == rule)
    return Outcome(
        case,
        _label(index, case),
        passed,
        verdict,
        rule,
        winner.source.value,
        decision.reason,
        decision.step,
    )


def run_tests(
    path: Path, policy_override: Path | None, facts_for: FactsFor
) -> tuple[Path, list[Outcome]]:
    """Run every case of ``path``; returns the policy file used and the outcomes."""
    tests = load_tests(path)
    base = path.parent
    if policy_override is not None:
        policy_file = policy_override
    elif tests.policy:
        policy_file = base / tests.policy
    else:
        policy_file = default_policy_path(path)
    if not tests.case:
        raise StockadeError(f"{path}: no [[case]] tables")
    cache: dict[tuple[str, str | None], CompiledPolicy] = {}
    outcomes = [
        run_case(policy_file, tests, base, i, case, facts_for=facts_for, cache=cache)
        for i, case in enumerate(tests.case)
    ]
    return policy_file, outcomes


def _print_human(path: Path, policy_file: Path, outcomes: list[Outcome]) -> None:
    for o in outcomes:
        if o.passed:
            print(f"PASS  {o.label}")
            continue
        c = o.case
        want = c.expect + (f" by {c.rule!r}" if c.rule is not None else "")
        print(f"FAIL  {o.label}")
        print(f"        call:     {c.tool} {json.dumps(c.args, ensure_ascii=False)}")
        print(f"        expected: {want}")
        print(f"        got:      {o.verdict} by {o.rule!r} [{o.source}] at {o.step}: {o.reason}")
    failed = sum(not o.passed for o in outcomes)
    print(f"{path}: {len(outcomes) - failed} passed, {failed} failed (policy {policy_file})")


def run(args: argparse.Namespace) -> int:
    """Handler of ``stockade policy test``."""
    from stockade.cli.policy import executor_facts

    def facts_for(tool: str, call: Mapping[str, Any], roots: list[str], cwd: str) -> Facts | None:
        return executor_facts(tool, call, roots=roots, cwd=cwd)

    results = []
    failed = 0
    for name in args.files:
        path = Path(name)
        try:
            policy_file, outcomes = run_tests(
                path, Path(args.policy) if args.policy else None, facts_for
            )
        except StockadeError as exc:
            print(f"stockade policy test: error: {exc.message}", file=sys.stderr)
            return USAGE_ERROR
        failed += sum(not o.passed for o in outcomes)
        if args.json:
            results.append(
                {
                    "file": str(path),
                    "policy": str(policy_file),
                    "cases": [
                        {
                            "name": o.label,
                            "passed": o.passed,
                            "expected": {"verdict": o.case.expect, "rule": o.case.rule},
                            "got": {
                                "verdict": o.verdict,
                                "rule": o.rule,
                                "source": o.source,
                                "step": o.step,
                                "reason": o.reason,
                            },
                        }
                        for o in outcomes
                    ],
                }
            )
        else:
            _print_human(path, policy_file, outcomes)
    if args.json:
        print(json.dumps({"passed": failed == 0, "files": results}, ensure_ascii=False))
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``policy test``."""
    p = sub.add_parser(
        "test",
        help="check a policy against the expected verdicts written next to it (offline)",
        description=(
            "Decide every [[case]] of each tests file with the same engine as 'policy check' "
            "and compare with its expected verdict (and rule). Exit 0 when all pass, 1 when "
            "one fails, 2 when a file is unusable."
        ),
    )
    p.add_argument("files", nargs="+", metavar="TESTS", help="tests files (policy.tests.toml)")
    p.add_argument("--policy", help="test this policy file instead of the one the file names")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
