"""The hash chain that makes the audit log tamper-evident (AUD-5).

``row_hash = sha256(prev_hash || "\\n" || canonical(row))`` where ``canonical`` is the
compact JSON array ``[sequence, stored_ns, <event fields in EVENT_FIELDS order>]``
(without the fields added after the first release when all of them are empty). The
first row links to the chain's anchor: ``GENESIS`` for a fresh log, or the hash of the
last row that retention deleted. Editing, deleting, inserting or reordering rows breaks
a link, and ``ChainChecker`` names the first broken one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from stockade.audit.model import (
    ADDED_FIELDS,
    EVENT_FIELDS,
    AuditEventRow,
    ChainBreak,
    ChainVerification,
    VerifyResult,
)

#: The anchor of a log that never had rows deleted.
GENESIS = "0" * 64

_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _refuse_type(value: object) -> object:
    raise TypeError(f"a hashed row holds only str and int, not {type(value).__name__}")


# The C encoder built once: same output as ``_encode_json`` (checked by a unit test) but
# without rebuilding the encoder per row, which is a third of the hashing cost.
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_iterencode = (
    _c_encoder(
        None, _refuse_type, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
    if _c_encoder is not None
    else None
)


_N_ADDED = len(ADDED_FIELDS)
_NO_ADDED = ("",) * _N_ADDED
_N_ROW = 2 + len(EVENT_FIELDS)
_sha256 = hashlib.sha256


def _encode(values: Sequence[object]) -> str:
    # Fields added after the first release are hashed only when one is set: a row stored
    # before they existed (or without them) hashes exactly as it did then. Dropping them
    # from a row that had them changes its hash, so that is caught like any other edit.
    if len(values) == _N_ROW and tuple(values[-_N_ADDED:]) == _NO_ADDED:
        values = values[:-_N_ADDED]
    if _iterencode is None:
        return _encode_json(values)
    return "".join(_iterencode(values, 0))


def _encode_event(event: AuditEventRow) -> str:
    """The event's fields as a JSON array (the added fields left out while all empty, as
    in ``_encode``), without first copying them into a new tuple with the position."""
    fields: Sequence[object] = event[:-_N_ADDED] if event[-_N_ADDED:] == _NO_ADDED else event
    if _iterencode is None:
        return _encode_json(fields)
    return "".join(_iterencode(fields, 0))


def canonical(sequence: int, stored_ns: int, event: AuditEventRow) -> bytes:
    """The bytes a row's hash covers: its position, arrival time and every event field."""
    # "[position,stored_ns," + the event's array without its "[": the same text as
    # encoding [position, stored_ns, *event] (an event has at least its first-release
    # fields, so its array is never empty).
    return f"[{sequence:d},{stored_ns:d},{_encode_event(event)[1:]}".encode()


def link_hash(prev_hash: str, sequence: int, stored_ns: int, event: AuditEventRow) -> str:
    """The hash of a row chained to ``prev_hash`` (what the writers compute per row)."""
    return _sha256(
        f"{prev_hash}\n[{sequence:d},{stored_ns:d},{_encode_event(event)[1:]}".encode()
    ).hexdigest()


def hash_values(prev_hash: str, values: Sequence[object]) -> str:
    """The hash of a row given as ``[sequence, stored_ns, *event fields]`` (a table row)."""
    return _sha256(f"{prev_hash}\n{_encode(values)}".encode()).hexdigest()


class ChainChecker:
    """Checks rows fed in sequence order and remembers the first broken link."""

    def __init__(self, anchor_sequence: int, anchor_hash: str) -> None:
        """Start after the anchor: the next row must have ``anchor_sequence + 1``."""
        self._expected_sequence = anchor_sequence + 1
        self._prev_hash = anchor_hash
        self.rows_checked = 0
        self.broken: VerifyResult | None = None
        self.reason: ChainBreak | None = None

    def feed(self, values: Sequence[object], prev_hash: str, row_hash: str) -> bool:
        """Check one row (``[sequence, stored_ns, *event fields]``); False once broken."""
        if self.broken is not None:
            return False
        sequence = int(values[0])  # type: ignore[call-overload]
        self.rows_checked += 1
        problem = ""
        if sequence != self._expected_sequence:
            if sequence > self._expected_sequence:
                self.reason = ChainBreak.ROWS_MISSING
                problem = (
                    f"rows {self._expected_sequence}..{sequence - 1} are missing"
                    if sequence - 1 > self._expected_sequence
                    else f"row {self._expected_sequence} is missing"
                )
            else:
                self.reason = ChainBreak.OUT_OF_ORDER
                problem = (
                    f"sequence {sequence} is out of order (expected {self._expected_sequence})"
                )
        elif prev_hash != self._prev_hash:
            self.reason = ChainBreak.LINK_MISMATCH
            problem = (
                "prev_hash does not match the previous row's hash"
                " (rows were reordered, removed or replaced)"
            )
        elif hash_values(prev_hash, values) != row_hash:
            self.reason = ChainBreak.ROW_EDITED
            problem = "row_hash does not match the row's content (the row was edited)"
        if problem:
            self.broken = VerifyResult(False, self.rows_checked, sequence, problem)
            return False
        self._expected_sequence = sequence + 1
        self._prev_hash = row_hash
        return True

    def finish(self, head_sequence: int, head_hash: str) -> VerifyResult:
        """The result, after checking that the last row is the recorded head."""
        if self.broken is not None:
            return self.broken
        last = self._expected_sequence - 1
        if last == head_sequence and self._prev_hash == head_hash:
            return VerifyResult(True, self.rows_checked)
        if last < head_sequence:
            self.reason = ChainBreak.TAIL_REMOVED
            detail = (
                f"the log ends at row {last} but the recorded head is row {head_sequence}"
                " (rows were removed from the end)"
            )
            return VerifyResult(False, self.rows_checked, last + 1, detail)
        if last > head_sequence:
            self.reason = ChainBreak.ROWS_APPENDED
            detail = f"rows after the recorded head {head_sequence} were added outside the store"
            return VerifyResult(False, self.rows_checked, head_sequence + 1, detail)
        self.reason = ChainBreak.HEAD_MISMATCH
        detail = "the last row's hash differs from the recorded head (the chain was rewritten)"
        return VerifyResult(False, self.rows_checked, last, detail)

    def chain_result(
        self,
        chain_id: str,
        result: VerifyResult,
        *,
        head: tuple[int, str],
        anchor_position: int,
        broken_sequence: int,
    ) -> ChainVerification:
        """``result`` (from ``finish``) as one chain's verification; ``broken_sequence``
        is the log sequence of the stored row at fault (0 when none is)."""
        return ChainVerification(
            chain_id=chain_id,
            ok=result.ok,
            rows_checked=self.rows_checked,
            first_broken_sequence=0 if result.ok else broken_sequence,
            first_broken_position=result.first_broken_sequence,
            reason=self.reason,
            detail=result.detail,
            head_position=head[0],
            head_hash=head[1],
            anchor_position=anchor_position,
        )
