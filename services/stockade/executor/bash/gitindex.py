"""The paths a git index tracks, read from ``.git/index`` without running git.

``git diff`` (work tree against the index) prints the index's copy of every tracked file
whose work-tree copy differs; a file the policy denies reading is masked at run time by an
empty file, so it always differs, and its tracked content is printed. The analysis asks
whether any tracked path is denied, so it reads the index itself: running git to ask
would run whatever the repository's configuration says (a planted ``core.fsmonitor``).

Formats 2, 3 and 4 (path prefix compression), SHA-1 and SHA-256 object names. Anything
unusual — a split or sparse index, an unknown version, a truncated file, more entries or
bytes than the bounds — is reported as unknown (None), which the caller asks about.
"""

from __future__ import annotations

import os
import struct

__all__ = ["MAX_INDEX_BYTES", "MAX_INDEX_ENTRIES", "parse_index", "tracked_paths"]

MAX_INDEX_BYTES = 64 << 20
"""A larger index is not read (unknown)."""
MAX_INDEX_ENTRIES = 200_000
"""An index with more entries is not read (unknown)."""

_STAT_BYTES = 40  # ctime, mtime (seconds and nanoseconds), dev, ino, mode, uid, gid, size
_EXTENDED = 0x4000


def tracked_paths(git_dir: str) -> list[str] | None:
    """The paths ``git_dir``'s index tracks (relative to the work tree's top, as git
    stores them); [] without an index; None when the index cannot be read with
    certainty."""
    path = os.path.join(git_dir, "index")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_INDEX_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    if len(data) > MAX_INDEX_BYTES:
        return None
    return parse_index(data, _hash_length(git_dir))


def parse_index(data: bytes, hash_length: int) -> list[str] | None:
    """The entry paths of an index file's bytes; None when anything is out of shape."""
    if len(data) < 12 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4) or count > MAX_INDEX_ENTRIES:
        return None
    names: list[str] = []
    position = 12
    previous = b""
    fixed = _STAT_BYTES + hash_length + 2
    try:
        for _ in range(count):
            start = position
            (flags,) = struct.unpack(">H", data[position + fixed - 2 : position + fixed])
            position += fixed
            if flags & _EXTENDED:
                if version < 3:
                    return None
                position += 2
            if version == 4:
                strip, position = _offset_varint(data, position)
                if strip > len(previous):
                    return None
                end = data.index(b"\0", position)
                name = previous[: len(previous) - strip] + data[position:end]
                position = end + 1
            else:
                end = data.index(b"\0", position)
                name = data[position:end]
                # Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
                position = start + ((end - start + 8) & ~7)
            if not name or position > len(data):
                return None
            previous = name
            names.append(name.decode("utf-8", "surrogateescape"))
    except (ValueError, struct.error, IndexError):
        return None
    if _has_extension(data, position, hash_length, (b"link", b"sdir")):
        return None  # split index (entries elsewhere) or sparse directories
    if any(name.endswith("/") for name in names):
        return None  # a sparse directory entry stands for files not listed
    return names


def _offset_varint(data: bytes, position: int) -> tuple[int, int]:
    """git's offset-encoded varint (varint.c decode_varint)."""
    byte = data[position]
    position += 1
    value = byte & 0x7F
    while byte & 0x80:
        value += 1
        byte = data[position]
        position += 1
        value = (value << 7) + (byte & 0x7F)
    return value, position


def _has_extension(data: bytes, position: int, hash_length: int, names: tuple[bytes, ...]) -> bool:
    """Whether one of the extensions ``names`` follows the entries (None-safe: a
    malformed extension area counts as having one)."""
    end = len(data) - hash_length
    while position + 8 <= end:
        signature = data[position : position + 4]
        (size,) = struct.unpack(">I", data[position + 4 : position + 8])
        if signature in names:
            return True
        position += 8 + size
    return position > end


def _hash_length(git_dir: str) -> int:
    """32 for a SHA-256 repository (``extensions.objectformat = sha256``), else 20."""
    try:
        with open(os.path.join(git_dir, "config"), "rb") as handle:
            config = handle.read(1 << 20).lower()
    except OSError:
        return 20
    compact = config.replace(b" ", b"").replace(b"\t", b"")
    return 32 if b"objectformat=sha256" in compact else 20
