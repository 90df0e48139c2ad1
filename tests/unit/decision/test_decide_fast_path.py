"""The decision engine's one fast path, checked against the main path (#13 item 4).

``engine.decide`` is the one entry. When no DENY or ASK rule, tool check or hook signal
applies (the common ALLOW), it settles the call in ``_decide_allow_only`` instead of
running precedence, mode, subagent and conflict steps over every tier. That shortcut is
kept because it earns its place (tests/bench/bench_decision.py, PERF-1c-fast-path); this
test holds it to the main path: for thousands of generated calls the fast path's decision
equals, field by field, what the main path decides for the same call.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stockade.decision import engine
from stockade.decision.engine import Decision, DecisionRequest, Facts
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import Effect, Rule, RuleIndex, Source

POLICY_RULES = [
    (Effect.ALLOW, "read_file"),
    (Effect.ALLOW, "run_bash(git status)"),
    (Effect.ALLOW, "run_bash(git log *)"),
    (Effect.ALLOW, "run_bash(ls *)"),
    (Effect.ALLOW, "glob_files(src/**)"),
    (Effect.ALLOW, "file_write(docs/**)"),
    (Effect.ALLOW, "fetch(https://example.com/*)"),
    (Effect.ALLOW, "*(notes.md)"),
    (Effect.DENY, "read_file(**/.env)"),
    (Effect.DENY, "run_bash(rm *)"),
    (Effect.ASK, "file_write(**/deploy/**)"),
    (Effect.ASK, "run_bash(npm *)"),
]
SESSION_RULES = [
    (Effect.ALLOW, "run_bash(make test)"),
    (Effect.ALLOW, "file_edit(src/app.py)"),
    (Effect.ALLOW, "grep_files"),
    (Effect.DENY, "fetch(*evil*)"),
]
COMMANDS = [
    "git status", "git log --oneline", "ls -la", "make test", "rm -rf build", "npm install",
    "echo hi", "cat README.md", "git push", "ls src",
]  # fmt: skip
PATHS = [
    "README.md", "notes.md", "docs/a.md", "src/app.py", "src/x/y.py", ".env", "a/.env",
    "deploy/prod.yaml", "/etc/passwd", "../outside.txt",
]  # fmt: skip
TOOLS = [
    "read_file", "file_write", "file_edit", "glob_files", "grep_files", "run_bash", "fetch",
    "save_note", "todo_write", "subagent", "unknown_tool",
]  # fmt: skip


def generated_calls(n: int, seed: int = 13) -> Iterator[tuple[DecisionRequest, RuleIndex | None]]:
    """``n`` calls over every tool, mode and fact combination, with and without session
    rules (a fixed seed: the same calls on every run)."""
    rng = random.Random(seed)
    own = [Rule(e, p, Source.SESSION, "", f"r{i}") for i, (e, p) in enumerate(SESSION_RULES)]
    grant = Rule(Effect.ALLOW, "run_bash(echo hi)", Source.SESSION, "", "g1")
    sessions = [None, RuleIndex(own), RuleIndex([grant])]
    for _ in range(n):
        tool = rng.choice(TOOLS)
        args: dict[str, Any]
        subs: tuple[str, ...] | None = None
        if tool == "run_bash":
            parts = rng.sample(COMMANDS, rng.choice([1, 1, 1, 2]))
            args = {"command": " && ".join(parts)}
            subs = tuple(parts) if rng.random() < 0.8 else None
        elif tool == "fetch":
            args = {"url": rng.choice(["https://example.com/a", "https://evil.test/", "x"])}
        elif tool in ("glob_files",):
            args = {"pattern": rng.choice(PATHS)}
        elif tool == "grep_files":
            args = {"path": rng.choice(PATHS), "pattern": "TODO"}
        else:
            args = {"file_path": rng.choice(PATHS)}
        facts = Facts(
            sub_commands=subs,
            read_only=rng.choice([None, True, False]),
            inside_working_dir=rng.choice([None, True, False]),
        )
        session = rng.choice(sessions)
        yield (
            DecisionRequest(
                tool_name=tool,
                arguments=args,
                mode=rng.choice(list(Mode)),
                from_subagent=rng.random() < 0.2,
                facts=facts,
                session_rules=session,
            ),
            session,
        )


def _main_path(
    policy: engine.CompiledPolicy,
    req: DecisionRequest,
    content: Any,
    allow_matches: tuple[list[Rule], bool],
) -> Decision:
    """What ``decide`` runs when the fast path does not apply: every tier collected, then
    precedence, mode, subagent and conflicts."""
    return engine._finish(policy, req, content, engine._collect(req, [], [], [], allow_matches))


@contextmanager
def main_path_only() -> Iterator[None]:
    """``decide`` with its fast path replaced by the main path."""
    fast = engine._decide_allow_only
    engine._decide_allow_only = _main_path
    try:
        yield
    finally:
        engine._decide_allow_only = fast


def test_the_fast_path_decides_exactly_as_the_main_path() -> None:
    policy = compile_policy(
        PolicyDoc(rules=tuple(Rule(e, p, Source.MANAGED) for e, p in POLICY_RULES)), cwd="/w"
    )
    calls = [req for req, _ in generated_calls(3000)]
    taken = 0
    fast = engine._decide_allow_only

    def counting(*args: Any) -> Decision:
        nonlocal taken
        taken += 1
        return fast(*args)

    engine._decide_allow_only = counting
    try:
        quick = [engine.decide(policy, req) for req in calls]
    finally:
        engine._decide_allow_only = fast
    with main_path_only():
        slow = [engine.decide(policy, req) for req in calls]
    for req, got, want in zip(calls, quick, slow, strict=True):
        assert got == want, (req, got, want)
    # The generated calls exercise the fast path a good deal, and the other path too.
    assert len(calls) * 0.3 < taken < len(calls) * 0.95, taken
    verdicts = {d.verdict for d in quick}
    assert verdicts == {Effect.ALLOW, Effect.ASK, Effect.DENY}
