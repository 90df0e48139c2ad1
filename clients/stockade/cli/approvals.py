"""``stockade approvals watch|resolve``: see pending approvals as they come and answer them."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf import json_format, timestamp_pb2

from stockade.cli._connect import rpc_error_text, tls_from_args
from stockade.cli._decision_rpc import add_connection_args, call, emit, metadata
from stockade.cli._render import enum_word, write_message
from stockade.client.base import sync_channel
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc

RESOLUTIONS = {
    "allow": d_pb2.RESOLUTION_ALLOW_ONCE,
    "allow-once": d_pb2.RESOLUTION_ALLOW_ONCE,
    "deny": d_pb2.RESOLUTION_DENY,
    "always": d_pb2.RESOLUTION_ALWAYS_ALLOW,
    "always-allow": d_pb2.RESOLUTION_ALWAYS_ALLOW,
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``approvals`` command group."""
    approvals = subparsers.add_parser("approvals", help="watch and answer approval requests")
    sub = approvals.add_subparsers(dest="approvals_command", metavar="SUBCOMMAND")
    sub.required = True
    watch = sub.add_parser("watch", help="stream pending approvals and their answers")
    add_connection_args(watch)
    watch.add_argument("--session", default="", help="only this session's approvals")
    watch.add_argument("--json", action="store_true", help="one JSON object per line")
    watch.add_argument("--count", type=int, default=0, help="stop after N updates (0: never)")
    watch.set_defaults(func=_watch)
    resolve = sub.add_parser("resolve", help="answer an approval (admin)")
    add_connection_args(resolve)
    resolve.add_argument("approval_id")
    resolve.add_argument("answer", choices=sorted(RESOLUTIONS))
    resolve.add_argument("--uses", type=int, default=0, help="always: number of uses (0: any)")
    resolve.add_argument("--until", help="always: ISO-8601 time the grant ends")
    resolve.add_argument("--resolver", default="cli", help="who answers (for the audit trail)")
    resolve.add_argument("--reason", default="")
    resolve.add_argument("--json", action="store_true", help="print one JSON object")
    resolve.set_defaults(func=_resolve)


def _watch(a: argparse.Namespace) -> int:
    seen = [0]
    tls = tls_from_args(a)
    with sync_channel(a.addr, tls=tls) as channel:
        stub = d_grpc.DecisionServiceStub(channel)
        while True:
            stream = stub.WatchApprovals(d_pb2.WatchApprovalsRequest(session_id=a.session))
            code = _watch_stream(a, stream, seen)
            if code != _FELL_BEHIND:
                return code
            # Dropped for falling behind: a new stream starts with the current backlog.
            print("note: the watch fell behind and was dropped; reconnecting", file=sys.stderr)


_FELL_BEHIND = -1


def _watch_stream(a: argparse.Namespace, stream: Any, seen: list[int]) -> int:
    """Print one stream's updates; an exit code, or ``_FELL_BEHIND`` to reconnect."""
    tls = tls_from_args(a)
    try:
        for update in stream:
            ap = update.approval
            if a.json:
                emit(ap)
            else:
                state = enum_word(d_pb2.ApprovalState.DESCRIPTOR, ap.state).upper()
                risk = enum_word(c_pb2.RiskLevel.DESCRIPTOR, ap.explanation.risk)
                args = json.dumps(json_format.MessageToDict(ap.call.arguments))
                once = (
                    "\n  (asks every time: 'always' would allow this call once)"
                    if ap.state == d_pb2.APPROVAL_STATE_PENDING and not ap.always_allow_applies
                    else ""
                )
                print(
                    f"[{state}] {ap.approval_id} session={ap.session_id} "
                    f"{ap.call.tool_name} {args}\n  {ap.reason}; "
                    f"risk {risk}: {ap.explanation.summary}{once}",
                    flush=True,
                )
            seen[0] += 1
            if a.count and seen[0] >= a.count:
                stream.cancel()
                return 0
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.CANCELLED:
            return 0
        if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "approval_watch_queue" in (
            err.details() or ""
        ):
            return _FELL_BEHIND
        text = rpc_error_text(err, tls=tls is not None, address=a.addr)
        print(f"error: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _resolve(a: argparse.Namespace) -> int:
    scope = None
    if a.uses or a.until:
        if a.uses < 0:
            print("error: --uses must not be negative", file=sys.stderr)
            return 2
        scope = d_pb2.GrantScope(remaining_uses=a.uses)
        if a.until:
            try:
                when = datetime.fromisoformat(a.until)
            except ValueError:
                print(f"error: --until {a.until!r} is not an ISO-8601 time", file=sys.stderr)
                return 2
            ts = timestamp_pb2.Timestamp()
            ts.FromDatetime(when if when.tzinfo else when.replace(tzinfo=UTC))
            scope.expire_time.CopyFrom(ts)
    req = d_pb2.ResolveApprovalRequest(
        approval_id=a.approval_id,
        resolution=RESOLUTIONS[a.answer],
        scope=scope,
        resolver=a.resolver,
        reason=a.reason,
    )
    resp = call(a, lambda s: s.ResolveApproval(req, metadata=metadata(a)))
    if resp is None:
        return 1
    write_message(resp, sys.stdout, as_json=a.json)
    return 0
