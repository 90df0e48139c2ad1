"""What the SQLite and PostgreSQL audit stores do the same way, written once.

Both keep ``agent_audit_log`` with the same columns and answer the same reads with the
same SQL but for the parameter placeholders (``?`` against ``$1``): a page of a query, the
rows after a sequence, the live tail woken by the store's ``HeadWatch``, a session's
metrics. ``StoreReads`` holds those; a backend supplies its ``SELECT`` of a whole row, its
placeholder and one ``_fetch``. ``stored_row`` reads a row of either table and
``marker_kind`` tells the stand-in and cut rows ``VerifyLog`` counts.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from stockade.audit.metrics import StoreInstruments
from stockade.audit.model import (
    EVENT_FIELDS,
    AuditEventRow,
    AuditStatus,
    QueryFilters,
    SessionMetrics,
    StoredRow,
    ToolMetrics,
)
from stockade.audit.notify import HeadWatch
from stockade.audit.paging import clamp_page_size, decode_token, encode_token
from stockade.contract.audit_bounds import CUT_KEY, REFUSED_KEY
from stockade.errors import InvalidArgument

_N_EVENT = len(EVENT_FIELDS)
_REFUSED = '{"' + REFUSED_KEY + '":'
_CUT = '{"' + CUT_KEY + '":'
#: Columns a query may filter on by equality (``QueryFilters`` fields of the same name).
_EQUAL_FILTERS = ("session_id", "tool_name", "status", "agent_name", "verdict")
#: Per-tool figures of one session; summary rows and decision records are not calls.
_METRICS_SQL = (
    "SELECT tool_name, COUNT(*), SUM(CASE WHEN status = 'FAIL' THEN 1 ELSE 0 END),"
    " SUM(CASE WHEN status = 'DENIED' THEN 1 ELSE 0 END),"
    " AVG(CASE WHEN status <> 'DENIED' THEN elapsed_ms END), MAX(elapsed_ms)"
    " FROM agent_audit_log WHERE session_id = {0} AND status NOT IN ({1}, {2})"
    " GROUP BY tool_name ORDER BY tool_name"
)
_STOP_SQL = (
    "SELECT termination_reason FROM agent_audit_log WHERE session_id = {0} AND status = {1}"
    " ORDER BY sequence DESC LIMIT 1"
)


def stored_row(values: Sequence[Any]) -> StoredRow:
    """A ``StoredRow`` from a table row that starts ``sequence, stored_ns, <event fields>``
    and ends ``prev_hash, row_hash`` (both backends' order; PostgreSQL's has the chain
    columns between)."""
    return StoredRow(
        event=AuditEventRow(*values[2 : 2 + _N_EVENT]),
        sequence=int(values[0]),
        stored_ns=int(values[1]),
        prev_hash=str(values[-2]),
        row_hash=str(values[-1]),
    )


def marker_kind(arguments: str, conflicts: str) -> Literal["refused", "cut", ""]:
    """``"refused"`` for the stand-in row of a refused event, ``"cut"`` for a row with a
    field cut to a marker, ``""`` otherwise."""
    if arguments.startswith(_REFUSED):
        return "refused"
    if arguments.startswith(_CUT) or conflicts.startswith(_CUT):
        return "cut"
    return ""


def record_ingest(
    instruments: StoreInstruments, accepted: int, duplicates: int, arrived: float
) -> None:
    """Count one append's outcome and its latency since ``arrived`` (monotonic seconds)."""
    counter = instruments.events_ingested
    counter.add(accepted, {"outcome": "accepted"})
    if duplicates:
        counter.add(duplicates, {"outcome": "duplicate"})
    instruments.ingest_latency.record((time.monotonic() - arrived) * 1000.0)


class StoreReads:
    """The reads both backends serve with the same SQL (see the module docstring)."""

    #: ``SELECT <every column of a row> FROM agent_audit_log``.
    _select_row: str
    _watch: HeadWatch

    def _mark(self, index: int) -> str:
        """The placeholder of the ``index``-th parameter (from 1)."""
        raise NotImplementedError

    async def _fetch(self, sql: str, *params: Any) -> list[Any]:
        """Every row ``sql`` returns."""
        raise NotImplementedError

    @property
    def head_sequence(self) -> int:
        """The last sequence this store knows to be committed."""
        raise NotImplementedError

    async def __aenter__(self) -> Any:
        """Use the store as an async context manager."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the store."""
        await self.close()

    async def close(self) -> None:
        """Close the store."""
        raise NotImplementedError

    async def query(
        self, filters: QueryFilters, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[StoredRow], str]:
        """Rows matching ``filters``, newest (highest sequence) first, and the next token.

        Raises ``InvalidPageToken`` for a token that is malformed or from another query.
        """
        size = clamp_page_size(page_size)
        before = decode_token(page_token, filters)
        clauses: list[str] = []
        params: list[Any] = []

        def bind(clause: str, value: Any) -> None:
            params.append(value)
            clauses.append(clause.format(self._mark(len(params))))

        for column in _EQUAL_FILTERS:
            value = getattr(filters, column)
            if value:
                bind(f"{column} = {{}}", value)
        if filters.start_ns is not None:
            bind("time_ns >= {}", filters.start_ns)
        if filters.end_ns is not None:
            bind("time_ns < {}", filters.end_ns)
        if before is not None:
            bind("sequence < {}", before)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        params.append(size + 1)
        sql = f"{self._select_row}{where} ORDER BY sequence DESC LIMIT {self._mark(len(params))}"
        found = await self._fetch(sql, *params)
        rows = [stored_row(values) for values in found[:size]]
        token = encode_token(rows[-1].sequence, filters) if len(found) > size else ""
        return rows, token

    async def rows_after(
        self, sequence: int, session_id: str = "", limit: int = 500
    ) -> list[StoredRow]:
        """Up to ``limit`` rows after ``sequence`` in log order, optionally of one session."""
        m = self._mark
        if session_id:
            found = await self._fetch(
                f"{self._select_row} WHERE sequence > {m(1)} AND session_id = {m(2)}"
                f" ORDER BY sequence LIMIT {m(3)}",
                sequence,
                session_id,
                limit,
            )
        else:
            found = await self._fetch(
                f"{self._select_row} WHERE sequence > {m(1)} ORDER BY sequence LIMIT {m(2)}",
                sequence,
                limit,
            )
        return [stored_row(values) for values in found]

    async def tail(
        self, session_id: str = "", *, after: int | None = None, batch: int = 500
    ) -> AsyncIterator[StoredRow]:
        """Yield rows as they are committed (from the current head, or after ``after``).

        Ends when the store closes. Memory is bounded by ``batch`` however fast rows come.
        """
        seen = self.head_sequence if after is None else after
        while True:
            head = await self._watch.wait_past(seen)
            if head <= seen:
                return  # closed
            rows = await self.rows_after(seen, session_id, batch)
            for row in rows:
                yield row
            if len(rows) == batch:
                seen = rows[-1].sequence
            else:
                seen = max(head, rows[-1].sequence) if rows else head

    async def session_metrics(self, session_id: str) -> SessionMetrics:
        """Calls, errors, denials, per-tool counts and latency, and termination reason.

        A session with no rows yet gives zeros (the store cannot tell it from a new one).
        """
        if not session_id:
            raise InvalidArgument("session_id is required", field="session_id")
        m = self._mark
        found = await self._fetch(
            _METRICS_SQL.format(m(1), m(2), m(3)),
            session_id,
            AuditStatus.SESSION_STOP.value,
            AuditStatus.DECIDED.value,
        )
        tools = tuple(
            ToolMetrics(
                tool_name=name,
                calls=int(calls),
                errors=int(errors or 0),
                denials=int(denials or 0),
                mean_elapsed_ms=float(mean or 0.0),
                max_elapsed_ms=int(largest or 0),
            )
            for name, calls, errors, denials, mean, largest in found
        )
        stop = await self._fetch(
            _STOP_SQL.format(m(1), m(2)), session_id, AuditStatus.SESSION_STOP.value
        )
        return SessionMetrics(
            session_id=session_id,
            calls=sum(t.calls for t in tools),
            errors=sum(t.errors for t in tools),
            denials=sum(t.denials for t in tools),
            tools=tools,
            termination_reason=str(stop[0][0]) if stop else "",
        )
