"""``stockade executor-state migrate``: prepare the executor's shared state on PostgreSQL.

The executor's own database role may only call the state functions (STORE-3), so it
cannot create them: an administrator (or a deployment job) runs this once per schema
version with a DSN that may create the ``stockade_executor`` schema, naming the role(s)
the executors log in as. It is idempotent: run it again after an upgrade.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``executor-state`` command group."""
    group = subparsers.add_parser(
        "executor-state", help="prepare the executor's shared state (PostgreSQL)"
    )
    commands = group.add_subparsers(dest="state_command", required=True, metavar="COMMAND")
    migrate = commands.add_parser(
        "migrate",
        help="create or upgrade the stockade_executor schema and let roles use it",
    )
    migrate.add_argument(
        "--dsn",
        default=os.environ.get("STOCKADE_EXECUTOR_STATE_ADMIN_DSN", ""),
        help="an administrator's postgresql:// DSN (default $STOCKADE_EXECUTOR_STATE_ADMIN_DSN)",
    )
    migrate.add_argument(
        "--role",
        action="append",
        default=[],
        help="a role the executors log in as: gets EXECUTE on the state functions and "
        "nothing else (repeatable)",
    )
    migrate.set_defaults(func=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    if not args.dsn.startswith(("postgresql://", "postgres://")):
        print("stockade: --dsn must be a postgresql:// DSN", file=sys.stderr)
        return 2
    from stockade.executor.pg_state import run_migrate

    try:
        version = asyncio.run(run_migrate(args.dsn, args.role))
    except Exception as exc:  # the reason, not a traceback: the DSN is redacted in it
        print(f"stockade: executor-state migrate failed: {exc}", file=sys.stderr)
        return 1
    roles = ", ".join(args.role) or "no role"
    print(f"executor state schema at version {version}; usable by {roles}")
    return 0
