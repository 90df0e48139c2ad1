"""Whether each fast path on the decision path earns its place (#13 item 4).

A fast path duplicates the main logic for a common case, so it is kept only where it is
clearly faster; each has a differential test that holds it to the main path:

- ``engine.decide`` settling an ALLOW-only call in ``_decide_allow_only`` instead of the
  full precedence/mode/conflict pipeline (tests/unit/decision/test_decide_fast_path.py);
- ``convert.struct_to_dict`` reading flat string/bool arguments directly instead of
  ``json_format.MessageToDict`` (tests/unit/decision/test_servicer_pb.py);
- ``convert._rule_pb_cached`` reusing a policy rule's message instead of building it per
  Decide (test_servicer_pb.py);
- ``contract.grant.canonical_json`` writing flat arguments directly, and
  ``claims_payload`` writing the signed claims directly, instead of the JSON encoder
  (tests/unit/decision/test_grant_payload.py: the bytes are equal);
- ``contract.grant.findings_json`` writing the findings directly instead of the encoder,
  and ``findings_digest`` looking up the four digests of findings without tool rules or
  sub-commands instead of hashing them (test_grant_payload.py: equal bytes, equal
  digests).

Each figure is the fast path's rate over the main path's on the same inputs, measured in
alternating rounds (so load from elsewhere hits both); ratio > 1 means the fast path is
faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format, struct_pb2

from stockade.contract import grant
from stockade.decision import convert, engine
from stockade.decision.engine import DecisionRequest, Facts
from stockade.decision.modes import Mode
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import Effect, Rule, Source
from tests.bench.common import figure

ROUNDS = 5
ROUND_S = 0.4


def _rate(fn: Callable[[], Any], seconds: float) -> float:
    """Calls of ``fn`` per second over about ``seconds``."""
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(50):
            fn()
        n += 50
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)


def _compare(fast: Callable[[], Any], main: Callable[[], Any]) -> tuple[float, float]:
    """(fast rate, main rate), pooled over alternating rounds."""
    fast_rates, main_rates = [], []
    for _ in range(ROUNDS):
        fast_rates.append(_rate(fast, ROUND_S))
        main_rates.append(_rate(main, ROUND_S))
    return sum(fast_rates) / ROUNDS, sum(main_rates) / ROUNDS


def _decide_pair() -> tuple[Callable[[], Any], Callable[[], Any]]:
    policy = compile_policy(
        PolicyDoc(
            rules=(
                Rule(Effect.ALLOW, "read_file", Source.MANAGED),
                Rule(Effect.ALLOW, "run_bash(git status)", Source.MANAGED),
                Rule(Effect.ALLOW, "run_bash(git log *)", Source.MANAGED),
                Rule(Effect.DENY, "read_file(**/.env)", Source.MANAGED),
                Rule(Effect.DENY, "run_bash(rm *)", Source.MANAGED),
                Rule(Effect.ASK, "file_write", Source.MANAGED),
            )
        ),
        cwd="/w",
    )
    # The common ALLOWs: reads, allowed git commands, undeclared-trait-free tools (P8).
    calls = [
        DecisionRequest("read_file", {"file_path": f"src/m{i}.py"}, Mode.DEFAULT) for i in range(20)
    ] + [
        DecisionRequest(
            "run_bash",
            {"command": "git log --oneline -5"},
            Mode.DEFAULT,
            facts=Facts(sub_commands=("git log --oneline -5",), read_only=True),
        ),
        DecisionRequest("glob_files", {"pattern": "src/**/*.py"}, Mode.DEFAULT),
    ]
    for req in calls:
        assert engine.decide(policy, req).verdict is Effect.ALLOW

    def main_path(p: Any, req: Any, content: Any, allow: Any) -> Any:
        return engine._finish(p, req, content, engine._collect(req, [], [], [], allow))

    fast_fn = engine._decide_allow_only
    state = {"i": 0}

    def run(path: Callable[..., Any]) -> Callable[[], Any]:
        def once() -> Any:
            engine._decide_allow_only = path
            try:
                state["i"] = (state["i"] + 1) % len(calls)
                return engine.decide(policy, calls[state["i"]])
            finally:
                engine._decide_allow_only = fast_fn

        return once

    return run(fast_fn), run(main_path)


def run() -> list[dict[str, Any]]:
    """The figures (no target but "ratio > 1": each is kept or removed on its ratio)."""
    out = []

    def add(fid: str, name: str, pair: tuple[Callable[[], Any], Callable[[], Any]]) -> None:
        fast, main = _compare(*pair)
        out.append(
            figure(
                fid,
                name,
                fast,
                "calls/s",
                baseline=main,
                ratio=fast / main,
                target="> 1 (the fast path is kept only if it is faster)",
            )
        )

    add("FAST-1", "decide: ALLOW-only fast path vs the main path", _decide_pair())

    args = struct_pb2.Struct()
    args.update({"file_path": "src/app.py", "content": "x" * 200, "append": False})
    add(
        "FAST-2",
        "Decide arguments: flat Struct read vs json_format",
        (lambda: convert.struct_to_dict(args), lambda: json_format.MessageToDict(args)),
    )

    rule = Rule(Effect.ALLOW, "read_file(src/**)", Source.MANAGED, "reads are fine")
    add(
        "FAST-3",
        "Decide response: cached policy rule message vs building it",
        (lambda: convert._rule_pb_cached(rule), lambda: convert.rule_to_pb(rule)),
    )

    flat = {"file_path": "src/app.py", "content": "hello world " * 20, "append": False}
    add(
        "FAST-4",
        "grant: canonical JSON of flat arguments, direct vs encoder",
        (
            lambda: grant.canonical_json(flat),
            lambda: grant._dumps(grant._canonical_value(flat)),
        ),
    )

    claims: dict[str, Any] = {
        "session_id": "ses-0123456789abcdef",
        "call_id": "call-0123456789",
        "tool_name": "read_file",
        "args_digest": "ab" * 32,
        "findings": "cd" * 32,
        "settle": {"by": "rule", "rule": "read_file(src/**)", "source": "managed"},
        "exp": 1_767_000_000.123,
        "nonce": "ef" * 16,
        "kid": "0123456789abcdef",
    }

    def claims_main() -> bytes:
        """The same bytes through the encoder: the claims dict, its settlement checked."""
        return grant._dumps(
            {
                "args": claims["args_digest"],
                "cid": claims["call_id"],
                "exp": claims["exp"],
                "insp": claims["findings"],
                "kid": claims["kid"],
                "nonce": claims["nonce"],
                "settle": grant._check_settle(claims["settle"]),
                "sid": claims["session_id"],
                "tool": claims["tool_name"],
                "v": grant.CLAIMS_VERSION,
            }
        )

    assert grant.claims_payload(**claims) == claims_main()
    add(
        "FAST-5",
        "grant: signed claims written directly vs encoder",
        (lambda: grant.claims_payload(**claims), claims_main),
    )

    # A run_bash inspection: one tool rule, two sub-commands (a read's has neither).
    rules = [grant.Finding("ask", False, "writes outside the working directory")]
    findings: dict[str, Any] = {
        "read_only": False,
        "inside_working_dir": True,
        "sub_commands": ["git status", "tee /tmp/out"],
    }
    assert grant.findings_json(rules, **findings) == grant._dumps(
        grant._findings_object(rules, **findings)
    )
    add(
        "FAST-6",
        "grant: findings JSON written directly vs encoder",
        (
            lambda: grant.findings_json(rules, **findings),
            lambda: grant._dumps(grant._findings_object(rules, **findings)),
        ),
    )
    bare: dict[str, Any] = {"read_only": True, "inside_working_dir": True, "sub_commands": ()}
    add(
        "FAST-7",
        "grant: digest of findings without rules or sub-commands, looked up vs hashed",
        (
            lambda: grant.findings_digest((), **bare),
            lambda: grant._digest_of_findings((), True, True, ()),
        ),
    )
    return out
