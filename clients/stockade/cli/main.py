"""``stockade``: serve the services, run the demo, and check calls offline.

Each command group lives in its own module with a ``register(subparsers)`` function;
this module only assembles them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from stockade.cli import (
    approvals,
    audit,
    checks,
    demo,
    executor_state,
    explain,
    policy,
    serve,
    session,
)

GROUPS = [serve, demo, checks, policy, explain, session, approvals, audit, executor_state]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = argparse.ArgumentParser(
        prog="stockade",
        description=(
            "Stockade: a permission and safety control plane for LLM agents that call tools."
        ),
    )
    parser.add_argument("--version", action="version", version=f"stockade {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in GROUPS:
        group.register(sub)
    return parser


def _version() -> str:
    for dist in ("stockade", "stockade-client"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def _quiet_broken_pipe() -> int:
    """The reader of our output went away (``stockade audit tail | head``): stop quietly
    with the shell's SIGPIPE code, and keep Python from complaining at exit when it
    flushes stdout again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stockade`` console script."""
    from stockade.cli._connect import ConnectError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except ConnectError as exc:
        print(f"stockade: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
