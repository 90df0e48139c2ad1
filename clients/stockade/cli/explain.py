"""``stockade explain``: what a tool call does and how Stockade would treat it (DEC-15).

It prints the risk level and the one-sentence explanation an approver would see
(DEC-10), the executor's own findings (tool-level rules, bash sub-commands) and, with
``--policy``, the decision that policy gives with its winning rule and conflicts. It is
``stockade policy check`` with the policy optional: without one, only the executor's
findings and the built-in defaults decide.
"""

from __future__ import annotations

import argparse

from stockade.cli.policy import run_check


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``explain``."""
    p = subparsers.add_parser(
        "explain",
        help="explain a tool call: risk, what it does, and the decision (offline)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tool", required=True, help="tool name, e.g. run_bash")
    p.add_argument("--args", required=True, help='arguments as JSON, e.g. \'{"command":"ls"}\'')
    p.add_argument("--policy", help="TOML or YAML policy file (default: no rules)")
    p.add_argument("--mode", help="permission mode (default: the policy's mode)")
    p.add_argument("--subagent", action="store_true", help="the call comes from a subagent")
    p.add_argument("--root", action="append", default=[], help="an allowed root (repeatable)")
    p.add_argument("--cwd", help="working directory (default: the current one)")
    p.add_argument(
        "--denied-read",
        action="append",
        default=[],
        metavar="GLOB",
        help="the executor's own DENIED_READ_GLOBS (added to the policy's); repeatable",
    )
    p.add_argument("--network", action="store_true", help="the executor has the network enabled")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_check)
