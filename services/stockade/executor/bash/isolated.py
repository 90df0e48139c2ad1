"""Crash isolation for the shell parser: commands that are not ASCII are parsed in a child.

tree-sitter-bash is C code running inside the executor, fed text a model wrote. The
hypothesis tests found inputs that crash it (``{`` then a code point in Unicode planes
3-16; refused before parsing since), and not even reliably: the same text crashes one
process and not the next, the mark of a read out of bounds. Any such bug would take the
executor down with every call in flight, a denial of service a prompt-injected model
could repeat at will, or worse.

The fuzzed space is densest for ASCII, and commands are nearly always ASCII, so those
are parsed in process (about 10 µs). Anything else is parsed by a long-lived child
process (``python -m stockade.executor.bash.isolated``) which sends back the
``ParsedScript`` as JSON; the executor checks its shape field by field and never parses
that text itself. When the child dies, hangs past ``timeout_s`` or answers out of shape,
the command is refused, the child is reaped and a new one starts on the next such
command. The child caps its own address space. A parse gets ``timeout_s`` (commands are
at most 64 K characters and parse in milliseconds); starting a child gets
``startup_timeout_s``, since a busy machine can be slow to start Python.

Protocol on the child's stdin/stdout: one byte ``R`` once the child is ready; then, per
command, a 4-byte big-endian length and that many bytes of UTF-8 in, a 4-byte length
and that many bytes of JSON out.
"""

from __future__ import annotations

import json
import logging
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from stockade.executor.bash.parser import (
    Assignment,
    ParsedScript,
    RawCommand,
    Redirect,
    Word,
)

log = logging.getLogger(__name__)

MAX_INPUT_BYTES = 1 << 20
"""Largest command sent to the child."""
MAX_ANSWER_BYTES = 16 << 20
"""Largest answer accepted from the child."""
_READY = b"R"


def child_argv() -> list[str]:
    """The command that starts the child parser."""
    return [sys.executable, "-I", "-m", "stockade.executor.bash.isolated"]


class IsolatedParser:
    """Parses commands in a child process (thread-safe; one command at a time)."""

    def __init__(
        self,
        argv: Sequence[str] | None = None,
        *,
        timeout_s: float = 0.5,
        startup_timeout_s: float = 10.0,
    ) -> None:
        self._argv = list(argv or child_argv())
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.restarts = 0
        """How many children were replaced after a crash, a hang or a bad answer."""

    def parse(self, source: str) -> ParsedScript | None:
        """The child's parse of ``source``; None when it crashed, hung or answered out of
        shape (the caller refuses the command)."""
        data = source.encode("utf-8")
        if len(data) > MAX_INPUT_BYTES:
            return None
        with self._lock:
            answer = None
            proc = self._child()
            if proc is not None:
                assert proc.stdin is not None and proc.stdout is not None
                deadline = time.monotonic() + self.timeout_s
                request = struct.pack(">I", len(data)) + data
                try:
                    if _write_all(proc.stdin.fileno(), request, deadline):
                        answer = self._read_answer(proc.stdout.fileno(), deadline)
                except OSError:  # EPIPE: the child is gone
                    pass
            script = decode_script(answer) if answer is not None else None
            if script is not None:
                return script
            # Never the command itself: it can hold secrets.
            log.warning(
                "the isolated shell parser crashed, hung or answered out of shape on a "
                "%d-byte command; refused it and starting a new child",
                len(data),
            )
            self._discard()
            return None

    def warm(self) -> bool:
        """Start the child now (it takes Python's start-up time), not on the first
        command that needs it; True when it is ready."""
        with self._lock:
            if self._child() is not None:
                return True
            self._discard()
            return False

    def close(self) -> None:
        """Stop the child."""
        with self._lock:
            self._discard(replace=False)

    def _child(self) -> subprocess.Popen[bytes] | None:
        """The running child, started if needed; None when it did not get ready."""
        if self._proc is not None and self._proc.poll() is not None:
            self._discard()
        if self._proc is None:
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
            assert self._proc.stdin is not None and self._proc.stdout is not None
            # Writes wait for room with a deadline (a child that stops reading cannot
            # block the executor on a full pipe).
            os.set_blocking(self._proc.stdin.fileno(), False)
            deadline = time.monotonic() + self.startup_timeout_s
            if _read_exactly(self._proc.stdout.fileno(), 1, deadline) != _READY:
                return None  # the caller refuses the command and discards this child
        return self._proc

    def _read_answer(self, fd: int, deadline: float) -> bytes | None:
        header = _read_exactly(fd, 4, deadline)
        if header is None:
            return None
        (size,) = struct.unpack(">I", header)
        if size > MAX_ANSWER_BYTES:
            return None
        return _read_exactly(fd, size, deadline)

    def _discard(self, *, replace: bool = True) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        if replace:
            self.restarts += 1


def _write_all(fd: int, data: bytes, deadline: float) -> bool:
    """Write ``data`` to the non-blocking ``fd`` by ``deadline``; False when it could not."""
    view = memoryview(data)
    while view:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([], [fd], [], wait)[1]:
            return False
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue
    return True


def _read_exactly(fd: int, size: int, deadline: float) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            return None
        chunk = os.read(fd, left)
        if not chunk:
            return None  # EOF: the child died
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- the ParsedScript on the wire ---------------------------------------------------------


def _word(w: Word | None) -> list[Any] | None:
    if w is None:
        return None
    braces = None if w.braces is None else [_word(b) for b in w.braces]
    return [w.text, w.value, w.quoted, w.expanded, w.glob, w.home_path, braces]


def _redirect(r: Redirect) -> list[Any]:
    return [r.op, r.fd, _word(r.target)]


def _assignment(a: Assignment) -> list[Any]:
    return [a.name, _word(a.value), a.raw, a.kind]


def encode_script(s: ParsedScript) -> bytes:
    """``s`` as JSON (positional lists, in field order)."""
    commands = [
        [
            _word(c.name),
            [_word(w) for w in c.args],
            [_assignment(a) for a in c.assignments],
            [_redirect(r) for r in c.redirects],
            c.in_function,
        ]
        for c in s.commands
    ]
    return json.dumps(
        [
            commands,
            [_redirect(r) for r in s.redirects],
            [_assignment(a) for a in s.assignments],
            list(s.functions),
            list(s.recursive_functions),
            list(s.evaluated_texts),
            s.error,
            s.empty,
            list(s.arithmetic_names),
        ],
        ensure_ascii=False,
    ).encode("utf-8")


class _Shape(ValueError):
    """The answer does not have the shape of a ParsedScript."""


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise _Shape
    return v


def _opt_str(v: Any) -> str | None:
    return None if v is None else _str(v)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Shape
    return v


def _items(v: Any, n: int | None = None) -> list[Any]:
    if not isinstance(v, list) or (n is not None and len(v) != n):
        raise _Shape
    return v


def _tuple_of(v: Any, item: Callable[[Any], Any]) -> tuple[Any, ...]:
    return tuple(item(x) for x in _items(v))


def _to_word(v: Any) -> Word:
    text, value, quoted, expanded, glob, home, braces = _items(v, 7)
    items = None if braces is None else _tuple_of(braces, _to_word)
    return Word(_str(text), _opt_str(value), _bool(quoted), _bool(expanded), _bool(glob),
                _opt_str(home), items)  # fmt: skip


def _to_opt_word(v: Any) -> Word | None:
    return None if v is None else _to_word(v)


def _to_redirect(v: Any) -> Redirect:
    op, fd, target = _items(v, 3)
    return Redirect(_str(op), _opt_str(fd), _to_opt_word(target))


def _to_assignment(v: Any) -> Assignment:
    name, value, raw, kind = _items(v, 4)
    return Assignment(_str(name), _to_opt_word(value), _str(raw), _str(kind))


def _to_command(v: Any) -> RawCommand:
    name, args, assignments, redirects, in_function = _items(v, 5)
    return RawCommand(
        _to_word(name),
        _tuple_of(args, _to_word),
        _tuple_of(assignments, _to_assignment),
        _tuple_of(redirects, _to_redirect),
        _opt_str(in_function),
    )


def decode_script(data: bytes) -> ParsedScript | None:
    """The ParsedScript in ``data``; None for anything not exactly of its shape."""
    try:
        (commands, redirects, assignments, functions, recursive, evaluated, error, empty,
         arithmetic) = _items(json.loads(data), 9)  # fmt: skip
        return ParsedScript(
            _tuple_of(commands, _to_command),
            _tuple_of(redirects, _to_redirect),
            _tuple_of(assignments, _to_assignment),
            _tuple_of(functions, _str),
            _tuple_of(recursive, _str),
            _tuple_of(evaluated, _str),
            _opt_str(error),
            _bool(empty),
            _tuple_of(arithmetic, _str),
        )
    except (ValueError, RecursionError):  # _Shape, bad JSON, bad UTF-8
        return None


def _serve() -> None:
    """The child: parse each command that arrives, answer with its ParsedScript."""
    import resource

    from stockade.executor.bash.parser import parse_here

    # A parser bug that allocates without end hits this limit, not the executor's memory.
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(_READY)
    stdout.flush()
    while True:
        header = stdin.read(4)
        if len(header) < 4:
            return
        (size,) = struct.unpack(">I", header)
        if size > MAX_INPUT_BYTES:
            return
        answer = encode_script(parse_here(stdin.read(size).decode("utf-8")))
        stdout.write(struct.pack(">I", len(answer)) + answer)
        stdout.flush()


if __name__ == "__main__":
    _serve()
