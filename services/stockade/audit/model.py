"""Value objects of the audit log: events as producers send them and rows as stored.

The core works on plain strings and integers (no protobuf): ``status``, ``verdict`` and
``rule_source`` hold enum member names without their prefix (``"OK"``, ``"ALLOW"``,
``"MANAGED"``), which is also how they are stored, so the table reads like the seed's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple


class AuditStatus(StrEnum):
    """How an audited call ended; SESSION_STOP marks a session's summary row."""

    OK = "OK"
    FAIL = "FAIL"
    DENIED = "DENIED"
    CANCELLED = "CANCELLED"
    SESSION_STOP = "SESSION_STOP"
    #: The agent stopped waiting (deadline, broken connection): the tool may have run.
    UNKNOWN = "UNKNOWN"
    #: A decision record from the decision service (no tool ran; not a call in metrics).
    DECIDED = "DECIDED"


#: Verdict names accepted in ``AuditEventRow.verdict`` ("" = not recorded).
VERDICTS = frozenset({"", "ALLOW", "ASK", "DENY"})
#: Rule sources accepted in ``AuditEventRow.rule_source`` ("" = not recorded).
RULE_SOURCES = frozenset(
    {"", "MANAGED", "ENV", "PROJECT", "SESSION", "TOOL", "HOOK", "DEFAULT", "MODE"}
)
#: The chain id of a SQLite store's one hash chain.
SQLITE_CHAIN = "sqlite"
#: The tool name of SESSION_STOP summary rows.
SESSION_TOOL = "session"
#: Characters of tool output kept in ``output_preview`` (AUD-1); longer output is cut.
PREVIEW_CHARS = 200


class AuditEventRow(NamedTuple):
    """One audit event as a producer sends it (the columns of ``agent_audit_log``).

    A NamedTuple rather than a frozen dataclass: it is built once per ingested event
    (tens of thousands per second) and is already the tuple SQLite binds and the chain
    hashes, so it costs a third of a dataclass to make and nothing to unpack.
    """

    #: Unique id chosen by the producer; a repeated id is ignored (idempotent replay).
    event_id: str
    #: The agent session.
    session_id: str
    #: The ReAct loop step.
    step: int
    #: The tool; ``"session"`` for SESSION_STOP rows.
    tool_name: str
    #: An ``AuditStatus`` name.
    status: str
    #: Execution time in milliseconds.
    elapsed_ms: int = 0
    #: The first ``PREVIEW_CHARS`` characters of the output.
    output_preview: str = ""
    #: ``"lead"`` or the subagent's name.
    agent_name: str = "lead"
    #: When the event happened, nanoseconds since the Unix epoch; 0 = "use arrival time".
    time_ns: int = 0
    #: The tool call id.
    call_id: str = ""
    #: The decision's verdict name (``VERDICTS``).
    verdict: str = ""
    #: The pattern of the rule that decided.
    matched_rule: str = ""
    #: Where that rule came from (``RULE_SOURCES``).
    rule_source: str = ""
    #: The decision's conflict log as JSON ("" when none).
    conflict_log: str = ""
    #: The OpenTelemetry trace id, 32 lowercase hex characters or "".
    trace_id: str = ""
    #: For SESSION_STOP rows: why the session ended.
    termination_reason: str = ""
    #: The policy version the decision was made under.
    policy_version: str = ""
    #: The call's arguments as canonical JSON (after redaction), "" when not recorded.
    arguments_json: str = ""
    # Fields added after the first release. The hash chain covers them only when one is
    # set (``chain.canonical``), so rows stored before they existed still verify.
    #: The winning rule as canonical protobuf JSON (``convert.rule_json``), "" when the
    #: producer sent only ``matched_rule``/``rule_source`` (which repeat its pattern and
    #: source for queries and older readers).
    winning_rule: str = ""
    #: The decision's human reason for its verdict.
    decision_reason: str = ""


class CanonicalJson(str):
    """JSON text this process wrote itself (``convert`` serializing a typed field with
    ``json``'s encoder): valid by construction, so validation checks its size and depth
    but does not parse it again. Only ``convert`` makes these; producers' text fields
    arrive as plain ``str`` and are parsed in full. Stored and hashed as the plain text.
    """

    __slots__ = ()


#: Column names of the event part of a row, in table and hash order.
EVENT_FIELDS: tuple[str, ...] = AuditEventRow._fields
#: The event columns of the first release; the rest were added later (``ADDED_FIELDS``)
#: and are left out of a row's hash while they are all empty.
V1_EVENT_FIELDS: tuple[str, ...] = EVENT_FIELDS[: EVENT_FIELDS.index("arguments_json") + 1]
ADDED_FIELDS: tuple[str, ...] = EVENT_FIELDS[len(V1_EVENT_FIELDS) :]


@dataclass(frozen=True, slots=True)
class StoredRow:
    """A row of the log: the event plus its place in the hash chain."""

    #: The event as stored (after truncation and defaulting).
    event: AuditEventRow
    #: Position in the log; strictly increasing, gap-free until retention cuts a prefix.
    sequence: int
    #: When the store accepted the row, nanoseconds since the epoch (drives retention).
    stored_ns: int
    #: ``row_hash`` of the previous row (hex), or the chain anchor for the first row.
    prev_hash: str
    #: sha256 over ``prev_hash`` and the canonical row (hex).
    row_hash: str


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What one ``append`` did."""

    #: Events newly stored.
    accepted: int
    #: Events skipped because their id was already stored (or repeated in the batch).
    duplicates: int
    #: Sequence of the last stored row after the append (0 while the log is empty).
    head_sequence: int = 0


class ChainBreak(StrEnum):
    """Why a hash chain fails verification (``ChainBreakReason`` on the wire)."""

    #: Rows are missing before the named row (a gap in the chain's positions).
    ROWS_MISSING = "ROWS_MISSING"
    #: The named row's position is lower than the previous row's.
    OUT_OF_ORDER = "OUT_OF_ORDER"
    #: The named row's prev_hash is not the previous row's hash.
    LINK_MISMATCH = "LINK_MISMATCH"
    #: The named row's hash does not match its content (edited).
    ROW_EDITED = "ROW_EDITED"
    #: The chain ends before its recorded head (rows removed from the end).
    TAIL_REMOVED = "TAIL_REMOVED"
    #: Rows follow the recorded head (added outside the store).
    ROWS_APPENDED = "ROWS_APPENDED"
    #: The last row's hash differs from the recorded head (the chain was rewritten).
    HEAD_MISMATCH = "HEAD_MISMATCH"
    #: Rows name a chain that has no recorded head (added outside the store).
    UNKNOWN_CHAIN = "UNKNOWN_CHAIN"


@dataclass(frozen=True, slots=True)
class ChainVerification:
    """The verification of one hash chain."""

    #: The chain: the replica that writes it, or ``"sqlite"`` for a SQLite store.
    chain_id: str
    #: True when every link holds and the chain ends at its recorded head.
    ok: bool
    #: Rows of this chain checked.
    rows_checked: int
    #: Log sequence of the first broken row; 0 when ok or when no stored row is at fault.
    first_broken_sequence: int = 0
    #: Position of the first broken row within the chain; 0 when ok.
    first_broken_position: int = 0
    #: Why the chain is broken; None when ok.
    reason: ChainBreak | None = None
    #: The same in words.
    detail: str = ""
    #: Position of the chain's recorded head.
    head_position: int = 0
    #: Hash of the recorded head.
    head_hash: str = ""
    #: Positions up to this one were deleted by retention.
    anchor_position: int = 0


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of checking the hash chain."""

    #: True when every link holds.
    ok: bool
    #: Rows checked.
    rows_checked: int
    #: Sequence of the first row whose link is broken; 0 when ok.
    first_broken_sequence: int = 0
    #: What is wrong with it ("" when ok).
    detail: str = ""
    #: Sequence of the chain's recorded head.
    head_sequence: int = 0
    #: Hash of the recorded head; keep a copy elsewhere to detect a wholesale rewrite.
    head_hash: str = ""
    #: Rows up to this sequence were deleted by retention.
    anchor_sequence: int = 0
    #: Stand-in rows of refused events (``$stockade_refused`` in their arguments).
    refused_rows: int = 0
    #: Rows with a field cut to a ``$stockade_cut`` marker.
    cut_rows: int = 0
    #: One result per chain (a SQLite store has one, a PostgreSQL store one per replica).
    chains: tuple[ChainVerification, ...] = ()


@dataclass(frozen=True, slots=True)
class QueryFilters:
    """Filters of a query; empty strings and ``None`` mean "any"."""

    #: Only this session.
    session_id: str = ""
    #: Only this tool.
    tool_name: str = ""
    #: Only this ``AuditStatus`` name.
    status: str = ""
    #: Only this agent.
    agent_name: str = ""
    #: Only this verdict name (``VERDICTS``).
    verdict: str = ""
    #: Rows whose event time is at or after this (ns since the epoch).
    start_ns: int | None = None
    #: Rows whose event time is before this (ns since the epoch).
    end_ns: int | None = None


@dataclass(frozen=True, slots=True)
class ToolMetrics:
    """Per-tool figures of one session."""

    #: The tool.
    tool_name: str
    #: Calls recorded.
    calls: int
    #: Calls that failed.
    errors: int
    #: Calls denied.
    denials: int
    #: Mean elapsed milliseconds over the calls that ran (not denied), 0 when none ran.
    mean_elapsed_ms: float
    #: Largest elapsed milliseconds.
    max_elapsed_ms: int


@dataclass(frozen=True, slots=True)
class SessionMetrics:
    """A per-session metrics snapshot (AUD-3)."""

    #: The session.
    session_id: str
    #: Tool calls recorded (SESSION_STOP rows are not calls).
    calls: int = 0
    #: Calls that failed.
    errors: int = 0
    #: Calls denied.
    denials: int = 0
    #: Per-tool figures, ordered by tool name.
    tools: tuple[ToolMetrics, ...] = field(default_factory=tuple)
    #: Why the session ended (from its latest SESSION_STOP row); "" while it runs.
    termination_reason: str = ""
