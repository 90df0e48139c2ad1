"""The executor's core: the only object its servicer calls, one method per RPC
(``inspect_async`` for Inspect, ``execute`` for Execute, ``cancel`` for Cancel,
``capabilities`` and ``layers`` for GetCapabilities), and no gRPC.

Execute without gRPC (SPEC EXE-12):

1. the tool must exist (``UnknownTool``);
2. the executor's own tool-level checks run again, and the grant must verify against them
   when a verifier is configured (``GrantError``: signature, expiry, binding, and the
   findings digest and ASK settlement of DEC-12 rev 2); a DENY becomes a REFUSED result;
4. the tool runs in its own task, its chunks and result are streamed to the caller, under
   the call's time limit;
5. if the caller goes away or cancels: a CANCEL call is stopped (its cancel event is set
   and its task cancelled); a BLOCK call runs to completion and its result is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from stockade.contract.protected import ProtectedReads
from stockade.errors import (
    FailedPrecondition,
    PermissionDenied,
    ResourceExhausted,
    StockadeError,
    UnknownTool,
)
from stockade.executor.bash import BashAnalyzer
from stockade.executor.confine.policy import Layer
from stockade.executor.inspect import Inspection, parses_in_child
from stockade.executor.paths import PathSandbox, Root
from stockade.executor.readstate import ReadLedger, ReadState
from stockade.executor.tools.base import Chunk, ExecContext, Status, Tool, ToolLimits, ToolResult

__all__ = [
    "CallSpec",
    "Capabilities",
    "ExecutorCore",
    "GrantCheck",
    "Interrupt",
    "Layer",
    "no_process_confinement",
]

logger = logging.getLogger("stockade.executor")

# Extra time past the call's own limit before the executor stops waiting for a tool that
# does not honour ``ctx.timeout_s`` itself (run_bash kills at the limit; this is a backstop).
TIMEOUT_BACKSTOP_S = 5.0
# After a cancel, a tool gets this long to stop by itself (and report partial output)
# before its task is cancelled.
CANCEL_GRACE_S = 0.5


class Interrupt(Enum):
    """What a caller's cancel does to a running call (AGT-1)."""

    CANCEL = "cancel"
    """Stop at once."""
    BLOCK = "block"
    """Finish first; the result is still recorded."""


@dataclass(frozen=True)
class CallSpec:
    """One call to run."""

    session_id: str
    """The decision session."""
    call_id: str
    """Unique id of the call."""
    tool_name: str
    """The executor tool."""
    arguments: Mapping[str, Any]
    """The tool's arguments (plain JSON values)."""


class GrantCheck(Protocol):
    """Verifies the decision service's grant for a call and spends it; raises a
    ``GrantError`` if not valid (or already spent), ``DependencyUnavailable`` when the
    record of spent grants cannot be reached."""

    async def __call__(
        self, call: CallSpec, payload: bytes, signature: bytes, inspection: Inspection
    ) -> None:
        """Return if the grant allows exactly ``call`` now, given the executor's own
        ``inspection`` of it (the grant must bind those findings, DEC-12 rev 2), and was
        not spent before on any replica (STORE-3)."""
        ...


Inspector = Callable[[str, Mapping[str, Any]], Inspection]

Reconfigure = Callable[[ProtectedReads], tuple[PathSandbox, Inspector]]
"""Given a reloaded policy's protected reads: the sandbox and inspector that enforce them
(built by the app, which knows the settings they combine with)."""


@dataclass(frozen=True)
class Capabilities:
    """What this executor offers (GetCapabilities, besides the layers)."""

    network_enabled: bool
    roots: tuple[Root, ...]
    tools: tuple[str, ...]


def no_process_confinement() -> tuple[Layer, ...]:
    return (
        Layer(
            "process_confinement",
            False,
            "no launcher: run_bash is not offered, so no command runs in this executor",
        ),
    )


_DONE = object()


@dataclass
class _Running:
    ctx: ExecContext
    interrupt: Interrupt
    task: asyncio.Task[None] | None = None
    detached: bool = False
    """The caller is gone (BLOCK): chunks are dropped, the result is only logged."""
    queue: asyncio.Queue[object] = field(default_factory=asyncio.Queue)


class ExecutorCore:
    """Runs executor tools for Execute and tracks the running calls for Cancel."""

    def __init__(
        self,
        *,
        sandbox: PathSandbox,
        tools: Mapping[str, Tool],
        inspector: Inspector,
        limits: ToolLimits | None = None,
        read_state: ReadLedger | None = None,
        grant_check: GrantCheck | None = None,
        grant_layer: Layer | None = None,
        host_layers: Callable[[], Sequence[Layer]] = no_process_confinement,
        analyzer: BashAnalyzer | None = None,
        protected_reads: ProtectedReads | None = None,
        reconfigure: Reconfigure | None = None,
        timeout_backstop_s: float = TIMEOUT_BACKSTOP_S,
    ) -> None:
        """Run ``tools`` in ``sandbox``, checked by ``inspector`` and ``grant_check``.

        ``grant_layer`` says how grants are checked (reported with the other layers),
        ``host_layers`` the confinement layers of the host (the launcher's), and
        ``reconfigure`` builds the sandbox and inspector for a reloaded policy.
        """
        self.timeout_backstop_s = timeout_backstop_s
        self.sandbox = sandbox
        self.tools = dict(tools)
        self.inspector = inspector
        self.limits = limits if limits is not None else ToolLimits()
        self.read_state: ReadLedger = read_state if read_state is not None else ReadState()
        self.grant_check = grant_check
        self.grant_layer = grant_layer or Layer(
            "grant_verification",
            grant_check is not None,
            "grants required on Execute" if grant_check else "Execute runs without a grant",
        )
        self._host_layers = host_layers
        self.analyzer = analyzer
        """The bash analyzer the inspector and run_bash use (its owner, the app, closes it)."""
        self.protected_reads = protected_reads or ProtectedReads()
        self._reconfigure = reconfigure
        self.default_timeout_s = self.limits.default_timeout_s
        self.max_timeout_s = self.limits.max_timeout_s
        # Keyed by (session id, call id): call ids come from the model or its provider and
        # repeat across sessions, so the id alone names no call.
        self._running: dict[tuple[str, str], _Running] = {}
        self._background: set[asyncio.Task[None]] = set()

    # --- queries -------------------------------------------------------------------

    def tool_names(self) -> list[str]:
        """The tools this executor runs, sorted."""
        return sorted(self.tools)

    def inspect(self, tool_name: str, arguments: Mapping[str, Any]) -> Inspection:
        """Tool-level checks (raises UnknownTool for a tool the executor does not run)."""
        if tool_name not in self.tools:
            raise UnknownTool(f"the executor has no tool {tool_name!r}", tool=tool_name)
        return self.inspector(tool_name, arguments)

    async def inspect_async(self, tool_name: str, arguments: Mapping[str, Any]) -> Inspection:
        """:meth:`inspect` without blocking the event loop on the isolated child parser
        or a repository's object store (a bash command that is not ASCII, or a git
        command under protected reads, is inspected in a thread)."""
        if parses_in_child(tool_name, arguments, self.sandbox.denied_read_globs):
            return await asyncio.to_thread(self.inspect, tool_name, arguments)
        return self.inspect(tool_name, arguments)

    def layers(self) -> tuple[Layer, ...]:
        """Every confinement layer, active or not (EXE-9: never pretend)."""
        own = (
            Layer("path_sandbox", True, f"{len(self.sandbox.roots)} roots enforced on every path"),
            self.grant_layer,
        )
        return (*own, *self._host_layers())

    def capabilities(self) -> Capabilities:
        """The roots, tools and network setting of this executor."""
        return Capabilities(
            network_enabled=self.limits.network_enabled,
            roots=tuple(self.sandbox.roots),
            tools=tuple(self.tool_names()),
        )

    def apply_protected_reads(self, reads: ProtectedReads) -> None:
        """Put a reloaded policy's protected reads in force for the next calls (calls
        already running keep the sandbox they started with)."""
        if reads == self.protected_reads or self._reconfigure is None:
            return
        self.sandbox, self.inspector = self._reconfigure(reads)
        self.protected_reads = reads

    def running(self) -> list[tuple[str, str]]:
        """(session id, call id) of the calls running now (including detached BLOCK calls)."""
        return sorted(self._running)

    def timeout_for(self, requested_s: float | None) -> float:
        """The call's time limit: the default when unset, capped at the maximum."""
        if requested_s is None or requested_s <= 0:
            return min(self.default_timeout_s, self.max_timeout_s)
        return min(requested_s, self.max_timeout_s)

    # --- running -------------------------------------------------------------------

    async def execute(
        self,
        call: CallSpec,
        *,
        timeout_s: float | None = None,
        interrupt: Interrupt = Interrupt.BLOCK,
        grant_payload: bytes = b"",
        grant_signature: bytes = b"",
    ) -> AsyncGenerator[Chunk | ToolResult, None]:
        """Run ``call``: yield its chunks, then exactly one ToolResult.

        Close the iterator (``aclose``) when the caller goes away: that is the cancel
        signal for CANCEL calls.
        """
        tool = self.tools.get(call.tool_name)
        if tool is None:
            raise UnknownTool(f"the executor has no tool {call.tool_name!r}", tool=call.tool_name)
        # The executor's own findings first: the grant must bind them (DEC-12 rev 2).
        inspection = await self.inspect_async(call.tool_name, call.arguments)
        if self.grant_check is not None:
            await self.grant_check(call, grant_payload, grant_signature, inspection)
        denials = [rule.reason for rule in inspection.rules if rule.effect == "deny"]
        if denials:
            reason = "; ".join(denials)
            yield ToolResult(status=Status.REFUSED, content=f"Refused: {reason}", error=reason)
            return
        key = (call.session_id, call.call_id)
        if key in self._running:
            raise FailedPrecondition(
                f"call {call.call_id!r} of session {call.session_id!r} is already running"
            )
        limit = self.timeout_for(timeout_s)
        ctx = ExecContext(
            session_id=call.session_id,
            call_id=call.call_id,
            working_dir=self.sandbox.cwd,
            sandbox=self.sandbox,
            read_state=self.read_state,
            limits=self.limits,
            timeout_s=limit,
        )
        run_now = getattr(tool, "run_now", None)
        if run_now is not None:
            # A call cheap enough to finish here and now (a small file read): no task, no
            # queue, nothing to cancel or time out, since nothing else runs meanwhile.
            try:
                now: ToolResult | None = run_now(call.arguments, ctx)
            except ResourceExhausted:
                raise  # a bound of the executor's, the caller's status (not a tool error)
            except Exception as exc:
                now = _failure(call, exc)
            if now is not None:
                yield now
                return
        state = _Running(ctx=ctx, interrupt=interrupt)
        self._running[key] = state
        state.task = asyncio.create_task(self._pump(tool, call, state))
        state.task.add_done_callback(lambda _t: self._finished(key, state))
        finished = False
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + limit + self.timeout_backstop_s
            got_result = False
            while True:
                try:
                    # Items already queued need no timer (wait_for makes a task per call).
                    item = (
                        state.queue.get_nowait()
                        if not state.queue.empty()
                        else await asyncio.wait_for(state.queue.get(), deadline - loop.time())
                    )
                except TimeoutError:
                    ctx.cancel.set()
                    state.task.cancel()
                    finished = True
                    yield ToolResult(
                        status=Status.TIMEOUT,
                        content=f"Timed out after {limit:g} s",
                        error=f"the call did not finish within {limit:g} s",
                    )
                    return
                if isinstance(item, ResourceExhausted):
                    finished = True
                    raise item
                if item is _DONE:
                    finished = True
                    if not got_result:
                        yield ToolResult(
                            status=Status.ERROR, content="", error="the tool ended without a result"
                        )
                    return
                assert isinstance(item, Chunk | ToolResult)
                if isinstance(item, ToolResult):
                    got_result = True
                    finished = True
                yield item
        finally:
            if not finished:
                self._caller_gone(state)

    def cancel(self, session_id: str, call_id: str) -> bool:
        """Cancel the running call ``call_id`` of ``session_id``; True when it was found.

        A CANCEL call is stopped (its Execute stream ends with a CANCELLED result); a BLOCK
        call is left to finish, as its interrupt behaviour says.
        """
        state = self._running.get((session_id, call_id))
        if state is None:
            return False
        if state.interrupt is Interrupt.CANCEL:
            self._stop(state)
        return True

    async def drain(self) -> None:
        """Wait for detached BLOCK calls (for shutdown and tests)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # --- internals -----------------------------------------------------------------

    async def _pump(self, tool: Tool, call: CallSpec, state: _Running) -> None:
        """Run the tool, feeding its chunks and result into the call's queue."""
        result: ToolResult | None = None
        try:
            async for item in tool.run(call.arguments, state.ctx):
                if isinstance(item, ToolResult):
                    result = item
                    state.queue.put_nowait(item)
                    break
                if not state.detached:
                    state.queue.put_nowait(item)
        except asyncio.CancelledError:
            result = ToolResult(status=Status.CANCELLED, content="Cancelled", error="cancelled")
            state.queue.put_nowait(result)
            raise
        except ResourceExhausted as exc:
            # An executor bound (say, the session's files on record): the call fails with
            # RESOURCE_EXHAUSTED naming it, as the tools' run on the loop does.
            state.queue.put_nowait(exc)
        except Exception as exc:
            result = _failure(call, exc)
            state.queue.put_nowait(result)
        finally:
            state.queue.put_nowait(_DONE)
            if state.detached:
                logger.info(
                    "call %s (%s) finished after its caller left: %s",
                    call.call_id,
                    call.tool_name,
                    result.status.value if result else "no result",
                )

    def _stop(self, state: _Running) -> None:
        state.ctx.cancel.set()
        task = state.task
        if task is not None and not task.done():
            asyncio.get_running_loop().call_later(CANCEL_GRACE_S, task.cancel)

    def _caller_gone(self, state: _Running) -> None:
        task = state.task
        if task is None or task.done():
            return
        if state.interrupt is Interrupt.CANCEL:
            state.ctx.cancel.set()
            task.cancel()
            return
        # BLOCK: let it finish; keep a reference so the task is not garbage-collected.
        state.detached = True
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _finished(self, key: tuple[str, str], state: _Running) -> None:
        if self._running.get(key) is state:
            del self._running[key]
        with contextlib.suppress(asyncio.CancelledError):
            exc = state.task.exception() if state.task and not state.task.cancelled() else None
            if exc is not None:
                logger.error("call %s of session %s ended with %r", key[1], key[0], exc)


def _failure(call: CallSpec, exc: Exception) -> ToolResult:
    """The result of a tool run that raised: a domain error is the caller's to see (a
    refusal, a stale write ...); anything else is logged and reported as internal."""
    if isinstance(exc, StockadeError):
        status = Status.REFUSED if isinstance(exc, PermissionDenied) else Status.ERROR
        return ToolResult(status=status, content=f"Error: {exc.message}", error=exc.message)
    logger.error("tool %s failed on call %s", call.tool_name, call.call_id, exc_info=exc)
    return ToolResult(status=Status.ERROR, content="", error="internal error in the tool")
