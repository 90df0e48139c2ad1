"""Shared plumbing for the CLI groups that talk to the decision service."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from stockade.cli._connect import add_tls_args, rpc_error_text, tls_from_args
from stockade.client.base import sync_channel
from stockade.v1 import decision_service_pb2_grpc as d_grpc

DEFAULT_ADDR = "127.0.0.1:50051"
T = TypeVar("T")


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    """``--addr`` and ``--token`` (defaults from STOCKADE_DECISION_ADDR / STOCKADE_ADMIN_TOKEN)."""
    parser.add_argument(
        "--addr",
        default=os.environ.get("STOCKADE_DECISION_ADDR", DEFAULT_ADDR),
        help=f"decision service address (default {DEFAULT_ADDR})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("STOCKADE_ADMIN_TOKEN", ""),
        help="admin bearer token (default: $STOCKADE_ADMIN_TOKEN)",
    )
    add_tls_args(parser)


def metadata(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """The authorization metadata for admin RPCs."""
    return (("authorization", f"Bearer {args.token}"),) if args.token else ()


def call(args: argparse.Namespace, fn: Callable[[d_grpc.DecisionServiceStub], T]) -> T | None:
    """Run ``fn`` with a stub; print a gRPC error and return None on failure."""
    tls = tls_from_args(args)
    with sync_channel(args.addr, tls=tls) as channel:
        try:
            return fn(d_grpc.DecisionServiceStub(channel))
        except grpc.RpcError as err:
            text = rpc_error_text(err, tls=tls is not None, address=args.addr)
            print(f"error: {text}", file=sys.stderr)
            return None


def to_json(msg: Message) -> dict[str, Any]:
    """A message as plain JSON (proto field names)."""
    out: dict[str, Any] = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return out


def emit(msg: Message) -> None:
    """Print a message as one JSON line."""
    print(json.dumps(to_json(msg), ensure_ascii=False), flush=True)
