"""The SQLite schema of the audit log (AUD-1).

``agent_audit_log`` holds one row per event with the seed's seven columns plus the
decision context, the row's place in the hash chain (``sequence``, ``prev_hash``,
``row_hash``) and ``stored_ns`` (arrival time, which drives retention). ``audit_chain``
holds the chain's anchor (where the retained log starts) and head (its last row).
"""

from __future__ import annotations

import sqlite3

from stockade.audit.model import ADDED_FIELDS, EVENT_FIELDS

_INTEGER_FIELDS = frozenset({"step", "elapsed_ms", "time_ns"})

_COLUMNS = ",\n  ".join(
    f"{name} {'INTEGER' if name in _INTEGER_FIELDS else 'TEXT'} NOT NULL"
    + (" UNIQUE" if name == "event_id" else "")
    for name in EVENT_FIELDS
)

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS agent_audit_log (
  sequence INTEGER PRIMARY KEY,
  stored_ns INTEGER NOT NULL,
  {_COLUMNS},
  prev_hash TEXT NOT NULL,
  row_hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_audit_session ON agent_audit_log(session_id, sequence);
CREATE INDEX IF NOT EXISTS idx_audit_tool ON agent_audit_log(tool_name, sequence);
CREATE INDEX IF NOT EXISTS idx_audit_status ON agent_audit_log(status, sequence);
CREATE INDEX IF NOT EXISTS idx_audit_agent ON agent_audit_log(agent_name, sequence);
CREATE INDEX IF NOT EXISTS idx_audit_time ON agent_audit_log(time_ns);
CREATE TABLE IF NOT EXISTS audit_chain (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  anchor_sequence INTEGER NOT NULL,
  anchor_hash TEXT NOT NULL,
  head_sequence INTEGER NOT NULL,
  head_hash TEXT NOT NULL,
  head_stored_ns INTEGER NOT NULL
);
"""

#: Every column in the order rows are written and read.
ROW_COLUMNS: tuple[str, ...] = ("sequence", "stored_ns", *EVENT_FIELDS, "prev_hash", "row_hash")
SELECT_ROW = f"SELECT {', '.join(ROW_COLUMNS)} FROM agent_audit_log"
INSERT_ROW = (
    f"INSERT INTO agent_audit_log ({', '.join(ROW_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"
)


def add_missing_columns(db: sqlite3.Connection) -> None:
    """Add the columns of ``ADDED_FIELDS`` to a log created before they existed (in place:
    existing rows get "" there, which the hash chain leaves out, so they still verify)."""
    present = {str(row[1]) for row in db.execute("PRAGMA table_info(agent_audit_log)")}
    for name in ADDED_FIELDS:
        if name not in present:
            db.execute(f"ALTER TABLE agent_audit_log ADD COLUMN {name} TEXT NOT NULL DEFAULT ''")


def select_row_sql(db: sqlite3.Connection) -> str:
    """``SELECT_ROW`` for a file that may predate ``ADDED_FIELDS`` and cannot be changed
    (the offline check opens files read-only): missing columns read as ""."""
    present = {str(row[1]) for row in db.execute("PRAGMA table_info(agent_audit_log)")}
    columns = [c if c in present or c not in ADDED_FIELDS else f"'' AS {c}" for c in ROW_COLUMNS]
    return f"SELECT {', '.join(columns)} FROM agent_audit_log"
