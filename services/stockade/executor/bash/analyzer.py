"""The judgement of a bash command line (SPEC EXE-6 … EXE-8), and the object that owns it.

:class:`BashAnalyzer` parses once (parser.py: in process for ASCII text, in an isolated
child process for anything else), walks every simple command, redirection and assignment
(walker.py, with one judge per program family in judges/) and folds the findings into one
verdict: ALLOW only when everything is read-only and stays inside the roots, DENY when
anything is destructive, escalating, shell-spawning, obfuscated, exfiltrating or cannot be
parsed, ASK for everything else.

The executor's composition opens one analyzer and closes it when it stops (the child
parser goes with it); nothing is started at import or cleaned up at interpreter exit.
:func:`analyze` is the one-shot form for the CLI and tests: it holds no child process and
parses text that is not ASCII in a child started and stopped for that one command.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal

from stockade.contract.shell import MAX_COMMAND_CHARS
from stockade.executor.bash.explain import Finding, explain, risk_of
from stockade.executor.bash.isolated import IsolatedParser
from stockade.executor.bash.parser import ParsedScript, parse
from stockade.executor.bash.walker import SimpleCommand, WalkContext, Walker
from stockade.executor.paths import PathSandbox, Root

__all__ = ["BashAnalysis", "BashAnalyzer", "SimpleCommand", "analyze"]

Verdict = Literal["allow", "ask", "deny"]
Risk = Literal["low", "medium", "high"]

# Distinct (home, denied reads) pairs whose compiled patterns are kept (a policy reload
# makes a new pair; the old one ages out).
_MAX_CONTEXTS: Final = 16
# Parses kept by command text: Execute judges again the command Inspect judged a moment
# before (EXE-12), and agents repeat commands. The parse depends on the text alone; the
# judgement (paths, globs, git layout on disk) is always made afresh. Bounded by entries
# and by the length of the commands kept.
PARSE_CACHE_ENTRIES: Final = 512
_MAX_CACHED_CHARS: Final = 4096


def _environ_store() -> dict[bytes, bytes] | None:
    """os.environ's own store of the environment on POSIX (CPython keeps the bytes of
    every variable in ``os.environ._data`` and updates it on every change made through
    os.environ), or None when this interpreter keeps it otherwise."""
    store = getattr(os.environ, "_data", None)
    if os.name != "posix" or not isinstance(store, dict):
        return None
    if any(not isinstance(k, bytes) or not isinstance(v, bytes) for k, v in store.items()):
        return None
    return store


_ENVIRON: Final = os.environ
_ENVIRON_STORE: Final = _environ_store()
_FS_ENCODING: Final = sys.getfilesystemencoding()


def _home_variable() -> str | None:
    """``os.environ.get("HOME")``, read from os.environ's store: the same value (the key
    and value coded as os.environ codes them) without the four interpreted frames of
    Mapping.get, several thousand instructions on every analysis (PERF-4a)."""
    store = _ENVIRON_STORE
    if store is None or os.environ is not _ENVIRON:  # (os.environ replaced: a test's)
        return os.environ.get("HOME")
    raw = store.get(b"HOME")
    return raw.decode(_FS_ENCODING, "surrogateescape") if raw is not None else None


# init=False, and an __init__ of our own that sets each field with object.__setattr__ (what
# the generated one does): mypyc compiles these calls to direct stores, while the generated
# __init__ stays interpreted Python, about 15,000 instructions per result (PERF-4a; every
# analysis builds one). Frozen, equality, hash, repr and asdict are the dataclass's own.
@dataclass(frozen=True, init=False)
class BashAnalysis:
    """The structured result of judging one command line (EXE-8)."""

    verdict: Verdict
    """allow / ask / deny."""
    reasons: tuple[str, ...]
    """Every finding, most severe first (empty for allow)."""
    commands: tuple[SimpleCommand, ...]
    """Every simple command in every position, in source order (wrapped ones included)."""
    paths_read: tuple[str, ...]
    """Canonical paths the command reads (as far as its arguments tell)."""
    paths_written: tuple[str, ...]
    """Canonical paths the command writes."""
    needs_network: bool
    """Whether it uses the network."""
    read_only: bool
    """Whether it has no side effects at all."""
    risk: Risk
    """LOW / MEDIUM / HIGH (DEC-10)."""
    explanation: str
    """One sentence for a human (DEC-10)."""
    bypass_immune: bool
    """An ASK that neither allow rules nor bypass mode may settle (reads outside the roots,
    paths only known at run time)."""

    def __init__(
        self,
        verdict: Verdict,
        reasons: tuple[str, ...],
        commands: tuple[SimpleCommand, ...],
        paths_read: tuple[str, ...],
        paths_written: tuple[str, ...],
        needs_network: bool,
        read_only: bool,
        risk: Risk,
        explanation: str,
        bypass_immune: bool,
    ) -> None:
        object.__setattr__(self, "verdict", verdict)
        object.__setattr__(self, "reasons", reasons)
        object.__setattr__(self, "commands", commands)
        object.__setattr__(self, "paths_read", paths_read)
        object.__setattr__(self, "paths_written", paths_written)
        object.__setattr__(self, "needs_network", needs_network)
        object.__setattr__(self, "read_only", read_only)
        object.__setattr__(self, "risk", risk)
        object.__setattr__(self, "explanation", explanation)
        object.__setattr__(self, "bypass_immune", bypass_immune)


class BashAnalyzer:
    """Judges bash command lines; owns the isolated child parser (thread-safe).

    ``isolated=True`` (the executor): text that is not ASCII is parsed by one long-lived
    child, started by :meth:`warm` or on first need and stopped by :meth:`close` (or the
    ``with`` block). ``isolated=False``: such text gets a child for that one command, and
    the analyzer holds no process (nothing to close).
    """

    def __init__(
        self,
        *,
        isolated: bool = True,
        parser: IsolatedParser | None = None,
        parse_cache: int = PARSE_CACHE_ENTRIES,
    ) -> None:
        """``parser``: the child parser to own (default: a new one when ``isolated``);
        ``parse_cache``: how many parses to keep by command text (0: none)."""
        if parser is None and isolated:
            parser = IsolatedParser()
        self._isolated = parser
        self._parse_cache_size = parse_cache
        self._parses: OrderedDict[str, ParsedScript] = OrderedDict()
        self._parses_lock = threading.Lock()
        self._contexts: dict[tuple[str, tuple[str, ...]], WalkContext] = {}
        self._default_sandboxes: dict[str, PathSandbox] = {}

    def __enter__(self) -> BashAnalyzer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def warm(self) -> bool:
        """Start the child parser now (Python's start-up time), not during the first
        command that needs it; True when it is ready (or there is none to start)."""
        return self._isolated.warm() if self._isolated is not None else True

    def close(self) -> None:
        """Stop and reap the child parser."""
        if self._isolated is not None:
            self._isolated.close()

    @staticmethod
    def parses_in_child(command: str) -> bool:
        """Whether judging ``command`` waits for the child parser (text not ASCII): an
        event loop should judge it in a thread (:meth:`analyze_async`)."""
        return not command.isascii()

    @staticmethod
    def judged_in_thread(command: str, denied_read_globs: Sequence[str] = ()) -> bool:
        """Whether an event loop should judge ``command`` in a thread: it waits for the
        child parser, or it may read a repository's object store (a git command under
        protected reads: githistory.py inflates up to 5,000 objects for one question,
        which must not stall every other call the loop serves). A word ``git`` anywhere
        is enough to take the thread; everything else is judged inline."""
        return not command.isascii() or (bool(denied_read_globs) and "git" in command)

    async def analyze_async(
        self,
        command: str,
        *,
        sandbox: PathSandbox | None = None,
        network_enabled: bool = False,
        denied_read_globs: Sequence[str] = (),
    ) -> BashAnalysis:
        """:meth:`analyze` without blocking the event loop on the child parser or on a
        repository's object store (:meth:`judged_in_thread`)."""
        if not self.judged_in_thread(command, denied_read_globs):
            return self.analyze(
                command,
                sandbox=sandbox,
                network_enabled=network_enabled,
                denied_read_globs=denied_read_globs,
            )
        return await asyncio.to_thread(
            self.analyze,
            command,
            sandbox=sandbox,
            network_enabled=network_enabled,
            denied_read_globs=denied_read_globs,
        )

    def analyze(
        self,
        command: str,
        *,
        sandbox: PathSandbox | None = None,
        network_enabled: bool = False,
        denied_read_globs: Sequence[str] = (),
    ) -> BashAnalysis:
        """Judge one bash command line (EXE-6 … EXE-8). Never raises on any input text."""
        if not command or command.isspace():  # (not command.strip(): no copy made)
            return _refused("empty command (EXE-6)")
        # Longer input is refused before parsing: no honest tool call is this long, and it
        # bounds the analysis time (the decision service applies the same cap).
        if len(command) > MAX_COMMAND_CHARS:
            return _refused(f"command longer than {MAX_COMMAND_CHARS} characters")
        if "\0" in command:
            return _refused("command contains a NUL byte")
        parsed = self._parse(command)
        if parsed.error is not None:
            return _refused(f"cannot be parsed: {parsed.error}")
        if parsed.empty:
            return _refused("empty command (EXE-6): nothing but comments or blanks")
        walker = Walker(
            sandbox or self._default_sandbox(),
            network_enabled,
            self._context(tuple(denied_read_globs)),
            parsed,
        )
        walker.run()
        return _result(walker)

    def _parse(self, command: str) -> ParsedScript:
        """The parse of ``command``, from the cache when the same text was parsed lately."""
        if self._parse_cache_size <= 0 or len(command) > _MAX_CACHED_CHARS:
            return self._parse_now(command)
        with self._parses_lock:
            parsed = self._parses.get(command)
            if parsed is not None:
                self._parses.move_to_end(command)
                return parsed
        # Parsed outside the lock: a non-ASCII parse waits for the child.
        parsed = self._parse_now(command)
        if parsed.error is not None and not command.isascii():
            return parsed  # the child may have failed for a passing reason: not kept
        with self._parses_lock:
            self._parses[command] = parsed
            while len(self._parses) > self._parse_cache_size:
                self._parses.popitem(last=False)
        return parsed

    def _parse_now(self, command: str) -> ParsedScript:
        """Parse ``command``: ASCII text in this process, one parse at a time (the
        in-process tree-sitter parser is one object shared by every analyzer, and git
        commands are judged in threads beside the event loop's inline ones); other text
        in the child, without holding that lock while it waits."""
        if not command.isascii():
            return parse(command, self._isolated)
        with _IN_PROCESS_PARSE:
            return parse(command, self._isolated)

    def _context(self, denied_read_globs: tuple[str, ...]) -> WalkContext:
        # What os.path.expanduser("~") gives, read first from $HOME alone (it runs for every
        # command; the password database only when HOME is unset).
        home = _home_variable()
        home = (home.rstrip("/") or "/") if home is not None else os.path.expanduser("~")
        key = (home, denied_read_globs)
        context = self._contexts.get(key)
        if context is None:
            context = WalkContext(home, denied_read_globs)
            with self._parses_lock:  # non-ASCII commands are judged in worker threads
                while len(self._contexts) >= _MAX_CONTEXTS:
                    self._contexts.pop(next(iter(self._contexts)))
                self._contexts[key] = context
        return context

    def _default_sandbox(self) -> PathSandbox:
        """Without a sandbox, the working directory is the only (writable) root."""
        cwd = os.getcwd()
        sandbox = self._default_sandboxes.get(cwd)
        if sandbox is None:
            sandbox = PathSandbox([Root(cwd, True)], cwd)
            self._default_sandboxes.clear()
            self._default_sandboxes[cwd] = sandbox
        return sandbox


_IN_PROCESS_PARSE: Final = threading.Lock()
"""Held while the in-process parser runs (see :meth:`BashAnalyzer._parse_now`)."""

_ONE_SHOT: Final = BashAnalyzer(isolated=False, parse_cache=0)
"""The analyzer behind :func:`analyze`: compiled patterns only, never a process."""


def analyze(
    command: str,
    *,
    sandbox: PathSandbox | None = None,
    network_enabled: bool = False,
    denied_read_globs: Sequence[str] = (),
) -> BashAnalysis:
    """Judge one bash command line (EXE-6 … EXE-8) without a long-lived child parser (the
    CLI, tests): text that is not ASCII is parsed in a child started for it."""
    return _ONE_SHOT.analyze(
        command,
        sandbox=sandbox,
        network_enabled=network_enabled,
        denied_read_globs=denied_read_globs,
    )


def _refused(reason: str) -> BashAnalysis:
    finding = Finding("deny", reason, "high", False, "")
    return BashAnalysis(
        verdict="deny",
        reasons=(reason,),
        commands=(),
        paths_read=(),
        paths_written=(),
        needs_network=False,
        read_only=False,
        risk="high",
        explanation=explain("deny", (finding,), (), False),
        bypass_immune=False,
    )


def _result(walker: Walker) -> BashAnalysis:
    findings = walker.findings
    if not findings:
        # ALLOW (most commands): nothing to order or fold.
        return BashAnalysis(
            verdict="allow",
            reasons=(),
            commands=tuple(walker.commands),
            paths_read=tuple(walker.reads),
            paths_written=tuple(walker.writes),
            needs_network=walker.needs_network,
            read_only=not walker.side_effects and not walker.writes,
            risk="low",
            explanation=explain(
                "allow", (), [c.text for c in walker.commands], walker.needs_network
            ),
            bypass_immune=False,
        )
    # One loop, no generators (each resumes once per finding): DENY when any finding is
    # one, else ASK; an ASK is bypass-immune when any of its ASK findings is.
    denied = False
    immune = False
    for finding in findings:
        if finding.verdict == "deny":
            denied = True
        elif finding.verdict == "ask" and finding.immune:
            immune = True
    verdict: Verdict = "deny" if denied else "ask"
    ordered = sorted(findings, key=lambda f: (f.verdict != "deny", _RISK_ORDER[f.risk] * -1))
    reasons = tuple(dict.fromkeys([f.labelled() for f in ordered]))
    texts = tuple([c.text for c in walker.commands])
    return BashAnalysis(
        verdict=verdict,
        reasons=reasons,
        commands=tuple(walker.commands),
        paths_read=tuple(walker.reads),
        paths_written=tuple(walker.writes),
        needs_network=walker.needs_network,
        read_only=verdict != "deny" and not walker.side_effects and not walker.writes,
        risk=risk_of(verdict, findings),
        explanation=explain(verdict, tuple(ordered), texts, walker.needs_network),
        bypass_immune=verdict == "ask" and immune,
    )


_RISK_ORDER: Final = {"low": 0, "medium": 1, "high": 2}
