"""run_bash: a bash command, re-judged here, then run under kernel confinement.

The executor trusts nobody in front of it: the command is analysed again (helper A2's
``analyze``) and a "deny" is refused before anything runs. An "ask" has, by the time
Execute is called, been settled by the decision service (whose grant the servicer
verifies). The command then runs through the launcher (``stockade.executor.confine``)
in its working directory, under the sandbox's roots, with policy-denied files masked;
output streams as chunks and the result is cut to the model's budget (EXE-10).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from stockade.executor.bash import BashAnalyzer
from stockade.executor.confine import ConfinementFailed, ConfinementPolicy, Launcher, Rlimits
from stockade.executor.output import shape_output
from stockade.executor.paths import PathSandbox
from stockade.executor.tools.base import Chunk, ExecContext, Status, ToolResult
from stockade.executor.tools.support import ArgError

__all__ = ["RunBashTool", "confinement_policy"]

# What the tool keeps of the interleaved output before shaping (the launcher client
# has the same cap per stream); beyond it the output is dropped and the cut is said.
MAX_CAPTURE_CHARS = 16 * 1024 * 1024


def confinement_policy(
    sandbox: PathSandbox,
    *,
    network_enabled: bool,
    masked_globs: tuple[str, ...],
    rlimits: Rlimits,
    masked_dirs: tuple[str, ...] = (),
) -> ConfinementPolicy:
    """The confinement of a command under ``sandbox``'s roots."""
    return ConfinementPolicy(
        readable_roots=tuple(root.path for root in sandbox.roots),
        writable_roots=tuple(root.path for root in sandbox.roots if root.writable),
        network_enabled=network_enabled,
        masked_globs=masked_globs,
        read_only_globs=(*sandbox.protected_write_globs, *_config_named(sandbox)),
        rlimits=rlimits,
        protect_git=sandbox.protects_git,
        masked_dirs=masked_dirs,
        masked_credentials=sandbox.credential_globs,
        linked_outside=sandbox.outside_denied_globs,
    )


def _config_named(sandbox: PathSandbox) -> tuple[str, ...]:
    """The paths the git configuration of the working directory's repository (and of the
    writable roots') makes hooks, config or programs (``core.hooksPath`` ...), as anchored
    globs: kept read-only at run time like ``.git/**`` (the analysis refuses writes to
    them by name; a program it cannot see into must not write them either)."""
    if not sandbox.protects_git:
        return ()
    writable = [root.path for root in sandbox.roots if root.writable]
    return tuple(
        f"{path}/**"
        for path in sandbox.config_named(*writable)
        if not any(c in path for c in "*?[")
        and any(path == w or path.startswith(w.rstrip("/") + "/") for w in writable)
    )


def _timeout_arg(args: Mapping[str, Any]) -> float | None:
    value = args.get("timeout")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ArgError("argument 'timeout' must be a positive number of seconds")
    if math.isinf(value):
        raise ArgError("argument 'timeout' must be finite")
    return float(value)


class RunBashTool:
    """Runs one bash command line in the confined launcher."""

    name = "run_bash"

    def __init__(
        self,
        launcher: Launcher,
        *,
        rlimits: Rlimits | None = None,
        analyzer: BashAnalyzer | None = None,
    ) -> None:
        """``launcher`` is the executor's long-lived launcher; ``rlimits`` the base limits
        (file size comes from ``max_file_write_bytes``, CPU from the call's time limit);
        ``analyzer`` the executor's bash analyzer (its owner closes it; without one, a
        command that is not ASCII is parsed by a child started for it)."""
        self.launcher = launcher
        self.rlimits = rlimits or Rlimits()
        self.analyzer = analyzer or BashAnalyzer(isolated=False)

    async def run(
        self, args: Mapping[str, Any], ctx: ExecContext
    ) -> AsyncGenerator[Chunk | ToolResult, None]:
        """Yield output chunks as they come, then the result."""
        try:
            command = args.get("command")
            if not isinstance(command, str):
                raise ArgError("missing required argument 'command' (a string)")
            working_dir = args.get("working_dir")
            if working_dir is not None and not isinstance(working_dir, str):
                raise ArgError("argument 'working_dir' must be a string")
            requested = _timeout_arg(args)
        except ArgError as exc:
            yield ToolResult(status=Status.ERROR, content=f"Error: {exc}", error=str(exc))
            return
        sandbox = ctx.sandbox
        where = sandbox.check(working_dir or ctx.working_dir or sandbox.cwd)
        if not where.allowed:
            yield _refused(f"working_dir: {where.reason}")
            return
        if not os.path.isdir(where.resolved):
            yield _refused(f"working_dir: {where.resolved} is not a directory")
            return
        sandbox = sandbox.with_cwd(where.resolved)
        network = ctx.limits.network_enabled
        # The sandbox's denied reads hold the policy's and the setting's (DEC-16).
        masked = tuple(sandbox.denied_read_globs or ctx.limits.denied_read_globs)
        analysis = await self.analyzer.analyze_async(
            command, sandbox=sandbox, network_enabled=network, denied_read_globs=masked
        )
        if analysis.verdict == "deny":
            yield _refused("; ".join(analysis.reasons) or analysis.explanation)
            return

        limit = self._time_limit(requested, ctx)
        rlimits = Rlimits(
            nproc=self.rlimits.nproc,
            cpu_s=max(1, math.ceil(limit)),
            as_bytes=self.rlimits.as_bytes,
            fsize_bytes=ctx.limits.max_file_write_bytes,
            nofile=self.rlimits.nofile,
            memory_bytes=ctx.limits.memory_limit_mb * 1024 * 1024 or self.rlimits.memory_bytes,
        )
        policy = confinement_policy(
            sandbox,
            network_enabled=network,
            masked_globs=masked,
            rlimits=rlimits,
            masked_dirs=ctx.limits.masked_dirs,
        )
        queue: asyncio.Queue[Chunk] = asyncio.Queue()
        combined: list[str] = []
        kept = 0

        def on_output(text: str, is_stderr: bool) -> None:
            nonlocal kept
            queue.put_nowait(Chunk(text, stderr=is_stderr))
            if kept < MAX_CAPTURE_CHARS:
                combined.append(text[: MAX_CAPTURE_CHARS - kept])
                kept += len(combined[-1])

        task = asyncio.create_task(
            self.launcher.run(
                command,
                cwd=where.resolved,
                policy=policy,
                timeout_s=limit,
                cancel=ctx.cancel,
                on_output=on_output,
            )
        )
        try:
            while not task.done() or not queue.empty():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            outcome = task.result()
        except ConfinementFailed as exc:
            yield ToolResult(
                status=Status.ERROR, content=f"Error: {exc.message}", error=exc.message
            )
            return
        finally:
            if not task.done():
                # Our consumer went away: cancelling run() makes the launcher kill it.
                task.cancel()
        text = "".join(combined)
        if kept >= MAX_CAPTURE_CHARS:
            text += f"\n[... output beyond {MAX_CAPTURE_CHARS} characters was dropped ...]"
        yield self._result(
            ctx, text, outcome.exit_code, outcome.timed_out, outcome.cancelled, limit
        )

    @staticmethod
    def _time_limit(requested: float | None, ctx: ExecContext) -> float:
        default = ctx.limits.default_timeout_s
        maximum = ctx.limits.max_timeout_s
        limit = min(requested if requested is not None else default, maximum)
        # The executor's own limit for this call (it kills a tool that overruns it).
        if ctx.timeout_s > 0:
            limit = min(limit, ctx.timeout_s)
        return limit

    @staticmethod
    def _result(
        ctx: ExecContext,
        text: str,
        exit_code: int,
        timed_out: bool,
        cancelled: bool,
        limit: float,
    ) -> ToolResult:
        notes: list[str] = []
        status = Status.OK
        error = ""
        if timed_out:
            status = Status.TIMEOUT
            error = f"timed out after {limit:g} s"
            notes.append(
                f"[timed out after {limit:g} s: the command and all it started were killed]"
            )
        elif cancelled:
            status = Status.CANCELLED
            error = "cancelled"
            notes.append("[cancelled: the command and all it started were killed]")
        elif exit_code != 0:
            status = Status.ERROR
            error = f"exit code {exit_code}"
            notes.append(f"[exit code {exit_code}]")
        if not text and not notes:
            text = "(no output)"
        library = ctx.limits.library_dir
        workspace = ctx.limits.workspace
        library_dir = None
        if library:
            library_dir = os.path.join(os.fspath(workspace or "."), os.fspath(library))
        shaped = shape_output(
            text,
            call_id=ctx.call_id,
            session_id=ctx.session_id,
            library_dir=library_dir,
            max_chars=ctx.limits.max_output_chars,
        )
        content = shaped.content
        if notes:
            content = (content + ("\n" if content and not content.endswith("\n") else "")) + (
                "\n".join(notes)
            )
        return ToolResult(
            status=status,
            content=content,
            exit_code=exit_code,
            error=error,
            truncated=shaped.truncated,
            persisted_path=shaped.persisted_path,
        )


def _refused(reason: str) -> ToolResult:
    return ToolResult(status=Status.REFUSED, content=f"Refused: {reason}", error=reason)
