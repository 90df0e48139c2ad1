"""PERF-1c side by side: Stockade's engine against Cedar (``cedarpy``) and OPA's Rego
(``regopy``, rego-cpp) on the same dense rules and the same calls, every verdict agreeing.

SPEC §9 (PERF-1c): "the aim is the flattest growth of the three and the lead kept". Before
issue #18 Stockade decided 2.4x as fast as Cedar with per-tool policy sets and 3.9x as fast
as rego-cpp at 1,000 dense rules, but its cost grew 12x from 10 to 1,000 rules (Cedar's
3.9x, Rego's 3.5x). This bench measures, in one run with alternating rounds:

- each engine's decisions/s at 1,000 dense rules (``bench_decision.dense_rules``: 400 path
  globs on read_file, 400 exact commands on run_bash, 200 substrings on fetch) over 1,000
  distinct calls, half hitting a rule and half missing them all;
- the same at 10 rules, so each engine's growth is a ratio too.

How each engine is given the rules (each the way its users would write them):

- Stockade: ``decide`` on the compiled policy, the whole pipeline (precedence, conflict
  log, explanation), with ``fetch`` declared so a fetch that no rule names is allowed.
- Cedar: one ``PolicySet`` per tool and effect, parsed once (``PolicySet.from_str``);
  one ``permit`` per rule, ``context.path like "*/secrets/7/*"`` for a path glob (Cedar's
  ``*`` crosses ``/``, and every path here is absolute and normalised, so ``**/x/**`` and
  ``*/x/*`` agree), ``context.command == "..."`` for an exact command, ``context.url like
  "*...*"`` for a substring. A call asks the tool's DENY set, then ASK, then ALLOW.
- Rego: one bundle per tool (``Interpreter.build``, compiled once) whose rules are data:
  ``glob.match(g, ["/"], input.path)`` over the path globs, ``contains`` over the
  substrings, and a set look-up for the exact commands; the ``verdict`` rule applies the
  same precedence. (Writing each rule as its own Rego clause was measured too: several
  times slower at 1,000 rules.)

A disagreement on any call fails the bench (no figure is better than a wrong one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import cedarpy
import regopy

from stockade.decision.engine import CompiledPolicy, DecisionRequest, decide
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import Effect, Rule, parse_pattern
from tests.bench.bench_decision import FETCH, dense_requests, dense_rules
from tests.bench.common import figure

ROUNDS = 5
"""Alternating rounds; each engine's figure is its best round (the least disturbed by other
work on this shared machine: caches, frequency)."""

LEAD_CEDAR = 2.4
LEAD_REGO = 3.9
"""Stockade's lead before #18 at 1,000 dense rules (decisions/s ratio), the lead to keep."""

Decider = Callable[[DecisionRequest], str]


def _content(rule: Rule) -> tuple[str, str]:
    parsed = parse_pattern(rule.pattern)
    assert parsed.tool is not None and parsed.content is not None, rule.pattern
    return parsed.tool, parsed.content


def _facts_ask(req: DecisionRequest) -> bool:
    """The executor's tool-level ASK on the call (run_bash here), which an ALLOW settles."""
    return any(r.effect is Effect.ASK for r in req.facts.tool_rules)


def stockade(rules: Sequence[Rule]) -> Decider:
    """Stockade's ``decide`` with the policy compiled once."""
    policy: CompiledPolicy = compile_policy(
        PolicyDoc(rules=tuple(rules), tools={"fetch": FETCH}), cwd="/w"
    )

    def run(req: DecisionRequest) -> str:
        return decide(policy, req).verdict.value

    return run


def _cedar_string(text: str, *, like: bool) -> str:
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    return out.replace("*", "\\*") if like else out


def _cedar_condition(tool: str, content: str) -> str:
    if tool == "read_file":
        # `**/secrets/7/**` on an absolute, normalised path: Cedar's `*` crosses `/`.
        assert content.startswith("**/") and content.endswith("/**"), content
        inner = _cedar_string(content[3:-3], like=True)
        return f'context.path like "*/{inner}/*"'
    if tool == "fetch":
        return f'context.url like "*{_cedar_string(content, like=True)}*"'
    assert tool == "run_bash" and "*" not in content, content
    return f'context.command == "{_cedar_string(content, like=False)}"'


def cedar(rules: Sequence[Rule]) -> Decider:
    """Cedar with one parsed policy set per tool and effect."""
    texts: dict[tuple[str, Effect], list[str]] = {}
    for rule in rules:
        tool, content = _content(rule)
        cond = _cedar_condition(tool, content)
        texts.setdefault((tool, rule.effect), []).append(
            f'permit(principal, action == Action::"{tool}", resource) when {{ {cond} }};'
        )
    sets = {key: cedarpy.PolicySet.from_str("\n".join(ps)) for key, ps in texts.items()}
    entities = cedarpy.Entities.from_json_str("[]")
    order = (Effect.DENY, Effect.ASK, Effect.ALLOW)

    def run(req: DecisionRequest) -> str:
        args = req.arguments
        request = {
            "principal": 'Agent::"agent"',
            "action": f'Action::"{req.tool_name}"',
            "resource": 'Tool::"tool"',
            "context": {
                "path": args.get("file_path", ""),
                "command": args.get("command", ""),
                "url": args.get("url", ""),
            },
        }
        for effect in order:
            policy_set = sets.get((req.tool_name, effect))
            if policy_set is None:
                continue
            if cedarpy.is_authorized(request, policy_set, entities).allowed:
                return effect.value
        return "ask" if _facts_ask(req) else "allow"

    return run


_REGO_TOOL = {
    "read_file": (
        "path",
        'deny if { some g in data.rules; glob.match(g, ["/"], input.path) }\n'
        'verdict := "deny" if deny\nelse := "allow"\n',
    ),
    "fetch": (
        "url",
        "ask if { some s in data.rules; contains(input.url, s) }\n"
        'verdict := "ask" if ask\nelse := "allow"\n',
    ),
    "run_bash": (
        "command",
        # The executor's tool-level ASK stands unless an ALLOW rule covers the command.
        'verdict := "allow" if data.rules[input.command]\nelse := "ask"\n',
    ),
}


def rego(rules: Sequence[Rule]) -> Decider:
    """rego-cpp with one compiled bundle per tool, its rules as data."""
    per_tool: dict[str, list[str]] = {}
    for rule in rules:
        tool, content = _content(rule)
        expected = {"read_file": Effect.DENY, "fetch": Effect.ASK, "run_bash": Effect.ALLOW}
        assert rule.effect is expected[tool], rule  # the module per tool encodes this
        per_tool.setdefault(tool, []).append(content)
    bundles: dict[str, tuple[regopy.Interpreter, Any, str]] = {}
    for tool, (field, body) in _REGO_TOOL.items():
        contents = per_tool.get(tool, [])
        data = {c: True for c in contents} if tool == "run_bash" else contents
        interpreter = regopy.Interpreter()
        interpreter.add_data({"rules": data})
        interpreter.add_module("stockade", "package stockade\nimport rego.v1\n" + body)
        bundles[tool] = (interpreter, interpreter.build(None, ["stockade/verdict"]), field)

    def run(req: DecisionRequest) -> str:
        interpreter, bundle, field = bundles[req.tool_name]
        key = "file_path" if field == "path" else field
        interpreter.set_input({field: req.arguments.get(key, "")})
        out = interpreter.query_bundle_entrypoint(bundle, "stockade/verdict")
        if not out.ok():
            raise AssertionError(f"rego failed: {out}")
        verdict = out.expressions()[0].value
        assert isinstance(verdict, str), out
        return verdict

    return run


def _rate(run: Decider, reqs: Sequence[DecisionRequest]) -> float:
    """Decisions per second of this process's CPU time (``process_time``: the native
    engines run in this thread, so their work is counted; time the machine gave to other
    work is not, which on this shared machine is most of the wall-clock time)."""
    t0 = time.process_time()
    for r in reqs:
        run(r)
    return len(reqs) / (time.process_time() - t0)


def rates(n_rules: int) -> dict[str, float]:
    """Each engine's best decisions/s over ``ROUNDS`` alternating rounds at ``n_rules``
    dense rules, after checking that every verdict agrees."""
    rules = dense_rules(n_rules)
    reqs = dense_requests(n_rules)
    engines = {"stockade": stockade(rules), "cedar": cedar(rules), "rego": rego(rules)}
    verdicts = {name: [run(r) for r in reqs] for name, run in engines.items()}
    for name in ("cedar", "rego"):
        wrong = [
            (r.tool_name, dict(r.arguments), mine, theirs)
            for r, mine, theirs in zip(reqs, verdicts["stockade"], verdicts[name], strict=True)
            if mine != theirs
        ]
        if wrong:
            raise AssertionError(f"{name} disagrees with Stockade on {len(wrong)}: {wrong[:3]}")
    best = dict.fromkeys(engines, 0.0)
    for i in range(ROUNDS):
        names = list(engines) if i % 2 == 0 else list(engines)[::-1]
        for name in names:
            best[name] = max(best[name], _rate(engines[name], reqs))
    return best


def run() -> list[dict[str, Any]]:
    """Stockade vs Cedar and vs Rego at 1,000 dense rules; each engine's growth 10 → 1,000."""
    small, large = rates(10), rates(1000)
    out = [
        figure(
            "PERF-1c-cedar",
            "in-process decisions/s at 1,000 dense rules, Stockade vs Cedar (cedarpy, a "
            "parsed policy set per tool and effect; 1,000 calls, every verdict agreeing)",
            large["stockade"],
            "decisions/s",
            baseline=large["cedar"],
            ratio=large["stockade"] / large["cedar"],
            target=f">= {LEAD_CEDAR} (the lead before #18)",
        ),
        figure(
            "PERF-1c-rego",
            "in-process decisions/s at 1,000 dense rules, Stockade vs OPA Rego (regopy, "
            "rego-cpp, a compiled bundle per tool; 1,000 calls, every verdict agreeing)",
            large["stockade"],
            "decisions/s",
            baseline=large["rego"],
            ratio=large["stockade"] / large["rego"],
            target=f">= {LEAD_REGO} (the lead before #18)",
        ),
    ]
    for name, label in (("cedar", "Cedar"), ("rego", "Rego")):
        out.append(
            figure(
                f"PERF-1c-{name}-growth",
                f"{label}'s decisions/s at 1,000 dense rules vs 10 (Stockade's is PERF-1c; "
                f"Stockade here: {large['stockade'] / small['stockade']:.2f})",
                large[name],
                "decisions/s",
                baseline=small[name],
                ratio=large[name] / small[name],
                target="reported (PERF-1c should be the flattest: the highest ratio)",
            )
        )
    return out


if __name__ == "__main__":
    for item in run():
        print(item)
