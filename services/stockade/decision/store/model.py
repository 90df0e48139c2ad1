"""What both decision-store backends share: the records, their checks, the row mappers
and the session cache.

The SQLite store (``sqlite.py``) and the PostgreSQL store (``postgres.py``) differ in their
SQL and in what must hold across replicas; everything else (what a record is, which
input is refused and how, how a row becomes a record, how a session's rules and grants
are compiled and cached) is written once here, so the two cannot drift apart. Both
backends select the columns of one table in the order the ``*_COLUMNS`` constants give,
which is the order the ``*_from_row`` mappers read.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from stockade.decision.modes import Mode
from stockade.decision.rules import Effect, Rule, RuleIndex, Source, compile_rule
from stockade.errors import InvalidArgument, ResourceExhausted, SessionNotFound

MAX_TASK_CHARS = 4_000
"""A session's stated task: one paragraph for auto mode's classifier, not a document."""
DEFAULT_CACHE_MAX_SESSIONS = 10_000
"""Sessions whose state is kept in memory (each costs about 2 KB, more with rules)."""
DEFAULT_MAX_SESSION_RULES = 1_000
"""Session rules plus live grants per session (each change recompiles them all)."""


class ApprovalState(Enum):
    """Where an approval stands."""

    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"


@dataclass(frozen=True)
class SessionRecord:
    """A session as stored."""

    session_id: str
    mode: Mode
    create_time: float
    consecutive_denials: int = 0
    total_denials: int = 0
    task: str = ""
    """The task the session's creator stated (auto mode's classifier sees it)."""


@dataclass(frozen=True)
class GrantRecord:
    """A scoped "always allow" grant: a session ALLOW rule with uses and/or a deadline."""

    grant_id: str
    session_id: str
    rule: Rule
    remaining_uses: int
    """Uses left; 0 means unlimited."""
    expire_time: float | None
    create_time: float
    resolver: str

    def live(self, now: float) -> bool:
        """True while the deadline has not passed."""
        return self.expire_time is None or now < self.expire_time


@dataclass(frozen=True)
class PendingCall:
    """The call an approval is about."""

    call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    from_subagent: bool = False
    agent_name: str = ""
    findings: str = ""
    """Digest of the executor findings the ASK decision saw (bound into the grant an
    approval yields, DEC-12 rev 2); "" when the Decide carried no inspection."""


@dataclass(frozen=True)
class ApprovalRecord:
    """An approval as stored."""

    approval_id: str
    session_id: str
    call: PendingCall
    reason: str
    risk: str
    summary: str
    state: ApprovalState
    create_time: float
    expire_time: float
    resolver: str = ""
    resolution: str = ""
    resolve_reason: str = ""
    always_allow_applies: bool = True
    """Whether an ALWAYS_ALLOW answer can take effect (False when an explicit ask rule or
    a hook asked: they outrank allow rules and ask every time)."""
    rule: Rule | None = None
    """The rule that asked (the ASK decision's winning rule); None for approvals stored
    before the rule was kept."""


def new_id(prefix: str) -> str:
    """A random id with a readable prefix."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


# -- checks (the same input is refused the same way on both backends) ------------------


def check_task(task: str) -> None:
    """``InvalidArgument`` for a stated task past ``MAX_TASK_CHARS``."""
    if len(task) > MAX_TASK_CHARS:
        raise InvalidArgument(
            f"task is {len(task):,} characters; the limit is {MAX_TASK_CHARS:,}",
            argument="task",
        )


def session_not_found(session_id: str, *, meanwhile: bool = False) -> SessionNotFound:
    """The error of a session that does not exist (or was deleted during the call)."""
    what = "was deleted meanwhile" if meanwhile else "does not exist"
    return SessionNotFound(f"session {session_id!r} {what}", session_id=session_id)


def check_rule_count(session_id: str, count: int, limit: int) -> None:
    """``ResourceExhausted`` when a session already holds ``limit`` rules and grants
    (every change recompiles them all, and every call matches them)."""
    if count >= limit:
        raise ResourceExhausted(
            f"session {session_id!r} holds {count} session rules and grants; the limit is "
            f"{limit} (max_session_rules): remove some first",
            limit="max_session_rules",
            value=str(limit),
        )


@dataclass(frozen=True)
class PendingLimits:
    """Caps on pending approvals, checked by the store in the statement or transaction
    that inserts one, so they hold exactly however many replicas ask at once."""

    total: int
    """Pending approvals in the whole store (``max_pending_approvals``)."""
    per_session: int
    """Pending approvals of one session (``max_pending_approvals_per_session``)."""


def check_pending(session_id: str, total: int, in_session: int, limits: PendingLimits) -> None:
    """``ResourceExhausted`` naming the limit when one more pending approval (beside
    ``total`` in the store, ``in_session`` of the session) would pass ``limits``."""
    if total >= limits.total:
        raise ResourceExhausted(
            f"{total} approvals are pending; the limit is {limits.total} "
            "(max_pending_approvals): answer some first",
            limit="max_pending_approvals",
            value=str(limits.total),
        )
    if in_session >= limits.per_session:
        raise ResourceExhausted(
            f"session {session_id!r} has {in_session} pending approvals; the limit is "
            f"{limits.per_session} (max_pending_approvals_per_session): answer some first",
            limit="max_pending_approvals_per_session",
            value=str(limits.per_session),
        )


def new_session_rule(effect: Effect, pattern: str, reason: str) -> Rule:
    """A new SESSION rule; ``InvalidPattern`` if the pattern is bad (checked before it is
    stored, so a bad rule never reaches the table)."""
    rule = Rule(effect, pattern.strip(), Source.SESSION, reason, new_id("rule"))
    compile_rule(rule, 0)
    return rule


def grant_rule(grant_id: str, pattern: str, resolver: str) -> Rule:
    """The session ALLOW rule a grant stands for."""
    return Rule(Effect.ALLOW, pattern, Source.SESSION, f"always allowed by {resolver}", grant_id)


def new_grant_rule(pattern: str, resolver: str, remaining_uses: int) -> Rule:
    """The rule of a new grant; ``InvalidArgument`` for negative uses, ``InvalidPattern``
    for a bad pattern."""
    if remaining_uses < 0:
        raise InvalidArgument("scope.remaining_uses must not be negative")
    rule = grant_rule(new_id("grant"), pattern, resolver)
    compile_rule(rule, 0)
    return rule


# -- row mappers (each backend selects these columns in this order) --------------------

SESSION_COLUMNS = "session_id, mode, create_time, consecutive_denials, total_denials, task"
RULE_COLUMNS = "rule_id, effect, pattern, reason"
GRANT_COLUMNS = "grant_id, pattern, remaining_uses, expire_time, create_time, resolver"
APPROVAL_COLUMNS = (
    "approval_id, session_id, call_json, reason, risk, summary, state, create_time, "
    "expire_time, resolver, resolution, resolve_reason, always_allow_applies, rule_json"
)


def session_from_row(row: Any) -> SessionRecord:
    """A session from a row of ``SESSION_COLUMNS``."""
    return SessionRecord(row[0], Mode(row[1]), row[2], row[3], row[4], row[5])


def rule_from_row(row: Any) -> Rule:
    """A session rule from a row of ``RULE_COLUMNS``."""
    return Rule(Effect(row[1]), row[2], Source.SESSION, row[3], row[0])


def grant_from_row(session_id: str, row: Any) -> GrantRecord:
    """A grant of ``session_id`` from a row of ``GRANT_COLUMNS``."""
    gid, pattern, uses, expire_time, create_time, resolver = row
    return GrantRecord(
        gid, session_id, grant_rule(gid, pattern, resolver), uses, expire_time, create_time,
        resolver,
    )  # fmt: skip


def live_grants(session_id: str, rows: Iterable[Any], now: float) -> list[GrantRecord]:
    """The grants among ``rows`` whose deadline has not passed at ``now``."""
    return [g for g in (grant_from_row(session_id, r) for r in rows) if g.live(now)]


def call_to_json(call: PendingCall) -> str:
    """An approval's call as stored (``call_json``)."""
    return json.dumps(
        {
            "call_id": call.call_id,
            "tool_name": call.tool_name,
            "arguments": dict(call.arguments),
            "from_subagent": call.from_subagent,
            "agent_name": call.agent_name,
            "findings": call.findings,
        }
    )


def rule_to_json(rule: Rule | None) -> str:
    """An approval's asking rule as stored ('' when unknown)."""
    if rule is None:
        return ""
    return json.dumps(
        {
            "effect": rule.effect.value,
            "pattern": rule.pattern,
            "source": rule.source.value,
            "reason": rule.reason,
            "rule_id": rule.rule_id,
            "bypass_immune": rule.bypass_immune,
        },
        ensure_ascii=False,
    )


def rule_from_json(text: str) -> Rule | None:
    """The stored asking rule; None when none was stored (or it cannot be read: the rule
    is shown to people, never used to decide, so an unreadable one is left out)."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        return Rule(
            Effect(raw["effect"]),
            str(raw["pattern"]),
            Source(raw["source"]),
            str(raw.get("reason", "")),
            str(raw.get("rule_id", "")),
            bool(raw.get("bypass_immune", False)),
        )
    except (ValueError, KeyError, TypeError):
        return None


def approval_from_row(row: Any) -> ApprovalRecord:
    """An approval from a row of ``APPROVAL_COLUMNS``."""
    call = json.loads(row[2])
    return ApprovalRecord(
        approval_id=row[0],
        session_id=row[1],
        call=PendingCall(
            call_id=call["call_id"],
            tool_name=call["tool_name"],
            arguments=call["arguments"],
            from_subagent=bool(call.get("from_subagent")),
            agent_name=call.get("agent_name", ""),
            findings=call.get("findings", ""),
        ),
        reason=row[3],
        risk=row[4],
        summary=row[5],
        state=ApprovalState(row[6]),
        create_time=row[7],
        expire_time=row[8],
        resolver=row[9],
        resolution=row[10],
        resolve_reason=row[11],
        always_allow_applies=bool(row[12]),
        rule=rule_from_json(row[13]),
    )


# -- the session cache ------------------------------------------------------------------


@dataclass
class CachedSession:
    """What a store keeps in memory of one session: its row and its compiled rules."""

    record: SessionRecord
    index: RuleIndex | None = None
    index_expiry: float | None = None
    """When the first timed grant in ``index`` runs out (the index is stale from then)."""
    grants_by_rule: dict[str, GrantRecord] | None = None

    def current_index(self, now: float) -> RuleIndex | None:
        """The compiled rules if still valid at ``now``, else None."""
        index = self.index
        if index is not None and (self.index_expiry is None or now < self.index_expiry):
            return index
        return None

    def compile(self, rules: list[Rule], grants: list[GrantRecord], cwd: str) -> RuleIndex:
        """Compile the session's rules and live grants into this entry."""
        expiries = [g.expire_time for g in grants if g.expire_time is not None]
        self.index = RuleIndex([*rules, *(g.rule for g in grants)], cwd=cwd)
        self.index_expiry = min(expiries) if expiries else None
        self.grants_by_rule = {g.rule.rule_id: g for g in grants}
        return self.index

    def forget_rules(self) -> None:
        """The session's rules or grants changed: compile them again on the next call."""
        self.index = None
        self.grants_by_rule = None


class SessionCache(OrderedDict[str, CachedSession]):
    """An LRU of cached sessions, least recently used first, bounded by ``max_sessions``
    (a session that falls out is read back on its next call)."""

    def __init__(self, max_sessions: int) -> None:
        super().__init__()
        self.max_sessions = max(1, max_sessions)

    def record(self, session_id: str) -> SessionRecord | None:
        """The cached session row (marking it recently used), or None."""
        cached = self.get(session_id)
        if cached is None:
            return None
        self.move_to_end(session_id)
        return cached.record

    def remember(self, session_id: str, entry: CachedSession) -> None:
        """Cache ``entry``, dropping the least recently used sessions past the bound."""
        self[session_id] = entry
        self.move_to_end(session_id)
        while len(self) > self.max_sessions:
            self.popitem(last=False)


def counted_grants(
    grants_by_rule: Mapping[str, GrantRecord], rules: Iterable[Rule]
) -> list[GrantRecord]:
    """The grants with a use count among the rules that allowed a call (their use must be
    spent; unlimited grants cost nothing)."""
    return [
        g
        for r in rules
        for g in [grants_by_rule.get(r.rule_id)]
        if g is not None and g.remaining_uses != 0
    ]
