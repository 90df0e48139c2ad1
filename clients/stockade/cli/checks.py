"""``stockade bash-check`` and ``stockade path-check``: the executor's judgement, offline.

Both run the executor's own code (no server): ``bash-check`` the bash analysis behind
Inspect, ``path-check`` the path sandbox. Exit code 0 whatever the verdict, 2 on usage
errors. ``--batch FILE`` (``-`` for stdin) reads one JSON string per line and prints one
JSON object per line, in order, so a whole shell history is checked in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

from stockade.errors import StockadeError
from stockade.executor.globs import validate_globs
from stockade.executor.inspect import inspect_call
from stockade.executor.paths import PathSandbox, Root

__all__ = ["bash_check", "check_sandbox", "path_check", "register"]

USAGE_ERROR = 2


def validate_globs_problem(globs: tuple[str, ...]) -> str:
    """Why ``globs`` cannot be used (the executor settings' rule), or ""."""
    try:
        validate_globs(list(globs))
    except ValueError as exc:
        return str(exc)
    return ""


def check_sandbox(
    roots: list[Root],
    cwd: str,
    *,
    denied: tuple[str, ...] = (),
    policy_files: tuple[str, ...] = (),
) -> tuple[PathSandbox, tuple[str, ...]]:
    """The sandbox the executor would judge with, and the paths its policy asks about.

    The same union the executor builds at start (app.sandbox_with_globs): the policy
    files' read denials first, then the executor's own ``DENIED_READ_GLOBS`` (``denied``,
    which adds, never replaces). Raises ``InvalidArgument`` for a policy file that cannot
    be read or a glob the executor cannot use.
    """
    from stockade.contract.protected import load_protected_reads
    from stockade.errors import InvalidArgument

    reads = load_protected_reads(policy_files, cwd)
    deny = tuple(dict.fromkeys((*reads.deny, *denied)))
    problem = validate_globs_problem((*deny, *reads.ask))
    if problem:
        raise InvalidArgument(problem)
    # Stockade's own state, keys and configured files, as the executor adds them.
    from stockade.executor.own import own_paths
    from stockade.executor.paths import DEFAULT_PROTECTED_WRITES

    own = own_paths(
        os.environ.get("STOCKADE_EXECUTOR_STATE_DIR"), roots=tuple(r.path for r in roots)
    )
    deny = tuple(dict.fromkeys((*deny, *own.denied_read_globs())))
    protected = (*DEFAULT_PROTECTED_WRITES, *own.protected_write_globs())
    return (
        PathSandbox(roots, cwd, denied_read_globs=deny, protected_write_globs=protected),
        tuple(reads.ask),
    )


# --- bash-check ------------------------------------------------------------------------


def bash_check(
    command: str,
    sandbox: PathSandbox,
    *,
    network: bool,
    denied_read_globs: tuple[str, ...] = (),
    ask_read_globs: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The bash-check JSON object for one command."""
    try:
        inspection = inspect_call(
            "run_bash",
            {"command": command},
            sandbox=sandbox,
            network_enabled=network,
            denied_read_globs=denied_read_globs,
            ask_read_globs=ask_read_globs,
        )
    except StockadeError as exc:
        return {
            "verdict": "deny",
            "reasons": [exc.message],
            "commands": [],
            "risk": "high",
            "explanation": exc.message,
        }
    analysis = inspection.analysis
    reasons = [rule.reason for rule in inspection.rules]
    out: dict[str, Any] = {
        "verdict": inspection.verdict,
        "reasons": list(analysis.reasons) if analysis is not None else reasons,
        "commands": [c.name for c in analysis.commands] if analysis is not None else [],
        "risk": inspection.risk,
        "explanation": inspection.explanation,
        "read_only": inspection.read_only,
        "bypass_immune": any(rule.bypass_immune for rule in inspection.rules),
    }
    if analysis is not None:
        out.update(
            command_texts=[c.text for c in analysis.commands],
            paths_read=list(analysis.paths_read),
            paths_written=list(analysis.paths_written),
            needs_network=analysis.needs_network,
        )
    return out


def _bash_text(result: dict[str, Any], command: str) -> str:
    lines = [
        f"{result['verdict'].upper()}  (risk: {result['risk']})  {command}",
        f"  {result['explanation']}",
    ]
    if result.get("commands"):
        lines.append(f"  commands: {', '.join(result['commands'])}")
    lines.extend(f"  - {reason}" for reason in result.get("reasons", []))
    for key, label in (("paths_read", "reads"), ("paths_written", "writes")):
        if result.get(key):
            lines.append(f"  {label}: {', '.join(result[key])}")
    if result.get("needs_network"):
        lines.append("  needs the network")
    return "\n".join(lines)


def _run_bash_check(args: argparse.Namespace) -> int:
    cwd = os.path.abspath(args.cwd or os.getcwd())
    roots = [Root(os.path.abspath(r), True) for r in args.root] or [Root(cwd, True)]
    try:
        sandbox, ask = check_sandbox(
            roots, cwd, denied=tuple(args.denied_read), policy_files=tuple(args.policy)
        )
    except StockadeError as exc:
        args.parser.error(exc.message)
    denied = sandbox.denied_read_globs
    return _run(
        args,
        args.command,
        lambda item: bash_check(
            item, sandbox, network=args.network, denied_read_globs=denied, ask_read_globs=ask
        ),
        _bash_text,
        lambda reason: {
            "verdict": "deny",
            "reasons": [reason],
            "commands": [],
            "risk": "high",
            "explanation": reason,
        },
    )


# --- path-check ------------------------------------------------------------------------


def path_check(
    path: str, sandbox: PathSandbox, *, write: bool, ask_read_globs: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The path-check JSON object for one path: the sandbox's answer, and for a read the
    policy's protected reads as the executor's file tools judge them ("ask" when the
    policy asks about reading it)."""
    decision = sandbox.check(path, write=write)
    verdict = "allow" if decision.allowed else "deny"
    reason = decision.reason
    if decision.allowed and not write and ask_read_globs:
        asked = inspect_call(
            "read_file", {"file_path": path}, sandbox=sandbox, ask_read_globs=ask_read_globs
        )
        if asked.verdict != "allow":
            verdict, reason = asked.verdict, "; ".join(r.reason for r in asked.rules)
    return {
        "verdict": verdict,
        "resolved": decision.resolved,
        "reason": reason,
        "root": decision.root.path if decision.root else None,
        "writable": decision.root.writable if decision.root else False,
    }


def _path_text(result: dict[str, Any], path: str) -> str:
    resolved = result["resolved"] or "(not resolved)"
    return f"{result['verdict'].upper()}  {path}\n  resolved: {resolved}\n  {result['reason']}"


def _run_path_check(args: argparse.Namespace) -> int:
    roots = [Root(r, True) for r in args.root] + [Root(r, False) for r in args.read_only_root]
    if not roots:
        args.parser.error("give at least one --root or --read-only-root")
    cwd = args.cwd or os.getcwd()
    try:
        sandbox, ask = check_sandbox(
            roots, cwd, denied=tuple(args.denied_read), policy_files=tuple(args.policy)
        )
    except StockadeError as exc:
        args.parser.error(exc.message)
    return _run(
        args,
        args.path,
        lambda item: path_check(item, sandbox, write=args.write, ask_read_globs=ask),
        _path_text,
        lambda reason: {
            "verdict": "deny",
            "resolved": "",
            "reason": reason,
            "root": None,
            "writable": False,
        },
    )


# --- shared ----------------------------------------------------------------------------


def _batch_lines(source: str) -> Iterator[str]:
    stream: IO[str] = sys.stdin if source == "-" else open(source, encoding="utf-8")
    try:
        for line in stream:
            if line.strip():
                yield line
    finally:
        if stream is not sys.stdin:
            stream.close()


def _run(
    args: argparse.Namespace,
    positional: list[str] | str | None,
    check: Callable[[str], dict[str, Any]],
    text: Callable[[dict[str, Any], str], str],
    bad_line: Callable[[str], dict[str, Any]],
) -> int:
    """One item from the command line, or a batch: JSON string in, JSON object out."""
    item = " ".join(positional) if isinstance(positional, list) else positional
    if args.batch is not None and item:
        args.parser.error("give either an argument or --batch, not both")
    if args.batch is None:
        if not item:
            args.parser.error("nothing to check: give an argument or --batch FILE")
        assert item is not None
        result = check(item)
        print(json.dumps(result) if args.json else text(result, item))
        return 0
    try:
        lines = _batch_lines(args.batch)
        for line in lines:
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                value = None
            if not isinstance(value, str):
                print(json.dumps(bad_line("input line is not a JSON string")), flush=False)
                continue
            print(json.dumps(check(value)))
    except BrokenPipeError:
        raise  # the reader left (`| head`): main() ends quietly
    except OSError as exc:
        print(f"stockade: cannot read {args.batch}: {exc.strerror or exc}", file=sys.stderr)
        return USAGE_ERROR
    sys.stdout.flush()
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bash-check`` and ``path-check``."""
    bash = subparsers.add_parser(
        "bash-check",
        help="judge a bash command as the executor would (allow / ask / deny)",
        description=(
            "Judge a bash command as the executor would. 'allow': read-only, side-effect "
            "free and inside the roots; 'ask': legitimate with side effects; 'deny': "
            "destructive, privilege-escalating, shell-spawning, obfuscated, exfiltrating "
            "or unparseable. Exit code 0 whatever the verdict, 2 on usage errors."
        ),
    )
    bash.add_argument("--network", action="store_true", help="network is enabled")
    bash.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="DIR",
        help="an allowed (writable) root; repeatable; default: the working directory",
    )
    bash.add_argument("--cwd", metavar="DIR", help="working directory (default: current)")
    bash.add_argument(
        "--denied-read",
        action="append",
        default=[],
        metavar="GLOB",
        help="a path nothing may read, as the executor's DENIED_READ_GLOBS (e.g. '**/.env'); "
        "repeatable",
    )
    bash.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="a policy file the executor reads (its protected reads: denied and asked); repeatable",
    )
    bash.add_argument("--json", action="store_true", help="print one JSON object")
    bash.add_argument(
        "--batch",
        metavar="FILE",
        help="one JSON string per line (- for stdin); prints one JSON object per line",
    )
    bash.add_argument("command", nargs="*", help='the command, after "--"')
    bash.set_defaults(func=_run_bash_check, parser=bash)

    path = subparsers.add_parser(
        "path-check",
        help="judge a path as the executor's sandbox would (allow / deny)",
        description=(
            "Judge a path as the executor's path sandbox would. Exit code 0 whatever the "
            "verdict, 2 on usage errors."
        ),
    )
    path.add_argument(
        "--root", action="append", default=[], metavar="DIR", help="a writable root; repeatable"
    )
    path.add_argument(
        "--read-only-root",
        action="append",
        default=[],
        metavar="DIR",
        help="a read-only root; repeatable",
    )
    path.add_argument("--cwd", metavar="DIR", help="working directory (default: current)")
    path.add_argument("--write", action="store_true", help="judge a write, not a read")
    path.add_argument(
        "--denied-read",
        action="append",
        default=[],
        metavar="GLOB",
        help="a path nothing may read, as the executor's DENIED_READ_GLOBS; repeatable",
    )
    path.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="a policy file the executor reads (its protected reads); repeatable",
    )
    path.add_argument("--json", action="store_true", help="print one JSON object")
    path.add_argument(
        "--batch",
        metavar="FILE",
        help="one JSON string per line (- for stdin); prints one JSON object per line",
    )
    path.add_argument("path", nargs="?", help="the path to judge")
    path.set_defaults(func=_run_path_check, parser=path)
