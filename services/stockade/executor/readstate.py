"""What each session has read, for stale-write protection (SPEC EXE-11).

An existing file may be overwritten or edited only after it was read in the same session
and has not changed since (the seed's ``read_file_state``). The state is keyed by
(session id, canonical path) and holds the file's size, mtime and SHA-256 at the read; the
digest decides (a touch that leaves the bytes alone is not a change, a same-size rewrite
within one mtime tick is).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from stockade.errors import ResourceExhausted, StaleWrite

__all__ = [
    "MAX_READS_PER_SESSION",
    "FileStamp",
    "ReadLedger",
    "ReadState",
    "check_fresh",
    "reads_exhausted",
    "stamp_fd",
]

#: Distinct files one session may have on record (every backend; the PostgreSQL function
#: enforces it too): past it a read of another file is refused, RESOURCE_EXHAUSTED, so one
#: session cannot grow the shared record without bound. Files already on record can be
#: read again (their record is updated).
MAX_READS_PER_SESSION = 10_000


def reads_exhausted(session_id: str, limit: int = MAX_READS_PER_SESSION) -> ResourceExhausted:
    """The refusal of a read past the per-session limit."""
    return ResourceExhausted(
        f"session {session_id!r} has {limit} files on record as read (the limit of "
        f"reads remembered per session, MAX_READS_PER_SESSION): start a new session to "
        "read more files"
    )


@dataclass(frozen=True)
class FileStamp:
    """A file's identity at one moment."""

    mtime_ns: int
    """Modification time in nanoseconds."""
    size: int
    """Size in bytes."""
    sha256: str
    """Hex SHA-256 of the content."""

    @classmethod
    def of_bytes(cls, data: bytes, st: os.stat_result) -> FileStamp:
        """The stamp of content ``data`` whose fstat is ``st``."""
        return cls(st.st_mtime_ns, len(data), hashlib.sha256(data).hexdigest())


def stamp_fd(fd: int) -> tuple[FileStamp, bytes]:
    """Read the whole file behind ``fd`` (from offset 0) and return its stamp and content."""
    st = os.fstat(fd)
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    data = b"".join(chunks)
    return FileStamp.of_bytes(data, st), data


def check_fresh(path: str, seen: FileStamp | None, current: FileStamp) -> None:
    """Raise :class:`StaleWrite` unless ``seen`` (the session's last read of ``path``)
    exists and has the content ``current`` has now."""
    if seen is None:
        raise StaleWrite(
            f"{path} exists but has not been read in this session: read it first",
            path=path,
        )
    if seen.size != current.size or seen.sha256 != current.sha256:
        raise StaleWrite(
            f"{path} changed since it was last read: read it again before writing",
            path=path,
        )


@runtime_checkable
class ReadLedger(Protocol):
    """What the file tools need of the read state (in memory, or shared by replicas)."""

    blocking: bool
    """True when calls wait for a store: the tool must then call from a worker thread."""

    def record(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """Remember that ``session_id`` saw ``path`` (canonical) as ``stamp``."""
        ...

    def require_fresh(self, session_id: str, path: str, current: FileStamp) -> None:
        """Raise :class:`StaleWrite` unless ``path`` was read in the session and is unchanged."""
        ...


class ReadState:
    """Per-session record of file reads in this process; bounded (least recently used
    entries go first). A deployment keeps reads in the shared store instead
    (``stockade.executor.state.StoreReadState``)."""

    blocking = False
    """In memory: safe to call on the event loop."""

    def __init__(
        self, max_entries: int = 50_000, *, per_session: int = MAX_READS_PER_SESSION
    ) -> None:
        """Keep at most ``max_entries`` (session, path) records, ``per_session`` of one
        session (past it: ``ResourceExhausted``)."""
        self._entries: OrderedDict[tuple[str, str], FileStamp] = OrderedDict()
        self._max = max_entries
        self._per_session = per_session
        self._counts: dict[str, int] = {}
        # Tools may run in worker threads; the dict is shared across sessions.
        self._lock = threading.Lock()

    def record(self, session_id: str, path: str, stamp: FileStamp) -> None:
        """Remember that ``session_id`` saw ``path`` (canonical) as ``stamp``; raise
        ``ResourceExhausted`` for a new path past the session's limit."""
        with self._lock:
            key = (session_id, path)
            if key not in self._entries:
                count = self._counts.get(session_id, 0)
                if count >= self._per_session:
                    raise reads_exhausted(session_id, self._per_session)
                self._counts[session_id] = count + 1
            self._entries[key] = stamp
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                (old_session, _), _ = self._entries.popitem(last=False)
                self._forget_one(old_session)

    def _forget_one(self, session_id: str) -> None:
        count = self._counts[session_id] - 1
        if count:
            self._counts[session_id] = count
        else:
            del self._counts[session_id]

    def get(self, session_id: str, path: str) -> FileStamp | None:
        """The stamp recorded for ``path`` in ``session_id``, if any."""
        with self._lock:
            return self._entries.get((session_id, path))

    def require_fresh(self, session_id: str, path: str, current: FileStamp) -> None:
        """Raise :class:`StaleWrite` unless ``path`` was read in the session and is unchanged."""
        check_fresh(path, self.get(session_id, path), current)

    def forget_session(self, session_id: str) -> None:
        """Drop everything recorded for ``session_id``."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == session_id]:
                del self._entries[key]
            self._counts.pop(session_id, None)

    def __len__(self) -> int:
        """How many (session, path) records are held."""
        with self._lock:
            return len(self._entries)
