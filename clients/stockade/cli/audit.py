"""``stockade audit tail|query|verify|metrics``: read the audit trail from the command line.

``query`` prints a table (newest first) or, with ``--json``, a JSON array; ``tail``
prints rows as they are stored (JSON lines with ``--json``) until interrupted;
``verify`` checks the hash chain and exits 1 naming the first broken link; ``metrics``
prints a session's snapshot.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from google.protobuf.json_format import MessageToDict

from stockade.cli._connect import add_tls_args, rpc_error_text, tls_from_args
from stockade.client.audit import SyncAuditClient
from stockade.client.errors import ServiceError
from stockade.v1 import audit_service_pb2 as a_pb2
from stockade.v1.agent_service_pb2 import TerminationReason

DEFAULT_ADDR = "127.0.0.1:50053"
_STATUSES = ("OK", "FAIL", "DENIED", "CANCELLED", "SESSION_STOP", "UNKNOWN")
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``audit`` command group."""
    audit = subparsers.add_parser("audit", help="read and verify the audit trail")
    commands = audit.add_subparsers(dest="audit_command", required=True, metavar="COMMAND")

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--addr",
            default=os.environ.get("STOCKADE_AUDIT_ADDR", DEFAULT_ADDR),
            help=f"audit service address (default $STOCKADE_AUDIT_ADDR or {DEFAULT_ADDR})",
        )
        add_tls_args(parser)

    tail = commands.add_parser("tail", help="print rows as they are stored")
    common(tail)
    tail.add_argument("--session", default="", help="only this session")
    tail.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    tail.add_argument("--count", type=_positive, help="stop after this many rows")
    tail.add_argument(
        "--after", type=_positive, default=0, help="start after this sequence (default: new rows)"
    )
    tail.set_defaults(func=_tail)

    query = commands.add_parser("query", help="print stored rows, newest first")
    common(query)
    query.add_argument("--session", default="", help="only this session")
    query.add_argument("--tool", default="", help="only this tool")
    query.add_argument("--status", default="", choices=_STATUSES, help="only this status")
    query.add_argument("--agent", default="", help="only this agent (lead or a subagent)")
    query.add_argument("--since", type=_when, help="from this time (ISO 8601, or 15m/2h/3d ago)")
    query.add_argument("--until", type=_when, help="before this time (same forms)")
    query.add_argument("--limit", type=_positive, default=100, help="most rows to print")
    query.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    query.set_defaults(func=_query)

    verify = commands.add_parser("verify", help="check the hash chain (exit 1 if broken)")
    common(verify)
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    offline = verify.add_mutually_exclusive_group()
    offline.add_argument(
        "--db", type=Path, help="check this audit.db file offline instead of asking the service"
    )
    offline.add_argument(
        "--dsn",
        help="check every chain of this PostgreSQL audit store (postgresql://…) offline",
    )
    verify.add_argument(
        "--heads",
        type=Path,
        help="with --db/--dsn: also check the signed chain heads in this log file",
    )
    verify.add_argument(
        "--head-public-key", type=Path, help="the public key (PEM) the heads are signed with"
    )
    verify.set_defaults(func=_verify)

    metrics = commands.add_parser("metrics", help="a session's metrics snapshot")
    common(metrics)
    metrics.add_argument("--session", required=True, help="the session")
    metrics.add_argument("--json", action="store_true", help="print JSON")
    metrics.set_defaults(func=_metrics)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _when(text: str, *, now: float | None = None) -> datetime:
    """An absolute time from ISO 8601 or a relative ``<n><s|m|h|d>`` (that long ago)."""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative:
        seconds = float(relative.group(1)) * _UNIT_S[relative.group(2)]
        return datetime.fromtimestamp((time.time() if now is None else now) - seconds, UTC)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither ISO 8601 nor a duration like 15m, 2h, 3d"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _record_dict(record: a_pb2.AuditRecord) -> dict[str, Any]:
    return MessageToDict(record, preserving_proto_field_name=True)


_COLUMNS = ("SEQ", "TIME", "SESSION", "STEP", "AGENT", "TOOL", "STATUS", "MS", "VERDICT", "RULE")


def _row(record: a_pb2.AuditRecord) -> list[str]:
    event = record.event
    stamp = datetime.fromtimestamp(event.time.seconds + event.time.nanos / 1e9, UTC)
    verdict = a_pb2.AuditStatus.Name(event.status).removeprefix("AUDIT_STATUS_")
    rule = event.winning_rule.pattern
    if event.winning_rule.source:
        source = _source_name(event.winning_rule.source)
        rule = f"{rule} [{source}]" if rule else f"[{source}]"
    if event.termination:
        rule = TerminationReason.Name(event.termination).removeprefix("TERMINATION_REASON_")
    elif event.termination_reason:  # a reason this build has no name for
        rule = event.termination_reason
    return [
        str(record.sequence),
        stamp.strftime("%Y-%m-%d %H:%M:%S"),
        event.session_id,
        str(event.step),
        event.agent_name,
        event.tool_name,
        verdict,
        str(event.elapsed_ms),
        _verdict_name(event.verdict),
        rule,
    ]


def _source_name(number: int) -> str:
    from stockade.v1 import common_pb2

    return common_pb2.RuleSource.Name(number).removeprefix("RULE_SOURCE_")  # type: ignore[arg-type]


def _verdict_name(number: int) -> str:
    from stockade.v1 import common_pb2

    if not number:
        return ""
    return common_pb2.Verdict.Name(number).removeprefix("VERDICT_")  # type: ignore[arg-type]


def _print_table(rows: list[list[str]], out: TextIO, header: bool = True) -> None:
    table = [list(_COLUMNS), *rows] if header else rows
    widths = [max(len(r[i]) for r in [list(_COLUMNS), *rows]) for i in range(len(_COLUMNS))]
    for r in table:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
        out.write("\n")


#: Column widths of tail lines (rows arrive one by one, so widths cannot be measured).
_TAIL_WIDTHS = (6, 19, 16, 4, 10, 14, 12, 6, 5)


def _tail_line(cells: list[str]) -> str:
    fixed = "  ".join(
        cell.rjust(width) if i in (0, 3, 7) else cell.ljust(width)
        for i, (cell, width) in enumerate(zip(cells, _TAIL_WIDTHS, strict=False))
    )
    return f"{fixed}  {cells[-1]}".rstrip() + "\n"


def _fail(err: ServiceError, args: argparse.Namespace) -> int:
    tls = bool(getattr(args, "tls_cert", ""))
    sys.stderr.write(f"error: {rpc_error_text(err, tls=tls, address=args.addr)}\n")
    return 1


def _client(args: argparse.Namespace) -> SyncAuditClient:
    return SyncAuditClient(args.addr, tls=tls_from_args(args))


def _query(args: argparse.Namespace) -> int:
    request = a_pb2.QueryRequest(
        session_id=args.session,
        tool_name=args.tool,
        agent_name=args.agent,
        page_size=min(args.limit, 1000),
    )
    if args.status:
        request.status = a_pb2.AuditStatus.Value(f"AUDIT_STATUS_{args.status}")
    if args.since is not None:
        request.start_time.FromDatetime(args.since)
    if args.until is not None:
        request.end_time.FromDatetime(args.until)
    try:
        with _client(args) as client:
            records = list(client.query_all(request, limit=args.limit))
    except ServiceError as err:
        return _fail(err, args)
    if args.json:
        json.dump([_record_dict(r) for r in records], sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif records:
        _print_table([_row(r) for r in records], sys.stdout)
    else:
        sys.stdout.write("no rows\n")
    return 0


def _tail(args: argparse.Namespace) -> int:
    seen = 0
    try:
        with _client(args) as client:
            for record in client.tail(args.session, args.after):
                if args.json:
                    sys.stdout.write(json.dumps(_record_dict(record)) + "\n")
                else:
                    sys.stdout.write(_tail_line(_row(record)))
                sys.stdout.flush()
                seen += 1
                if args.count is not None and seen >= args.count:
                    break
    except KeyboardInterrupt:
        return 0
    except ServiceError as err:
        return _fail(err, args)
    return 0


def _verify(args: argparse.Namespace) -> int:
    if (args.heads is None) != (args.head_public_key is None):
        sys.stderr.write("error: --heads and --head-public-key go together\n")
        return 2
    if args.heads is not None and args.db is None and args.dsn is None:
        sys.stderr.write("error: --heads needs --db or --dsn (the store to compare with)\n")
        return 2
    if args.db is not None or args.dsn is not None:
        result = _verify_offline(args.db) if args.db is not None else _verify_dsn(args.dsn)
        if result is None:
            return 1
    else:
        try:
            with _client(args) as client:
                result = client.verify()
        except ServiceError as err:
            return _fail(err, args)
    if args.json:
        sys.stdout.write(
            json.dumps(MessageToDict(result, always_print_fields_with_no_presence=True)) + "\n"
        )
    elif result.ok:
        where = (
            f"head {result.head_sequence} {result.head_hash}"
            if result.head_hash
            else result.detail  # every chain of a PostgreSQL store, each with its rows
        )
        sys.stdout.write(f"ok: {result.rows_checked} rows, every link holds; {where}\n")
        if result.refused_rows or result.cut_rows:
            sys.stdout.write(
                f"note: {result.refused_rows} stand-in rows of refused events (the events"
                f" are in the producers' dead-letter files), {result.cut_rows} rows with a"
                " value cut to a marker\n"
            )
    else:
        sys.stdout.write(
            f"BROKEN at sequence {result.first_broken_sequence}: {result.detail}"
            f" ({result.rows_checked} rows checked)\n"
        )
        for chain in result.chains:
            if not chain.ok:
                reason = a_pb2.ChainBreakReason.Name(chain.reason).removeprefix(
                    "CHAIN_BREAK_REASON_"
                )
                row = f"row {chain.first_broken_sequence}, " if chain.first_broken_sequence else ""
                sys.stdout.write(
                    f"  chain {chain.chain_id!r}: {reason.lower()} at {row}"
                    f"position {chain.first_broken_position}\n"
                )
    heads_ok = True if args.heads is None else _check_heads(args)
    return 0 if result.ok and heads_ok else 1


def _check_heads(args: argparse.Namespace) -> bool:
    """Compare the exported signed heads with the store; print what differs."""
    import asyncio

    from stockade.audit.heads import parse_heads
    from stockade.audit.offline import (
        check_heads_postgres,
        check_heads_sqlite,
        load_head_public_key,
    )
    from stockade.errors import StockadeError

    try:
        key = load_head_public_key(args.head_public_key)
        with open(args.heads, encoding="utf-8", errors="replace") as fh:
            heads = parse_heads(fh)
        if args.db is not None:
            problems = asyncio.run(check_heads_sqlite(args.db, heads, key))
        else:
            problems = asyncio.run(check_heads_postgres(args.dsn, heads, key))
    except (StockadeError, OSError, ValueError, sqlite3.Error) as err:
        sys.stderr.write(f"error: {getattr(err, 'message', err)}\n")
        return False
    if not heads:
        sys.stdout.write("HEADS: no signed heads in the file\n")
        return False
    for problem in problems:
        sys.stdout.write(f"HEADS BROKEN: {problem}\n")
    if not problems:
        sys.stdout.write(f"signed heads: {len(heads)} checked, every one matches the store\n")
    return not problems


def _verify_dsn(dsn: str) -> a_pb2.VerifyLogResponse | None:
    """The check of every chain of a PostgreSQL store, as the service would answer it."""
    import asyncio

    from stockade.audit.convert import verify_to_proto
    from stockade.audit.offline import verify_postgres
    from stockade.errors import StockadeError

    try:
        found = asyncio.run(verify_postgres(dsn))
    except StockadeError as err:
        sys.stderr.write(f"error: {err.message}\n")
        return None
    return verify_to_proto(found)


def _verify_offline(db: Path) -> a_pb2.VerifyLogResponse | None:
    """The chain check of a database file, as the service would answer it."""
    from stockade.audit.convert import verify_to_proto
    from stockade.audit.verify import verify_file
    from stockade.errors import StockadeError

    try:
        found = verify_file(db)
    except (StockadeError, sqlite3.Error) as err:
        sys.stderr.write(f"error: {getattr(err, 'message', err)}\n")
        return None
    return verify_to_proto(found)


def _metrics(args: argparse.Namespace) -> int:
    try:
        with _client(args) as client:
            snapshot = client.session_metrics(args.session)
    except ServiceError as err:
        return _fail(err, args)
    if args.json:
        sys.stdout.write(
            json.dumps(
                MessageToDict(
                    snapshot,
                    preserving_proto_field_name=True,
                    always_print_fields_with_no_presence=True,
                )
            )
            + "\n"
        )
        return 0
    out = sys.stdout
    out.write(
        f"session {snapshot.session_id}: {snapshot.calls} calls, {snapshot.errors} errors,"
        f" {snapshot.denials} denials"
    )
    out.write(f", ended: {snapshot.termination_reason}\n" if snapshot.termination_reason else "\n")
    for tool in snapshot.tools:
        out.write(
            f"  {tool.tool_name}: {tool.calls} calls, {tool.errors} errors, {tool.denials} denials,"
            f" mean {tool.mean_elapsed_ms:.1f} ms, max {tool.max_elapsed_ms} ms\n"
        )
    return 0
