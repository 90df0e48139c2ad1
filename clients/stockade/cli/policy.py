"""``stockade policy check|lint|replay``: policy tools that need no server (DEC-14, DEC-15).

``check`` decides one call against a policy file with the same engine the decision
service runs and, for the executor's tools, the same executor analysis as Inspect.
It prints the verdict and exits 0 whatever the verdict (2 on usage errors). ``replay``
reads the audit service's trail and lists the recorded calls whose verdict a candidate
policy would change.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from stockade.cli._connect import add_tls_args, tls_from_args
from stockade.client.base import TlsConfig
from stockade.decision.engine import Decision, DecisionRequest, Facts, decide
from stockade.decision.lint import lint_rules
from stockade.decision.modes import Mode, parse_mode
from stockade.decision.policy import compile_policy, load_policy, parse_policy_text, policy_format
from stockade.decision.rules import Effect, Rule, Source
from stockade.errors import StockadeError

USAGE_ERROR = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``policy check``, ``policy lint``, ``policy replay`` and ``policy test``."""
    policy = subparsers.add_parser("policy", help="check, lint and replay permission policies")
    sub = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    sub.required = True

    check = sub.add_parser("check", help="decide one tool call against a policy file, offline")
    check.add_argument("--policy", required=True, help="TOML or YAML policy file")
    check.add_argument("--tool", required=True, help="tool name, e.g. run_bash")
    check.add_argument("--args", required=True, help='arguments as JSON, e.g. \'{"command":"ls"}\'')
    check.add_argument("--mode", help="permission mode (default: the policy's mode)")
    check.add_argument("--subagent", action="store_true", help="the call comes from a subagent")
    check.add_argument(
        "--root", action="append", default=[], help="an allowed root directory (repeatable)"
    )
    check.add_argument("--cwd", help="working directory (default: the current one)")
    check.add_argument(
        "--denied-read",
        action="append",
        default=[],
        metavar="GLOB",
        help="the executor's own DENIED_READ_GLOBS (added to the policy's); repeatable",
    )
    check.add_argument(
        "--network", action="store_true", help="the executor has the network enabled"
    )
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(func=run_check)

    lint = sub.add_parser("lint", help="report rules that can never take effect")
    lint.add_argument("file", help="TOML or YAML policy file")
    lint.add_argument("--json", action="store_true", help="print JSON")
    lint.add_argument(
        "--tool",
        action="append",
        default=[],
        metavar="NAME",
        help="a tool a tool provider declares (repeatable; the built-in, executor and "
        "example tools are known)",
    )
    lint.set_defaults(func=run_lint)

    replay = sub.add_parser(
        "replay", help="re-decide the calls recorded by the audit service under a new policy"
    )
    replay.add_argument("--policy", required=True, help="the candidate policy file")
    replay.add_argument(
        "--addr",
        default=os.environ.get("STOCKADE_AUDIT_ADDR", "127.0.0.1:50053"),
        help="audit service address (default: $STOCKADE_AUDIT_ADDR or 127.0.0.1:50053)",
    )
    replay.add_argument("--session", default="", help="only this session's calls")
    replay.add_argument("--mode", help="permission mode to replay in (default: the policy's)")
    replay.add_argument("--root", action="append", default=[], help="an allowed root (repeatable)")
    replay.add_argument("--cwd", help="working directory (default: the current one)")
    replay.add_argument("--json", action="store_true", help="print one JSON object")
    add_tls_args(replay)
    replay.set_defaults(func=run_replay)

    from stockade.cli import verdicts

    verdicts.register(sub)


def _usage(message: str) -> int:
    print(f"stockade policy: error: {message}", file=sys.stderr)
    return USAGE_ERROR


def _rule_json(rule: Rule) -> dict[str, Any]:
    return {"pattern": rule.pattern, "effect": rule.effect.value, "source": rule.source.value}


def decision_json(d: Decision, facts: Facts) -> dict[str, Any]:
    """The stable JSON shape scripts depend on (plus extra detail fields)."""
    return {
        "verdict": d.verdict.value,
        "reason": d.reason,
        "rule": None if d.winning_rule.source is Source.DEFAULT else _rule_json(d.winning_rule),
        "conflicts": [{**_rule_json(c.rule), "note": c.note} for c in d.conflicts],
        "step": d.step,
        "mode": d.mode.value,
        "policy_version": d.policy_version,
        "risk": d.explanation.risk.value,
        "explanation": d.explanation.summary,
        "tool_rules": [
            {**_rule_json(r), "reason": r.reason, "bypass_immune": r.bypass_immune}
            for r in facts.tool_rules
        ],
        "sub_commands": list(facts.sub_commands or ()),
    }


def executor_facts(
    tool: str,
    args: Mapping[str, Any],
    *,
    roots: list[str],
    cwd: str,
    policy_files: Sequence[str] = (),
    denied_read: Sequence[str] = (),
    network: bool = False,
) -> Facts | None:
    """The executor's Inspect findings for its own tools, turned into facts exactly as the
    ``Decide`` RPC turns the inspection it receives (one path, DEC-15); None for other
    tools. The policy files' protected reads bind the inspection as they bind a running
    executor that mounts the same files (DEC-16); ``denied_read`` and ``network`` are the
    executor's own settings (``DENIED_READ_GLOBS`` adds to the policy's denials). The
    sandbox is built as ``bash-check`` and ``path-check`` build it (checks.check_sandbox),
    so the three judge alike."""
    from google.protobuf import struct_pb2

    from stockade.cli.checks import check_sandbox
    from stockade.decision.facts import facts_from_inspection
    from stockade.executor.convert import inspection_to_proto
    from stockade.executor.inspect import EXECUTOR_TOOLS, inspect_call
    from stockade.executor.paths import Root
    from stockade.v1 import common_pb2

    if tool not in EXECUTOR_TOOLS:
        return None
    sandbox, ask = check_sandbox(
        [Root(os.path.realpath(r), True) for r in roots or [cwd]],
        cwd,
        denied=tuple(denied_read),
        policy_files=tuple(policy_files),
    )
    ins = inspect_call(tool, args, sandbox=sandbox, network_enabled=network, ask_read_globs=ask)
    arguments = struct_pb2.Struct()
    arguments.update(dict(args))
    call = common_pb2.ToolCall(tool_name=tool, arguments=arguments)
    return facts_from_inspection(tool, inspection_to_proto(ins, call))


def run_check(args: argparse.Namespace) -> int:
    """Decide one call offline and print the result."""
    try:
        call_args = json.loads(args.args)
    except json.JSONDecodeError as exc:
        return _usage(f"--args is not valid JSON: {exc}")
    if not isinstance(call_args, dict):
        return _usage("--args must be a JSON object")
    cwd = os.path.realpath(args.cwd or os.getcwd())
    try:
        mode: Mode | None = parse_mode(args.mode) if args.mode else None
        policy = load_policy(args.policy, {}, cwd=cwd, mode_override=mode)
        facts = (
            executor_facts(
                args.tool,
                call_args,
                roots=args.root,
                cwd=cwd,
                policy_files=[args.policy],
                denied_read=args.denied_read,
                network=args.network,
            )
            or Facts()
        )
    except StockadeError as exc:
        return _usage(exc.message)
    warn_never_effective(policy.rules)
    d = decide(
        policy,
        DecisionRequest(
            tool_name=args.tool,
            arguments=call_args,
            mode=policy.mode,
            from_subagent=args.subagent,
            facts=facts,
        ),
    )
    out = decision_json(d, facts)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    print(f"{d.verdict.value.upper()}: {d.reason}")
    rule = out["rule"]
    print(f"  rule: {rule['effect']} {rule['pattern']} [{rule['source']}]" if rule else "  rule: -")
    print(f"  step: {d.step}   mode: {d.mode.value}   policy: {d.policy_version}")
    print(f"  risk: {d.explanation.risk.value} — {d.explanation.summary}")
    for c in d.conflicts:
        print(
            f"  overrode: {c.rule.effect.value} {c.rule.pattern} [{c.rule.source.value}]: {c.note}"
        )
    return 0


def warn_never_effective(rules: Sequence[Rule]) -> None:
    """``policy check`` warns (stderr) about the rules ``policy lint`` reports."""
    for f in lint_rules(rules):
        print(
            f"warning: {f.rule.effect.value} {f.rule.pattern} never takes effect: {f.reason}"
            f" (fix: {f.fix})",
            file=sys.stderr,
        )


def run_lint(args: argparse.Namespace) -> int:
    """Print shadowed rules; exit 1 when there are any, 2 when the file is invalid."""
    from pathlib import Path

    path = Path(args.file)
    try:
        doc = parse_policy_text(path.read_text(encoding="utf-8"), policy_format(path))
    except OSError as exc:
        return _usage(f"cannot read {path}: {exc.strerror}")
    except StockadeError as exc:
        return _usage(exc.message)
    findings = lint_rules(doc.rules, known_tools=args.tool)
    if args.json:
        print(
            json.dumps(
                {
                    "policy_version": compile_policy(doc).version,
                    "findings": [
                        {
                            "rule": _rule_json(f.rule),
                            "kind": f.kind,
                            "shadowed_by": _rule_json(f.shadowed_by) if f.shadowed_by else None,
                            "reason": f.reason,
                            "fix": f.fix,
                        }
                        for f in findings
                    ],
                },
                ensure_ascii=False,
            )
        )
    else:
        for f in findings:
            print(f"{f.rule.effect.value} {f.rule.pattern}: {f.reason}\n  fix: {f.fix}")
        if not findings:
            print(f"{path}: every rule can take effect")
    return 1 if findings else 0


def run_replay(args: argparse.Namespace) -> int:
    """Re-decide the audit trail's calls under ``--policy``; list every verdict that changes."""
    from stockade.decision.replay import LIMITATIONS, replay

    cwd = os.path.realpath(args.cwd or os.getcwd())
    try:
        mode: Mode | None = parse_mode(args.mode) if args.mode else None
        policy = load_policy(args.policy, {}, cwd=cwd, mode_override=mode)
    except StockadeError as exc:
        return _usage(exc.message)
    try:
        records = _recorded_calls(args.addr, args.session, tls_from_args(args))
    except Exception as exc:
        print(f"stockade policy replay: cannot read the audit trail at {args.addr}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 1

    def facts(tool: str, call_args: Mapping[str, Any]) -> Facts:
        return (
            executor_facts(tool, call_args, roots=args.root, cwd=cwd, policy_files=[args.policy])
            or Facts()
        )

    report = replay(policy, records, facts=facts)
    changes = [
        {
            "session_id": c.call.session_id,
            "call_id": c.call.call_id,
            "tool": c.call.tool_name,
            "arguments": dict(c.call.arguments),
            "old_verdict": c.call.verdict.value,
            "old_rule": c.call.matched_rule,
            "new_verdict": c.new_verdict.value,
            "new_rule": c.new_rule,
            "new_reason": c.new_reason,
            "uncertain": c.uncertain or None,
        }
        for c in report.changes
    ]
    if args.json:
        out = {
            "policy_version": report.policy_version,
            "replayed": report.replayed,
            "skipped": report.skipped,
            "changes": changes,
            "note": LIMITATIONS,
        }
        print(json.dumps(out, ensure_ascii=False))
        return 0
    for c in changes:
        print(
            f"{c['session_id']}/{c['call_id']} {c['tool']} {c['arguments']}: "
            f"{c['old_verdict']} ({c['old_rule']}) -> {c['new_verdict']} ({c['new_rule']})"
            + (f"\n  uncertain: {c['uncertain']}" if c["uncertain"] else "")
        )
    print(
        f"{len(changes)} of {report.replayed} replayed calls would change under "
        f"{report.policy_version} ({report.skipped} skipped); note: {LIMITATIONS}"
    )
    return 0


def _recorded_calls(addr: str, session_id: str, tls: TlsConfig | None = None) -> list[Any]:
    """Every decided tool call in the audit trail, oldest first."""
    from google.protobuf import json_format

    from stockade.client.base import sync_channel
    from stockade.decision.convert import SOURCE_TO_PB
    from stockade.decision.replay import RecordedCall
    from stockade.v1 import audit_service_pb2 as au_pb2
    from stockade.v1 import audit_service_pb2_grpc as au_grpc
    from stockade.v1 import common_pb2 as c_pb2

    verdicts = {
        c_pb2.VERDICT_ALLOW: Effect.ALLOW,
        c_pb2.VERDICT_ASK: Effect.ASK,
        c_pb2.VERDICT_DENY: Effect.DENY,
    }
    sources = {pb: source for source, pb in SOURCE_TO_PB.items()}
    out: list[RecordedCall] = []
    with sync_channel(addr, tls=tls) as channel:
        stub = au_grpc.AuditServiceStub(channel)
        token = ""
        while True:
            resp = stub.Query(
                au_pb2.QueryRequest(session_id=session_id, page_size=1000, page_token=token),
                timeout=30,
            )
            for rec in resp.records:
                e = rec.event
                verdict = verdicts.get(e.verdict)
                if (
                    verdict is None
                    or e.tool_name == "session"
                    or e.status == au_pb2.AUDIT_STATUS_DECIDED  # a decision record, not a call
                ):
                    continue
                out.append(
                    RecordedCall(
                        e.session_id,
                        e.call_id,
                        e.tool_name,
                        json_format.MessageToDict(e.arguments),
                        verdict,
                        e.winning_rule.pattern,
                        e.agent_name,
                        sources.get(e.winning_rule.source),
                    )  # fmt: skip
                )
            token = resp.next_page_token
            if not token:
                break
    out.reverse()  # Query pages newest first
    return out
