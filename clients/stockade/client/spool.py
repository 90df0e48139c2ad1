"""A local append-only spool of serialized audit events (AUD-4).

The audit client writes every event here before the call's result is released (a
write-ahead log: a killed agent loses nothing it reported) and sends them, oldest first,
acknowledging as the service stores them. Records are framed as ``length (4 bytes, big
endian) | crc32 (4 bytes) | payload``; a torn or corrupt record at the end (the process
died mid-write) is cut off on open, and a write that fails part-way (a full disk) is cut
off at once, so the file never holds a torn record followed by good ones. Progress is
kept in a sidecar ``<name>.ack`` file holding the byte offset of the first record not yet
acknowledged, replaced atomically; after a crash between "acknowledged by the service"
and "offset saved" the same events are sent again, which the service ignores
(idempotent by event id). A fully acknowledged file is emptied; a file whose
acknowledged prefix grows past ``COMPACT_BYTES`` while newer records keep coming is
rewritten without it, so the spool stays as small as its backlog.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

_HEADER = struct.Struct(">II")
#: Largest single record; an audit event is far smaller (its fields are bounded).
MAX_RECORD_BYTES = 16 * 1024 * 1024
#: An acknowledged prefix at least this big is dropped by rewriting the file (when the
#: records after it are a quarter of its size or less).
COMPACT_BYTES = 8 * 1024 * 1024
#: Bytes read at once by ``peek``.
_READ_CHUNK = 1024 * 1024


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
        self._file = self._open_locked(self.path)  # held open for the spool's lifetime
        self._read_offset = self._load_ack()
        self._size, self._pending = self._scan()
        self.compactions = 0
        """Times the acknowledged prefix was dropped by rewriting the file."""

    @staticmethod
    def _open_locked(path: Path) -> io.FileIO:
        # Unbuffered: a failed write must not leave bytes in a buffer that a later flush
        # would write after the cut (see ``append``).
        file = io.FileIO(path, "a+")
        try:
            # Two writers interleaving records would corrupt the order (and the framing).
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            raise SpoolBusy(f"spool {path} is in use by another recorder") from None
        return file

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
        end = os.fstat(self._file.fileno()).st_size
        if self._read_offset > end:
            # The file was rewritten (compacted) after the position was saved.
            self._read_offset = 0
        offset, count = self._read_offset, 0
        while offset < end:
            payloads, offset, whole = self._read_records(offset, end, 1 << 30)
            count += len(payloads)
            if not whole:
                break
        if offset < end:
            self._file.truncate(offset)
        return offset, count

    def _read_records(self, offset: int, end: int, limit: int) -> tuple[list[bytes], int, bool]:
        """Up to ``limit`` records from ``offset`` (one read of about ``_READ_CHUNK``):
        (payloads, offset after them, False when a torn/corrupt record stopped it)."""
        fd = self._file.fileno()
        data = os.pread(fd, min(end - offset, _READ_CHUNK), offset)
        payloads: list[bytes] = []
        pos = 0
        while len(payloads) < limit and offset + pos < end:
            if len(data) - pos < _HEADER.size:
                if pos == 0:
                    return payloads, offset, False  # a torn header at the end
                break  # the next record starts past this chunk
            length, crc = _HEADER.unpack_from(data, pos)
            if length > MAX_RECORD_BYTES or end - offset - pos - _HEADER.size < length:
                return payloads, offset + pos, False
            start = pos + _HEADER.size
            if start + length > len(data):
                if pos == 0:  # one record bigger than the chunk: read it alone
                    data = os.pread(fd, _HEADER.size + length, offset)
                    if len(data) < _HEADER.size + length:
                        return payloads, offset, False
                else:
                    break
            payload = data[start : start + length]
            if zlib.crc32(payload) != crc:
                return payloads, offset + pos, False
            payloads.append(payload)
            pos = start + length
        return payloads, offset + pos, True

    # -- writing and reading -----------------------------------------------------------

    def append(self, payloads: Sequence[bytes]) -> None:
        """Append records, all or none: ``SpoolFull`` when the size limit would be
        passed, ``OSError`` (e.g. ENOSPC) when the disk refuses, and then nothing of them
        stays in the file (a partial write is cut off), so a later append is clean."""
        if not payloads:
            return
        data = b"".join(_HEADER.pack(len(p), zlib.crc32(p)) + p for p in payloads)
        if self._size + len(data) > self._max_bytes:
            raise SpoolFull(f"spool {self.path} would exceed {self._max_bytes} bytes")
        view = memoryview(data)
        try:
            while view:
                written = self._file.write(view)
                if not written:
                    raise OSError(errno.EIO, f"spool {self.path}: write made no progress")
                view = view[written:]
            if self._fsync:
                os.fsync(self._file.fileno())
        except OSError:
            with contextlib.suppress(OSError):
                self._file.truncate(self._size)  # back to the last whole record
            raise
        self._size += len(data)
        self._pending += len(payloads)

    def sync(self) -> None:
        """fsync the file: everything appended so far survives power loss."""
        os.fsync(self._file.fileno())

    def peek(self, max_records: int) -> tuple[list[bytes], int]:
        """Up to ``max_records`` oldest unacknowledged payloads (at most about
        ``_READ_CHUNK`` bytes unless one record is bigger) and the offset after them."""
        if self._read_offset >= self._size:
            return [], self._read_offset
        payloads, offset, _ = self._read_records(self._read_offset, self._size, max_records)
        return payloads, offset

    def ack(self, offset: int, records: int) -> None:
        """Mark everything before ``offset`` (``records`` records) as delivered."""
        self._read_offset = offset
        self._pending = max(0, self._pending - records)
        if self._read_offset >= self._size:
            # Fully drained: start the file afresh so it does not grow forever.
            self._file.truncate(0)
            self._size = self._read_offset = self._pending = 0
        elif self._read_offset >= COMPACT_BYTES and self._size - self._read_offset <= (
            self._read_offset // 4
        ):
            self._compact()
        self._save_ack()

    def _compact(self) -> None:
        """Rewrite the file without its acknowledged prefix (skipped if the disk refuses).

        Crash-safe: the new file replaces the old one atomically, and a saved position
        past the end of the (smaller) new file reads as 0 on open, so at worst some
        records are sent twice (the service ignores repeats), never skipped.
        """
        rest = os.pread(self._file.fileno(), self._size - self._read_offset, self._read_offset)
        tmp = self.path.with_name(self.path.name + ".compact")
        tmp.unlink(missing_ok=True)
        try:
            new = self._open_locked(tmp)
        except (OSError, SpoolBusy):
            return
        try:
            view = memoryview(rest)
            while view:
                view = view[new.write(view) :]
            if self._fsync:
                os.fsync(new.fileno())
            os.replace(tmp, self.path)
        except OSError:
            new.close()
            tmp.unlink(missing_ok=True)
            return
        old, self._file = self._file, new
        old.close()
        self._size, self._read_offset = len(rest), 0
        self.compactions += 1

    def _save_ack(self) -> None:
        tmp = self._ack_path.with_name(self._ack_path.name + ".tmp")
        try:
            tmp.write_text(str(self._read_offset))
            os.replace(tmp, self._ack_path)
        except OSError:
            # A full disk: the position in memory is right; only a crash before the next
            # successful save would send these records again (the service drops repeats).
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)

    def fileno(self) -> int:
        """The open file's descriptor (``sync`` from another thread dups it first)."""
        return self._file.fileno()

    def close(self) -> None:
        """Close the file and release it (pending records stay for the next run)."""
        self._file.close()
