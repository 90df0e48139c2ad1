"""``stockade session …``: manage decision sessions, their rules, mode and grants."""

from __future__ import annotations

import argparse
import sys

from stockade.cli._decision_rpc import add_connection_args, call, metadata
from stockade.cli._render import write_message
from stockade.decision.modes import parse_mode
from stockade.errors import InvalidArgument
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

EFFECTS = {
    "deny": c_pb2.RULE_EFFECT_DENY,
    "ask": c_pb2.RULE_EFFECT_ASK,
    "allow": c_pb2.RULE_EFFECT_ALLOW,
}
MODES = {
    "default": c_pb2.PERMISSION_MODE_DEFAULT,
    "acceptEdits": c_pb2.PERMISSION_MODE_ACCEPT_EDITS,
    "bypassPermissions": c_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS,
    "dontAsk": c_pb2.PERMISSION_MODE_DONT_ASK,
    "plan": c_pb2.PERMISSION_MODE_PLAN,
    "auto": c_pb2.PERMISSION_MODE_AUTO,
}


def _mode(text: str) -> c_pb2.PermissionMode.ValueType:
    try:
        return MODES[parse_mode(text).value]
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``session`` command group."""
    session = subparsers.add_parser("session", help="manage decision sessions")
    sub = session.add_subparsers(dest="session_command", metavar="SUBCOMMAND")
    sub.required = True

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        add_connection_args(p)
        p.add_argument("--json", action="store_true", help="print one JSON object")
        return p

    p = cmd("create", "create a session (or show the existing one)")
    p.add_argument("session_id", nargs="?", default="")
    p.add_argument("--mode", type=_mode, help="another mode than the default needs --token")
    p.add_argument("--task", default="", help="the session's stated task (auto mode shows it)")
    p.set_defaults(func=_create)
    p = cmd("get", "show a session with its mode and denial counters")
    p.add_argument("session_id")
    p.set_defaults(func=_get)
    p = cmd("delete", "delete a session with its rules, grants and approvals (admin)")
    p.add_argument("session_id")
    p.set_defaults(func=_delete)
    p = cmd("mode", "set a session's permission mode (admin)")
    p.add_argument("session_id")
    p.add_argument("mode", type=_mode)
    p.set_defaults(func=_set_mode)
    p = cmd("rules", "list a session's rules (and the policy's with --policy)")
    p.add_argument("session_id", nargs="?", default="")
    p.add_argument("--policy", action="store_true", help="include the policy rules")
    p.set_defaults(func=_rules)
    p = cmd("add-rule", "add a session rule (admin)")
    p.add_argument("session_id")
    p.add_argument("effect", choices=sorted(EFFECTS))
    p.add_argument("pattern")
    p.add_argument("--reason", default="")
    p.add_argument("--request-id", default="", help="idempotency key for retries")
    p.set_defaults(func=_add_rule)
    p = cmd("remove-rule", "remove a session rule by id (admin)")
    p.add_argument("session_id")
    p.add_argument("rule_id")
    p.set_defaults(func=_remove_rule)
    p = cmd("grants", "list a session's 'always allow' grants")
    p.add_argument("session_id")
    p.set_defaults(func=_grants)
    p = cmd("revoke", "revoke an 'always allow' grant (admin)")
    p.add_argument("grant_id")
    p.set_defaults(func=_revoke)


def _done(resp: object, a: argparse.Namespace) -> int:
    if resp is None:
        return 1
    write_message(resp, sys.stdout, as_json=a.json)  # type: ignore[arg-type]
    return 0


def _create(a: argparse.Namespace) -> int:
    mode = a.mode if a.mode is not None else c_pb2.PERMISSION_MODE_UNSPECIFIED
    req = d_pb2.CreateSessionRequest(session_id=a.session_id, mode=mode, task=a.task)
    # A mode other than the configured default needs admin rights (DEC-6 rev 2).
    return _done(call(a, lambda s: s.CreateSession(req, metadata=metadata(a))), a)


def _get(a: argparse.Namespace) -> int:
    req = d_pb2.GetSessionRequest(session_id=a.session_id)
    return _done(call(a, lambda s: s.GetSession(req)), a)


def _delete(a: argparse.Namespace) -> int:
    req = d_pb2.DeleteSessionRequest(session_id=a.session_id)
    return _done(call(a, lambda s: s.DeleteSession(req, metadata=metadata(a))), a)


def _set_mode(a: argparse.Namespace) -> int:
    req = d_pb2.SetModeRequest(session_id=a.session_id, mode=a.mode)
    return _done(call(a, lambda s: s.SetMode(req, metadata=metadata(a))), a)


def _rules(a: argparse.Namespace) -> int:
    req = d_pb2.ListRulesRequest(session_id=a.session_id, include_policy=a.policy)
    return _done(call(a, lambda s: s.ListRules(req)), a)


def _add_rule(a: argparse.Namespace) -> int:
    req = d_pb2.AddRuleRequest(
        session_id=a.session_id,
        rule=c_pb2.Rule(effect=EFFECTS[a.effect], pattern=a.pattern, reason=a.reason),
        request_id=a.request_id,
    )
    return _done(call(a, lambda s: s.AddRule(req, metadata=metadata(a))), a)


def _remove_rule(a: argparse.Namespace) -> int:
    req = d_pb2.RemoveRuleRequest(session_id=a.session_id, rule_id=a.rule_id)
    return _done(call(a, lambda s: s.RemoveRule(req, metadata=metadata(a))), a)


def _grants(a: argparse.Namespace) -> int:
    req = d_pb2.ListGrantsRequest(session_id=a.session_id)
    return _done(call(a, lambda s: s.ListGrants(req)), a)


def _revoke(a: argparse.Namespace) -> int:
    req = d_pb2.RevokeGrantRequest(grant_id=a.grant_id)
    return _done(call(a, lambda s: s.RevokeGrant(req, metadata=metadata(a))), a)
