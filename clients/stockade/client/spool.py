"""A local append-only spool of serialized audit events (AUD-4).

The audit client writes events here while the audit service is unreachable and replays
them, oldest first, once it is back. Records are framed as ``length (4 bytes, big
endian) | crc32 (4 bytes) | payload``; a torn or corrupt record at the end (the process
died mid-write) is cut off on open. Progress is kept in a sidecar ``<name>.ack`` file
holding the byte offset of the first record not yet acknowledged, replaced atomically;
after a crash between "acknowledged by the service" and "offset saved" the same events
are sent again, which the service ignores (idempotent by event id).
"""

from __future__ import annotations

import fcntl
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

_HEADER = struct.Struct(">II")
#: Largest single record; an audit event is far smaller (its fields are bounded).
MAX_RECORD_BYTES = 16 * 1024 * 1024


class SpoolFull(Exception):
    """The spool reached its size limit; the events were not written."""


class SpoolBusy(Exception):
    """Another recorder (in this or another process) holds the spool file."""


class Spool:
    """An append-only file of records with a persistent read position."""

    def __init__(self, path: Path, *, max_bytes: int = 1 << 30, fsync: bool = False) -> None:
        """Open (creating if needed) the spool at ``path``.

        ``max_bytes`` bounds the file; ``fsync=True`` makes each append survive power loss
        (a killed process loses nothing either way: writes reach the OS at once).
        """
        self.path = Path(path)
        self._ack_path = self.path.with_name(self.path.name + ".ack")
        self._max_bytes = max_bytes
        self._fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+b")  # held open for the spool's lifetime
        try:
            # Two writers interleaving records would corrupt the order (and the framing).
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise SpoolBusy(f"spool {self.path} is in use by another recorder") from None
        self._read_offset = self._load_ack()
        self._size, self._pending = self._scan()

    # -- state -------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records written and not yet acknowledged."""
        return self._pending

    @property
    def size_bytes(self) -> int:
        """Bytes in the spool file."""
        return self._size

    def _load_ack(self) -> int:
        try:
            return int(self._ack_path.read_text().strip() or "0")
        except FileNotFoundError:
            return 0
        except ValueError:
            # A damaged position file: replay everything; the service drops duplicates.
            return 0

    def _scan(self) -> tuple[int, int]:
        """Count records after the read position and cut a torn tail."""
        self._file.seek(0, os.SEEK_END)
        end = self._file.tell()
        if self._read_offset > end:
            self._read_offset = 0
        offset, count = self._read_offset, 0
        while offset < end:
            record = self._read_at(offset, end)
            if record is None:
                break
            offset, count = record[0], count + 1
        if offset < end:
            self._file.truncate(offset)
            self._file.flush()
        return offset, count

    def _read_at(self, offset: int, end: int) -> tuple[int, bytes] | None:
        """The record at ``offset`` as (next offset, payload), or None if torn/corrupt."""
        if end - offset < _HEADER.size:
            return None
        self._file.seek(offset)
        length, crc = _HEADER.unpack(self._file.read(_HEADER.size))
        if length > MAX_RECORD_BYTES or end - offset - _HEADER.size < length:
            return None
        payload = self._file.read(length)
        if zlib.crc32(payload) != crc:
            return None
        return offset + _HEADER.size + length, payload

    # -- writing and reading -----------------------------------------------------------

    def append(self, payloads: Sequence[bytes]) -> None:
        """Append records (all or none when the size limit would be passed)."""
        if not payloads:
            return
        data = b"".join(_HEADER.pack(len(p), zlib.crc32(p)) + p for p in payloads)
        if self._size + len(data) > self._max_bytes:
            raise SpoolFull(f"spool {self.path} would exceed {self._max_bytes} bytes")
        self._file.seek(0, os.SEEK_END)
        self._file.write(data)
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        self._size += len(data)
        self._pending += len(payloads)

    def peek(self, max_records: int) -> tuple[list[bytes], int]:
        """Up to ``max_records`` oldest unacknowledged payloads and the offset after them."""
        payloads: list[bytes] = []
        offset = self._read_offset
        while len(payloads) < max_records and offset < self._size:
            record = self._read_at(offset, self._size)
            if record is None:  # cannot happen after _scan; stop rather than loop
                break
            offset, payload = record
            payloads.append(payload)
        return payloads, offset

    def ack(self, offset: int, records: int) -> None:
        """Mark everything before ``offset`` (``records`` records) as delivered."""
        self._read_offset = offset
        self._pending = max(0, self._pending - records)
        if self._read_offset >= self._size:
            # Fully drained: start the file afresh so it does not grow forever.
            self._file.truncate(0)
            self._file.flush()
            self._size = self._read_offset = self._pending = 0
        self._save_ack()

    def _save_ack(self) -> None:
        tmp = self._ack_path.with_name(self._ack_path.name + ".tmp")
        tmp.write_text(str(self._read_offset))
        os.replace(tmp, self._ack_path)

    def close(self) -> None:
        """Close the file and release it (pending records stay for the next run)."""
        self._file.close()
