"""ExecutorService: maps protobuf to the executor core and back (kept thin)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar

import grpc
from google.protobuf import duration_pb2, json_format

from stockade.contract.grant import load_public_key
from stockade.contract.protected import ProtectedReads, load_protected_reads
from stockade.errors import (
    DependencyUnavailable,
    GrantMissing,
    GrantReplayed,
    InvalidArgument,
    StockadeError,
)
from stockade.executor.bash import BashAnalyzer
from stockade.executor.confine import Launcher
from stockade.executor.globs import validate_globs
from stockade.executor.grants import GrantVerifier
from stockade.executor.inspect import Inspection, inspect_call
from stockade.executor.metrics import ExecutorMetrics
from stockade.executor.paths import PathSandbox
from stockade.executor.readstate import ReadLedger
from stockade.executor.runner import CallSpec, ExecutorCore, GrantCheck, Interrupt, Layer
from stockade.executor.settings import ExecutorSettings
from stockade.executor.state import ExecutorState, MemoryExecutorState, StoreReadState, open_state
from stockade.executor.tools import file_tools
from stockade.executor.tools.base import Chunk, Status, Tool, ToolResult
from stockade.executor.tools.run_bash import RunBashTool
from stockade.server.access import Access
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

__all__ = [
    "ExecutorServicer",
    "call_arguments",
    "executor_servicer",
    "grant_check_from_settings",
    "inspection_to_proto",
]

logger = logging.getLogger("stockade.executor")

_STATUS = {
    Status.OK: x_pb2.EXECUTION_STATUS_OK,
    Status.ERROR: x_pb2.EXECUTION_STATUS_ERROR,
    Status.TIMEOUT: x_pb2.EXECUTION_STATUS_TIMEOUT,
    Status.CANCELLED: x_pb2.EXECUTION_STATUS_CANCELLED,
    Status.REFUSED: x_pb2.EXECUTION_STATUS_REFUSED,
}
_RISK = {
    "low": c_pb2.RISK_LEVEL_LOW,
    "medium": c_pb2.RISK_LEVEL_MEDIUM,
    "high": c_pb2.RISK_LEVEL_HIGH,
}
_VERDICT = {"allow": c_pb2.VERDICT_ALLOW, "ask": c_pb2.VERDICT_ASK, "deny": c_pb2.VERDICT_DENY}


def call_arguments(call: c_pb2.ToolCall) -> dict[str, Any]:
    """The call's arguments as plain JSON values."""
    return json_format.MessageToDict(call.arguments)


def _require_call(call: c_pb2.ToolCall) -> None:
    if not call.tool_name:
        raise InvalidArgument("call.tool_name is required")
    if not call.call_id:
        raise InvalidArgument("call.call_id is required")


async def _refuse_all(
    call: CallSpec, payload: bytes, signature: bytes, inspection: Inspection
) -> None:
    raise GrantMissing(
        "this executor has no grant public key (STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE), "
        "so it cannot verify grants and refuses every call"
    )


def grant_check_from_settings(
    settings: ExecutorSettings, state: ExecutorState | None = None
) -> GrantCheck | None:
    """A grant verifier from the configured grant public key(s), spending grants in
    ``state`` (this process's memory when None). Without a key every Execute is refused
    (fail closed), unless ``allow_ungranted`` says this is a development setup, where None
    (no verification) is returned."""
    files = settings.grant_key_files()
    if not files:
        return None if settings.allow_ungranted else _refuse_all
    # The grant format comes from the neutral contract package (never the decision
    # service's internals): one implementation of the format on both sides.
    verifier = GrantVerifier([load_public_key(path) for path in files])
    return StoreGrantCheck(verifier, state if state is not None else MemoryExecutorState())


class StoreGrantCheck:
    """The grant check of Execute: every check of the grant itself, then spending it in
    the executor state shared by the replicas (single use across replicas and restarts,
    STORE-3). A store that cannot answer refuses the call (UNAVAILABLE), never runs it."""

    def __init__(self, verifier: GrantVerifier, state: ExecutorState) -> None:
        """Check with ``verifier``, spend in ``state``."""
        self.verifier = verifier
        self.state = state

    async def __call__(
        self, call: CallSpec, payload: bytes, signature: bytes, inspection: Inspection
    ) -> None:
        """Raise unless the grant allows ``call`` now and was never spent."""
        claims = self.verifier.check(
            payload,
            signature,
            session_id=call.session_id,
            call_id=call.call_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            inspection=inspection,
        )
        try:
            fresh = await self.state.spend_grant(claims.nonce, claims.exp)
        except DependencyUnavailable as exc:
            raise DependencyUnavailable(
                f"grant refused: the record of spent grants cannot be reached ({exc.message})"
            ) from exc
        if not fresh:
            raise GrantReplayed("grant was already used", call_id=call.call_id)


def inspection_to_proto(inspection: Inspection, call: c_pb2.ToolCall) -> d_pb2.ToolInspection:
    """The core's Inspection as the ToolInspection message Decide takes."""
    args = call_arguments(call)
    content = next(
        (str(args[k]) for k in ("command", "file_path", "path", "pattern") if k in args), ""
    )
    rules = [
        c_pb2.Rule(
            effect=c_pb2.RULE_EFFECT_DENY if rule.effect == "deny" else c_pb2.RULE_EFFECT_ASK,
            pattern=f"{inspection.tool_name}({content})",
            source=c_pb2.RULE_SOURCE_TOOL,
            reason=rule.reason,
            bypass_immune=rule.bypass_immune,
        )
        for rule in inspection.rules
    ]
    message = d_pb2.ToolInspection(
        tool_rules=rules,
        inside_working_dir=inspection.inside_working_dir,
        read_only=inspection.read_only,
        explanation=c_pb2.Explanation(risk=_RISK[inspection.risk], summary=inspection.explanation),
    )
    analysis = inspection.analysis
    if analysis is not None:
        message.analysis.CopyFrom(
            c_pb2.CommandAnalysis(
                verdict=_VERDICT[analysis.verdict],
                reasons=list(analysis.reasons),
                sub_commands=[c.name for c in analysis.commands],
                sub_command_texts=[c.text for c in analysis.commands],
                paths_read=list(analysis.paths_read),
                paths_written=list(analysis.paths_written),
                needs_network=analysis.needs_network,
                read_only=analysis.read_only,
            )
        )
    return message


def _with_settings_globs(
    sandbox: PathSandbox, settings: ExecutorSettings, policy: ProtectedReads | None = None
) -> PathSandbox:
    """``sandbox`` with the protected-write globs and every denied-read glob in force.

    Denied reads are the union of the policy file's read denials (DEC-16: one source), the
    executor's own ``denied_read_globs`` setting (it adds, never replaces) and whatever the
    given sandbox already had. They bind the file tools too, not only bash (EXE-9).
    """
    protected = (
        tuple(settings.protected_write_globs)
        if settings.protected_write_globs is not None
        else sandbox.protected_write_globs
    )
    denied = tuple(
        dict.fromkeys(
            (
                *(policy.deny if policy is not None else ()),
                *settings.denied_read_globs,
                *sandbox.denied_read_globs,
            )
        )
    )
    if protected == sandbox.protected_write_globs and denied == sandbox.denied_read_globs:
        return sandbox
    return PathSandbox(
        sandbox.roots, sandbox.cwd, protected_write_globs=protected, denied_read_globs=denied
    )


def policy_reads(settings: ExecutorSettings) -> ProtectedReads:
    """The protected reads of the configured policy file(s), as executor globs (DEC-16).

    Raises ``InvalidArgument`` naming the file when one cannot be read or parsed, or holds
    a glob the executor cannot use.
    """
    cwd = os.path.realpath(settings.workspace)
    reads = load_protected_reads((settings.policy_file, settings.project_policy_file), cwd)
    try:
        validate_globs([*reads.deny, *reads.ask])
    except ValueError as exc:
        raise InvalidArgument(f"policy file: {exc}") from exc
    return reads


def _no_process_confinement() -> Sequence[Layer]:
    return (
        Layer(
            "process_confinement",
            False,
            "no launcher: run_bash is not offered, so no command runs in this executor",
        ),
    )


@contextlib.asynccontextmanager
async def executor_servicer(
    settings: ExecutorSettings, sandbox: PathSandbox | None = None
) -> AsyncIterator[ExecutorServicer]:
    """The executor's servicer with its launcher and bash analyzer started (both closed
    again on exit), and the policy file's protected reads loaded and watched (DEC-16).

    The layers the kernel refuses are logged at start (EXE-9: say so, never pretend).
    """
    reads = policy_reads(settings)
    if sandbox is None:
        sandbox = PathSandbox.from_settings(
            settings.workspace,
            settings.library_dir,
            settings.skills_dir,
            settings.additional_dirs,
        )
    state = await open_state(settings.state_dsn or None, settings.state_dir)
    logger.info("executor state (spent grants, session reads): %s", state.description)
    try:
        launcher = Launcher()
        analyzer = BashAnalyzer()
        await launcher.start()
        try:
            # The child parser for commands that are not ASCII starts now, not during the
            # first such call.
            await asyncio.to_thread(analyzer.warm)
            for layer in launcher.layers():
                if not layer.active:
                    logger.warning(
                        "confinement layer %s is not active: %s", layer.name, layer.detail
                    )
            servicer = ExecutorServicer(
                settings,
                sandbox,
                launcher=launcher,
                protected_reads=reads,
                analyzer=analyzer,
                state=state,
            )
            watcher = asyncio.create_task(servicer.watch_policy(settings.policy_poll_s))
            try:
                yield servicer
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
        finally:
            await launcher.close()
            await asyncio.to_thread(analyzer.close)
    finally:
        await state.close()


def _seconds(value: float) -> duration_pb2.Duration:
    message = duration_pb2.Duration()
    message.FromNanoseconds(int(value * 1e9))
    return message


class ExecutorServicer(x_grpc.ExecutorServiceServicer):
    """Inspect, Execute, Cancel and GetCapabilities over :class:`ExecutorCore`."""

    ACCESS: ClassVar[Mapping[str, Access]] = {
        "Inspect": Access.ANY_CALLER,
        # Runs only with a valid grant from the decision service; with mTLS, only the
        # execute identities (ExecutorApp's method_identities) may call it at all.
        "Execute": Access.ANY_CALLER,
        "Cancel": Access.ANY_CALLER,
        "GetCapabilities": Access.ANY_CALLER,
    }
    """Who may call each RPC (X-3)."""

    def __init__(
        self,
        settings: ExecutorSettings,
        sandbox: PathSandbox,
        *,
        tools: dict[str, Tool] | None = None,
        layers: Callable[[], Sequence[Layer]] | None = None,
        grant_check: GrantCheck | None = None,
        launcher: Launcher | None = None,
        protected_reads: ProtectedReads | None = None,
        analyzer: BashAnalyzer | None = None,
        state: ExecutorState | None = None,
    ) -> None:
        """Build the core from ``settings``.

        ``analyzer`` judges bash commands (Inspect and run_bash); its owner closes it.
        Without one, commands that are not ASCII are parsed by a child started for each.
        ``state`` records spent grants and session reads (shared by the replicas; this
        process's memory when None). A shared state must be given on the running loop.

        ``tools`` defaults to the file tools, plus run_bash when a started ``launcher`` is
        given (its layers are then reported too); ``layers`` reports further confinement
        layers (the path sandbox and grant layers are added here); ``grant_check``
        defaults to a verifier of ``grant_public_key_file`` when one is configured.
        """
        self.settings = settings
        self.analyzer = analyzer or BashAnalyzer(isolated=False)
        self.metrics = ExecutorMetrics()
        self._base_sandbox = sandbox
        self.protected_reads = protected_reads or ProtectedReads()
        self.sandbox = sandbox = _with_settings_globs(sandbox, settings, self.protected_reads)
        tools = dict(tools) if tools is not None else file_tools()
        if launcher is not None:
            tools.setdefault("run_bash", RunBashTool(launcher, analyzer=self.analyzer))
            if layers is None:
                layers = launcher.layers
        elif layers is None:
            layers = _no_process_confinement
        self._layers = layers
        self._layer_cache: tuple[tuple[Layer, ...], list[x_pb2.ConfinementLayer]] | None = None
        check = (
            grant_check if grant_check is not None else grant_check_from_settings(settings, state)
        )
        read_state: ReadLedger | None = None
        if state is not None and state.shared:
            read_state = StoreReadState(state, asyncio.get_running_loop())
        self.core = ExecutorCore(
            sandbox=sandbox,
            tools=tools,
            inspector=self._inspector(sandbox),
            settings=settings,
            read_state=read_state,
            grant_check=check,
            default_timeout_s=settings.default_timeout_s,
            max_timeout_s=settings.max_timeout_s,
        )

    def _inspector(self, sandbox: PathSandbox) -> Callable[[str, Mapping[str, Any]], Inspection]:
        return functools.partial(
            inspect_call,
            sandbox=sandbox,
            network_enabled=self.settings.network_enabled,
            denied_read_globs=sandbox.denied_read_globs,
            ask_read_globs=self.protected_reads.ask,
            analyzer=self.analyzer,
        )

    def apply_protected_reads(self, reads: ProtectedReads) -> None:
        """Put a reloaded policy's protected reads in force for the next calls (calls
        already running keep the sandbox they started with)."""
        if reads == self.protected_reads:
            return
        self.protected_reads = reads
        sandbox = _with_settings_globs(self._base_sandbox, self.settings, reads)
        self.sandbox = sandbox
        self.core.sandbox = sandbox
        self.core.inspector = self._inspector(sandbox)
        self._layer_cache = None

    async def watch_policy(self, interval_s: float) -> None:
        """Reload the policy file(s)' protected reads when they change, until cancelled.

        A file that fails to load keeps the last good protected reads, and says why.
        """
        paths = [p for p in (self.settings.policy_file, self.settings.project_policy_file) if p]
        if not paths:
            return

        def stamp() -> tuple[tuple[int, int] | None, ...]:
            out: list[tuple[int, int] | None] = []
            for p in paths:
                try:
                    st = os.stat(p)
                    out.append((st.st_mtime_ns, st.st_size))
                except OSError:
                    out.append(None)
            return tuple(out)

        seen = stamp()
        while True:
            await asyncio.sleep(interval_s)
            now = stamp()
            if now == seen:
                continue
            seen = now
            try:
                reads = policy_reads(self.settings)
            except StockadeError as exc:
                logger.error("policy reload failed, keeping the last good protected reads: %s", exc)
                continue
            self.apply_protected_reads(reads)
            logger.info(
                "policy protected reads reloaded: %d denied, %d asked",
                len(reads.deny),
                len(reads.ask),
            )

    def layers(self) -> list[x_pb2.ConfinementLayer]:
        """Every layer, active or not (EXE-9: never pretend)."""
        host = tuple(self._layers())
        if self._layer_cache is None or self._layer_cache[0] != host:
            check = self.core.grant_check
            if check is None:
                grant = Layer(
                    "grant_verification",
                    False,
                    "allow_ungranted with no grant_public_key_file: Execute runs calls "
                    "without a grant (development only)",
                )
            elif check is _refuse_all:
                grant = Layer(
                    "grant_verification",
                    True,
                    "no grant_public_key_file configured: every Execute is refused",
                )
            elif isinstance(check, StoreGrantCheck):
                grant = Layer(
                    "grant_verification",
                    True,
                    f"Ed25519 grants required on Execute ({len(check.verifier.key_ids)} "
                    f"accepted key(s)); spent grants recorded in {check.state.description}",
                )
            else:
                grant = Layer("grant_verification", True, "Ed25519 grants required on Execute")
            own = [
                Layer(
                    "path_sandbox", True, f"{len(self.sandbox.roots)} roots enforced on every path"
                ),
                grant,
            ]
            protos = [
                x_pb2.ConfinementLayer(name=layer.name, active=layer.active, detail=layer.detail)
                for layer in [*own, *host]
            ]
            # Built once per set of host layers, not for every result.
            self._layer_cache = (host, protos)
        return self._layer_cache[1]

    async def Inspect(
        self, request: x_pb2.InspectRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.InspectResponse:
        """Tool-level checks of a call."""
        _require_call(request.call)
        inspection = await self.core.inspect_async(
            request.call.tool_name, call_arguments(request.call)
        )
        return x_pb2.InspectResponse(inspection=inspection_to_proto(inspection, request.call))

    async def Execute(
        self, request: x_pb2.ExecuteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[x_pb2.ExecuteResponse]:
        """Run a call: chunks, then one result."""
        call = request.call
        _require_call(call)
        start = time.monotonic()
        spec = CallSpec(call.session_id, call.call_id, call.tool_name, call_arguments(call))
        interrupt = (
            Interrupt.CANCEL
            if request.interrupt_behavior == c_pb2.INTERRUPT_BEHAVIOR_CANCEL
            else Interrupt.BLOCK
        )
        timeout = request.timeout.ToNanoseconds() / 1e9 if request.HasField("timeout") else None
        stream = self.core.execute(
            spec,
            timeout_s=timeout,
            interrupt=interrupt,
            grant_payload=request.grant.payload,
            grant_signature=request.grant.signature,
        )
        async with contextlib.aclosing(stream):
            async for item in stream:
                if isinstance(item, Chunk):
                    yield x_pb2.ExecuteResponse(
                        chunk=x_pb2.OutputChunk(
                            stream=x_pb2.OUTPUT_STREAM_STDERR
                            if item.stderr
                            else x_pb2.OUTPUT_STREAM_STDOUT,
                            data=item.data,
                        )
                    )
                else:
                    self.metrics.record(call.tool_name, item.status.value, time.monotonic() - start)
                    yield x_pb2.ExecuteResponse(result=self._result(item, start))

    def _result(self, result: ToolResult, start: float) -> x_pb2.ExecuteResult:
        return x_pb2.ExecuteResult(
            status=_STATUS[result.status],
            content=result.content,
            truncated=result.truncated,
            persisted_path=result.persisted_path,
            exit_code=result.exit_code,
            elapsed=_seconds(time.monotonic() - start),
            layers=self.layers(),
            error=result.error,
        )

    async def Cancel(
        self, request: x_pb2.CancelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.CancelResponse:
        """Cancel a running call (CANCEL calls stop; BLOCK calls finish)."""
        if not request.call_id:
            raise InvalidArgument("call_id is required")
        if not request.session_id:
            raise InvalidArgument(
                "session_id is required: call ids repeat across sessions, a call is known by "
                "(session_id, call_id)"
            )
        return x_pb2.CancelResponse(found=self.core.cancel(request.session_id, request.call_id))

    async def GetCapabilities(
        self, request: x_pb2.GetCapabilitiesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> x_pb2.GetCapabilitiesResponse:
        """The layers, roots and tools of this executor."""
        return x_pb2.GetCapabilitiesResponse(
            layers=self.layers(),
            network_enabled=self.settings.network_enabled,
            roots=[x_pb2.AllowedRoot(path=r.path, writable=r.writable) for r in self.sandbox.roots],
            tools=self.core.tool_names(),
        )
