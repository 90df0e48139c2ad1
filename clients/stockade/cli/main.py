"""``stockade``: serve the services, run the demo, and check calls offline.

Each command group lives in its own module with a ``register(subparsers)`` function;
this module only assembles them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stockade.cli import approvals, audit, checks, demo, explain, policy, serve, session

GROUPS = [serve, demo, checks, policy, explain, session, approvals, audit]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = argparse.ArgumentParser(
        prog="stockade",
        description=(
            "Stockade: a permission and safety control plane for LLM agents that call tools."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stockade`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
