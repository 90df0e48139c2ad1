"""Whether a repository's history holds a path the policy denies reading, read from the
object store without running git.

``git log -p -- x``, ``git diff HEAD~3 -- dir``, ``git show <commit>`` print the committed
content of every file under their pathspecs, in every commit they walk: a file the policy
denies reading (masked at run time) is printed from the object store. A pathspec that
names a file today may have been a directory in older commits (``x/.env``), and
``--follow`` crosses renames from any name. So the analysis asks this module whether any
commit reachable from anything git can name — every ref, every reflog entry, the
``*HEAD`` files, the commits the command names by id — holds, under the pathspecs' leading
directories, a path the policy denies. Only when the answer is a certain "no" is such a
form allowed without a person.

Why not run git: git reads the repository's configuration, which a planted file can make
run commands (``core.fsmonitor``, ``gpg.program`` for ``log.showSignature`` ...). So the
object store is read here: loose objects and packs (index v2, offset and reference
deltas), SHA-1 and SHA-256. Anything unusual is *unknown* (None), which the caller asks
about: alternates, grafts, replace refs, a linked worktree or ``.git`` file, a missing
object outside a shallow boundary (a partial clone fetches it), a submodule under the
pathspecs (its own history), a tree or blob named directly, and any bound below.

Cost: only git forms that print contents with protected reads in force call this. Objects
are immutable, so what was learned (commit parents and trees, whether a tree holds a
denied path) is kept in a bounded :class:`HistoryCache` across analyses.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence

__all__ = ["MAX_COMMITS", "MAX_OBJECTS", "HistoryCache", "history_holds_denied"]

MAX_COMMITS = 10_000
"""More reachable commits than this: unknown."""
MAX_OBJECTS = 5_000
"""More objects read (uncached) in one question than this: unknown. The analysis runs on
the executor's event loop: this bounds a first look at a repository to well under a
second on an idle machine (what is read is kept, so the next question costs little)."""
MAX_REFS = 20_000
"""More refs and reflog entries than this: unknown."""
MAX_OBJECT_BYTES = 32 << 20
"""A commit, tag or tree larger than this: unknown."""
MAX_DELTA_DEPTH = 128
_MAX_TREE_DEPTH = 128
_CACHE_COMMITS = 100_000
_CACHE_TREES = 200_000

_TYPES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
_HEX = re.compile(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_GITLINK = b"160000"
_TREE = b"40000"


class Unknown(Exception):
    """The history cannot be read with certainty."""


class HistoryCache:
    """What was learned from immutable objects, kept across analyses (bounded)."""

    __slots__ = ("commits", "trees")

    def __init__(self) -> None:
        self.commits: dict[bytes, tuple[bytes, tuple[bytes, ...]]] = {}
        """commit id -> (tree id, parent ids)."""
        self.trees: dict[tuple[str, bytes, str], bool] = {}
        """(work tree top, tree id, path of the tree) -> it holds a denied path."""

    def remember_commit(self, oid: bytes, value: tuple[bytes, tuple[bytes, ...]]) -> None:
        if len(self.commits) >= _CACHE_COMMITS:
            self.commits.clear()
        self.commits[oid] = value

    def remember_tree(self, key: tuple[str, bytes, str], value: bool) -> None:
        if len(self.trees) >= _CACHE_TREES:
            self.trees.clear()
        self.trees[key] = value


class _Pack:
    """One pack: its index (v2) and data, memory-mapped."""

    def __init__(self, idx_path: str, pack_path: str, hash_len: int) -> None:
        self.hash_len = hash_len
        with open(idx_path, "rb") as f:
            self.idx = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        with open(pack_path, "rb") as f:
            self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self.idx[:8] != b"\377tOc\0\0\0\2" or self.data[:4] != b"PACK":
            raise Unknown("unsupported pack")
        self.count = struct.unpack(">I", self.idx[8 + 255 * 4 : 8 + 256 * 4])[0]
        self.names = 8 + 256 * 4
        self.offsets = self.names + self.count * (hash_len + 4)
        self.large = self.offsets + self.count * 4
        if len(self.idx) < self.large:
            raise Unknown("truncated pack index")

    def close(self) -> None:
        self.idx.close()
        self.data.close()

    def _name(self, k: int) -> bytes:
        start = self.names + k * self.hash_len
        return bytes(self.idx[start : start + self.hash_len])

    def _range(self, first: int) -> tuple[int, int]:
        """The index entries whose first byte is ``first`` (the fan-out table)."""
        lo = 0 if first == 0 else self._fanout(first - 1)
        return lo, self._fanout(first)

    def _fanout(self, k: int) -> int:
        return int(struct.unpack(">I", self.idx[8 + k * 4 : 12 + k * 4])[0])

    def find(self, oid: bytes) -> int | None:
        """The offset of ``oid`` in the pack, or None."""
        lo, hi = self._range(oid[0])
        while lo < hi:
            mid = (lo + hi) // 2
            name = self._name(mid)
            if name == oid:
                return self._offset(mid)
            if name < oid:
                lo = mid + 1
            else:
                hi = mid
        return None

    def starting_with(self, prefix: bytes, odd: int | None) -> list[bytes]:
        """Object ids beginning with ``prefix`` (and the half byte ``odd``)."""
        if not prefix:
            return []  # a single hex digit is never taken as an object id
        lo, hi = self._range(prefix[0])
        out: list[bytes] = []
        while lo < hi:
            mid = (lo + hi) // 2
            if self._name(mid)[: len(prefix)] < prefix:
                lo = mid + 1
            else:
                hi = mid
        while lo < self.count and len(out) < 64:
            name = self._name(lo)
            if name[: len(prefix)] != prefix:
                break
            if odd is None or name[len(prefix)] >> 4 == odd:
                out.append(name)
            lo += 1
        return out

    def _offset(self, k: int) -> int:
        start = self.offsets + k * 4
        (offset,) = struct.unpack(">I", self.idx[start : start + 4])
        if offset & 0x80000000:
            big = self.large + (offset & 0x7FFFFFFF) * 8
            (offset,) = struct.unpack(">Q", self.idx[big : big + 8])
        return int(offset)


class _Store:
    """The object store of one git directory (loose objects and packs)."""

    def __init__(self, git_dir: str, hash_len: int) -> None:
        self.objects = os.path.join(git_dir, "objects")
        self.hash_len = hash_len
        self.packs: list[_Pack] = []
        self.reads = 0
        self.bases: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        pack_dir = os.path.join(self.objects, "pack")
        try:
            names = sorted(os.listdir(pack_dir))
        except FileNotFoundError:
            names = []
        except OSError as exc:
            raise Unknown(str(exc)) from exc
        try:
            for name in names:
                if name.endswith(".idx"):
                    pack = os.path.join(pack_dir, name[:-4] + ".pack")
                    if os.path.exists(pack):
                        self.packs.append(_Pack(os.path.join(pack_dir, name), pack, hash_len))
        except (OSError, ValueError, struct.error) as exc:
            self.close()
            raise Unknown(str(exc)) from exc

    def close(self) -> None:
        for pack in self.packs:
            pack.close()
        self.packs = []

    def read(self, oid: bytes) -> tuple[bytes, bytes] | None:
        """(type, content) of ``oid``; None when the store does not hold it."""
        self.reads += 1
        if self.reads > MAX_OBJECTS:
            raise Unknown("too many objects")
        for k, pack in enumerate(self.packs):
            offset = pack.find(oid)
            if offset is not None:
                return self._packed(k, offset, 0)
        hexid = oid.hex()
        path = os.path.join(self.objects, hexid[:2], hexid[2:])
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_OBJECT_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Unknown(str(exc)) from exc
        data = _inflate(raw, MAX_OBJECT_BYTES + 64)
        header, sep, body = data.partition(b"\0")
        kind, _, size = header.partition(b" ")
        if not sep or kind not in _TYPES.values() or size != str(len(body)).encode():
            raise Unknown("malformed loose object")
        return kind, body

    def _packed(self, k: int, offset: int, depth: int) -> tuple[bytes, bytes]:
        cached = self.bases.get((k, offset))
        if cached is not None:
            return cached
        if depth > MAX_DELTA_DEPTH:
            raise Unknown("delta chain too deep")
        pack = self.packs[k]
        data = pack.data
        c = data[offset]
        kind = (c >> 4) & 7
        size = c & 15
        shift = 4
        pos = offset + 1
        while c & 0x80:
            c = data[pos]
            pos += 1
            size |= (c & 0x7F) << shift
            shift += 7
        if size > MAX_OBJECT_BYTES:
            raise Unknown("object too large")
        if kind in _TYPES:
            result = (_TYPES[kind], _inflate_at(data, pos, size))
        elif kind == 6:  # OFS_DELTA: the base lies earlier in this pack
            c = data[pos]
            pos += 1
            back = c & 0x7F
            while c & 0x80:
                c = data[pos]
                pos += 1
                back = ((back + 1) << 7) | (c & 0x7F)
            base = self._packed(k, offset - back, depth + 1)
            result = (base[0], _apply_delta(base[1], _inflate_at(data, pos, size)))
        elif kind == 7:  # REF_DELTA: the base is named by id
            base_oid = bytes(data[pos : pos + self.hash_len])
            pos += self.hash_len
            found = self.read(base_oid)
            if found is None:
                raise Unknown("delta base missing")
            result = (found[0], _apply_delta(found[1], _inflate_at(data, pos, size)))
        else:
            raise Unknown("unknown pack entry type")
        if result[0] != b"blob":
            if len(self.bases) >= 4096:
                self.bases.clear()
            self.bases[(k, offset)] = result
        return result

    def starting_with(self, hexprefix: str) -> list[bytes]:
        """Every object id beginning with ``hexprefix`` (at least 4 hex digits)."""
        whole = bytes.fromhex(hexprefix[: len(hexprefix) // 2 * 2])
        odd = int(hexprefix[-1], 16) if len(hexprefix) % 2 else None
        out: set[bytes] = set()
        for pack in self.packs:
            out.update(pack.starting_with(whole, odd))
        directory = os.path.join(self.objects, hexprefix[:2])
        try:
            for name in os.listdir(directory):
                if name.startswith(hexprefix[2:]) and len(name) == self.hash_len * 2 - 2:
                    out.add(bytes.fromhex(hexprefix[:2] + name))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            raise Unknown(str(exc)) from exc
        return sorted(out)


def _inflate(raw: bytes, limit: int) -> bytes:
    try:
        d = zlib.decompressobj()
        out = d.decompress(raw, limit)
    except zlib.error as exc:
        raise Unknown("corrupt object") from exc
    if d.unconsumed_tail:
        raise Unknown("object too large")
    return out


def _inflate_at(data: mmap.mmap, pos: int, size: int) -> bytes:
    """``size`` bytes inflated from the zlib stream at ``pos``."""
    d = zlib.decompressobj()
    out = b""
    chunk = size + 64
    try:
        while len(out) < size and not d.eof:
            piece = data[pos : pos + chunk]
            if not piece:
                break
            pos += len(piece)
            out += d.decompress(d.unconsumed_tail + piece, size + 1 - len(out))
            chunk = 1 << 16
    except zlib.error as exc:
        raise Unknown("corrupt pack entry") from exc
    if len(out) != size:
        raise Unknown("pack entry size mismatch")
    return out


def _varint(delta: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        c = delta[pos]
        pos += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return value, pos


def _apply_delta(base: bytes, delta: bytes) -> bytes:
    """git's delta format: source size, target size, then copy and insert instructions."""
    try:
        source, pos = _varint(delta, 0)
        target, pos = _varint(delta, pos)
        if source != len(base) or target > MAX_OBJECT_BYTES:
            raise Unknown("delta does not fit its base")
        out = bytearray()
        while pos < len(delta):
            c = delta[pos]
            pos += 1
            if c & 0x80:
                offset = size = 0
                for bit in range(4):
                    if c & (1 << bit):
                        offset |= delta[pos] << (8 * bit)
                        pos += 1
                for bit in range(3):
                    if c & (0x10 << bit):
                        size |= delta[pos] << (8 * bit)
                        pos += 1
                size = size or 0x10000
                if offset + size > len(base):
                    raise Unknown("delta copies past its base")
                out += base[offset : offset + size]
            elif c:
                out += delta[pos : pos + c]
                pos += c
            else:
                raise Unknown("reserved delta instruction")
    except IndexError as exc:
        raise Unknown("truncated delta") from exc
    if len(out) != target:
        raise Unknown("delta result size mismatch")
    return bytes(out)


def _hash_length(git_dir: str) -> int:
    try:
        with open(os.path.join(git_dir, "config"), "rb") as handle:
            config = handle.read(1 << 20).lower()
    except OSError:
        return 20
    compact = config.replace(b" ", b"").replace(b"\t", b"")
    return 32 if b"objectformat=sha256" in compact else 20


def _starts(git_dir: str, hash_len: int) -> tuple[set[bytes], set[bytes]]:
    """(commits named by refs and ``*HEAD`` files, commits named by reflogs). Raises
    Unknown for replace refs and past the bounds."""
    named: set[bytes] = set()
    logged: set[bytes] = set()  # kept apart only for the bound's count
    width = hash_len * 2

    def ids(text: bytes, into: set[bytes]) -> None:
        for match in _HEX.finditer(text):
            if len(match.group()) == width:
                into.add(bytes.fromhex(match.group().decode()))
        if len(named) + len(logged) > MAX_REFS:
            raise Unknown("too many refs")

    def read(path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read(1 << 24)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return b""
        except OSError as exc:
            raise Unknown(str(exc)) from exc

    def tree(directory: str, into: set[bytes]) -> None:
        count = 0
        for dirpath, dirnames, filenames in os.walk(directory):
            dirnames.sort()
            for name in filenames:
                if name == "index":
                    continue  # a linked worktree's index (binary; its paths may look hexadecimal)
                count += 1
                if count > MAX_REFS:
                    raise Unknown("too many refs")
                ids(read(os.path.join(dirpath, name)), into)

    if os.path.isdir(os.path.join(git_dir, "refs", "replace")) and os.listdir(
        os.path.join(git_dir, "refs", "replace")
    ):
        raise Unknown("replace refs")
    packed = read(os.path.join(git_dir, "packed-refs"))
    if b"refs/replace/" in packed:
        raise Unknown("replace refs")
    ids(packed, named)
    try:
        top = os.listdir(git_dir)
    except OSError as exc:
        raise Unknown(str(exc)) from exc
    for name in top:
        if name.endswith("HEAD"):  # HEAD, ORIG_HEAD, FETCH_HEAD, MERGE_HEAD ...
            ids(read(os.path.join(git_dir, name)), named)
    tree(os.path.join(git_dir, "refs"), named)
    tree(os.path.join(git_dir, "logs"), logged)
    worktrees = os.path.join(git_dir, "worktrees")
    if os.path.isdir(worktrees):
        tree(worktrees, named)  # linked worktrees' HEADs, reflogs (and a few other files)
    return named, logged  # `HEAD` as `ref: refs/heads/x`: that ref is among the refs


def _refuse_layout(git_dir: str) -> None:
    for unusual in ("commondir", "objects/info/alternates", "info/grafts"):
        if os.path.lexists(os.path.join(git_dir, unusual)):
            raise Unknown(unusual)


def _shallow(git_dir: str, hash_len: int) -> set[bytes]:
    try:
        with open(os.path.join(git_dir, "shallow"), "rb") as f:
            text = f.read(1 << 24)
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise Unknown(str(exc)) from exc
    return {
        bytes.fromhex(m.group().decode())
        for m in _HEX.finditer(text)
        if len(m.group()) == hash_len * 2
    }


def _parse_commit(body: bytes, hash_len: int) -> tuple[bytes, tuple[bytes, ...]]:
    tree = b""
    parents: list[bytes] = []
    for line in body.split(b"\n"):
        if not line:
            break
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = bytes.fromhex(value.decode("ascii"))
        elif key == b"parent":
            parents.append(bytes.fromhex(value.decode("ascii")))
    if len(tree) != hash_len or any(len(p) != hash_len for p in parents):
        raise Unknown("malformed commit")
    return tree, tuple(parents)


def _tree_entries(body: bytes, hash_len: int) -> Iterable[tuple[bytes, bytes, bytes]]:
    """(mode, name, id) of each entry of a tree object."""
    pos = 0
    while pos < len(body):
        space = body.index(b" ", pos)
        nul = body.index(b"\0", space)
        mode = body[pos:space]
        name = body[space + 1 : nul]
        oid = body[nul + 1 : nul + 1 + hash_len]
        if len(oid) != hash_len or not name or b"/" in name:
            raise Unknown("malformed tree")
        yield mode, name, oid
        pos = nul + 1 + hash_len


class _History:
    """One question about one repository's history."""

    def __init__(
        self,
        git_dir: str,
        top: str,
        denied: Callable[[str], bool],
        cache: HistoryCache,
    ) -> None:
        self.git_dir = git_dir
        self.top = top
        self.denied = denied
        self.cache = cache
        self.hash_len = _hash_length(git_dir)
        self.store = _Store(git_dir, self.hash_len)

    def object(self, oid: bytes) -> tuple[bytes, bytes] | None:
        return self.store.read(oid)

    def commit(self, oid: bytes) -> tuple[bytes, tuple[bytes, ...]] | None:
        known = self.cache.commits.get(oid)
        if known is not None:
            return known
        found = self.object(oid)
        if found is None:
            return None
        kind, body = found
        if kind != b"commit":
            raise Unknown("not a commit")
        value = _parse_commit(body, self.hash_len)
        self.cache.remember_commit(oid, value)
        return value

    def peel(self, oid: bytes) -> tuple[bytes, bytes] | None:
        """(type, id) after following tags; None when the object is missing."""
        for _ in range(16):
            if oid in self.cache.commits:
                return b"commit", oid
            found = self.object(oid)
            if found is None:
                return None
            kind, body = found
            if kind != b"tag":
                if kind == b"commit":
                    self.cache.remember_commit(oid, _parse_commit(body, self.hash_len))
                return kind, oid
            first = body.split(b"\n", 1)[0]
            if not first.startswith(b"object "):
                raise Unknown("malformed tag")
            oid = bytes.fromhex(first[7:].decode("ascii"))
        raise Unknown("tag chain too long")

    def tree(self, oid: bytes) -> list[tuple[bytes, bytes, bytes]]:
        found = self.object(oid)
        if found is None or found[0] != b"tree":
            raise Unknown("tree missing")
        try:
            return list(_tree_entries(found[1], self.hash_len))
        except ValueError as exc:
            raise Unknown("malformed tree") from exc

    def holds_denied(self, oid: bytes, path: str, depth: int = 0) -> bool:
        """Whether the tree ``oid`` (at ``path`` in the work tree) holds a denied path."""
        key = (self.top, oid, path)
        known = self.cache.trees.get(key)
        if known is not None:
            return known
        if depth > _MAX_TREE_DEPTH:
            raise Unknown("tree too deep")
        result = False
        base = f"{self.top}/{path}/" if path else f"{self.top.rstrip('/')}/"
        for mode, raw, child in self.tree(oid):
            name = raw.decode("utf-8", "surrogateescape")
            if mode == _GITLINK:
                raise Unknown("a submodule (its own history)")
            if self.denied(base + name):
                result = True
                break
            inner = f"{path}/{name}" if path else name
            if mode == _TREE and self.holds_denied(child, inner, depth + 1):
                result = True
                break
        self.cache.remember_tree(key, result)
        return result

    def under(self, root: bytes, prefix: str) -> bool:
        """Whether the commit tree ``root`` holds a denied path at or under ``prefix``
        (components compared without case: a superset of what git may match)."""
        if not prefix:
            return self.holds_denied(root, "")
        key = (self.top, root, "\0" + prefix)  # no path holds a NUL: its own key space
        known = self.cache.trees.get(key)
        if known is None:
            known = self._under(root, prefix)
            self.cache.remember_tree(key, known)
        return known

    def _under(self, root: bytes, prefix: str) -> bool:
        level = [(root, "")]
        parts = prefix.split("/")
        for k, part in enumerate(parts):
            nxt: list[tuple[bytes, str]] = []
            for oid, path in level:
                for mode, raw, child in self.tree(oid):
                    name = raw.decode("utf-8", "surrogateescape")
                    if name.lower() != part.lower():
                        continue
                    inner = f"{path}/{name}" if path else name
                    if mode == _GITLINK:
                        raise Unknown("a submodule (its own history)")
                    if self.denied(os.path.join(self.top, inner)):
                        return True
                    if mode == _TREE:
                        if k == len(parts) - 1:
                            if self.holds_denied(child, inner):
                                return True
                        else:
                            nxt.append((child, inner))
            level = nxt
            if not level:
                break
        return False

    def run(self, prefixes: Sequence[str], ids: Sequence[str]) -> bool:
        _refuse_layout(self.git_dir)
        named, logged = _starts(self.git_dir, self.hash_len)
        shallow = _shallow(self.git_dir, self.hash_len)
        starts = sorted(named | logged)
        for hexid in ids:
            starts += self.store.starting_with(hexid.lower())
        pending: list[bytes] = []
        for oid in starts:
            peeled = self.peel(oid)
            if peeled is None:
                continue  # a ref to a pruned object: git cannot show it either
            kind, target = peeled
            if kind == b"commit":
                pending.append(target)
            elif kind == b"tree" or kind == b"blob":
                # A tree or blob named directly (a tag of a blob, an id in the command):
                # where it sits in the work tree is not known.
                raise Unknown(f"a {kind.decode()} named directly")
        seen: set[bytes] = set()
        while pending:
            oid = pending.pop()
            if oid in seen:
                continue
            seen.add(oid)
            if len(seen) > MAX_COMMITS:
                raise Unknown("too many commits")
            value = self.commit(oid)
            if value is None:
                if oid in shallow:
                    continue
                raise Unknown("a commit is missing (partial clone?)")
            tree, parents = value
            for prefix in prefixes:
                if self.under(tree, prefix):
                    return True
            if oid not in shallow:
                pending.extend(p for p in parents if p not in seen)
        return False

    def close(self) -> None:
        self.store.close()


def history_holds_denied(
    git_dir: str,
    top: str,
    prefixes: Sequence[str],
    ids: Sequence[str],
    denied: Callable[[str], bool],
    cache: HistoryCache,
) -> bool | None:
    """Whether a commit git can reach in ``git_dir`` holds, at or under one of
    ``prefixes`` (paths relative to ``top``, ``""`` for the whole tree), a path for which
    ``denied(absolute path)`` is true. ``ids``: object ids (abbreviated) the command
    names, also walked. None when it cannot be told with certainty."""
    try:
        history = _History(git_dir, top, denied, cache)
    except Unknown:
        return None
    try:
        return history.run(prefixes, ids)
    except (Unknown, OSError, ValueError, IndexError, struct.error, RecursionError):
        return None
    finally:
        history.close()
