"""The executor's composition root: opens its dependencies (the shared state store, the
confined launcher, the bash analyzer, the policy file's protected reads), builds the core
and the servicer, and keeps the policy reloaded. Nothing here decides a call."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from stockade.contract.protected import ProtectedReads, load_protected_reads
from stockade.errors import InvalidArgument, StockadeError
from stockade.executor.bash import BashAnalyzer
from stockade.executor.confine import Launcher
from stockade.executor.confine.policy import Layer
from stockade.executor.core import ExecutorCore, GrantCheck, Inspector, no_process_confinement
from stockade.executor.globs import validate_globs
from stockade.executor.grants import StoreGrantCheck, grant_check_from_settings, grant_layer
from stockade.executor.inspect import inspect_call
from stockade.executor.metrics import ExecutorMetrics
from stockade.executor.own import OwnPaths, own_paths
from stockade.executor.paths import PathSandbox
from stockade.executor.readstate import ReadLedger
from stockade.executor.servicer import ExecutorServicer
from stockade.executor.settings import ExecutorSettings
from stockade.executor.state import ExecutorState, open_state
from stockade.executor.tools import file_tools
from stockade.executor.tools.base import Tool, ToolLimits
from stockade.executor.tools.run_bash import RunBashTool
from stockade.server import Registration
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

__all__ = [
    "SERVICE_NAME",
    "ExecutorApp",
    "build_core",
    "build_sandbox",
    "executor_servicer",
    "policy_reads",
    "tool_limits",
    "watch_grant_keys",
    "watch_policy",
]

log = logging.getLogger("stockade.executor")
SERVICE_NAME = x_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name


def build_sandbox(settings: ExecutorSettings) -> PathSandbox:
    """The path sandbox described by the settings."""
    return PathSandbox.from_settings(
        str(settings.workspace),
        str(settings.library_dir) if settings.library_dir else None,
        str(settings.skills_dir) if settings.skills_dir else None,
        settings.additional_dirs,
    )


def tool_limits(settings: ExecutorSettings) -> ToolLimits:
    """The settings the tools read, typed."""
    return ToolLimits(
        max_output_chars=settings.max_output_chars,
        max_file_write_bytes=settings.max_file_write_bytes,
        library_dir=os.fspath(settings.library_dir) if settings.library_dir else None,
        workspace=os.fspath(settings.workspace),
        network_enabled=settings.network_enabled,
        memory_limit_mb=settings.memory_limit_mb,
        default_timeout_s=settings.default_timeout_s,
        max_timeout_s=settings.max_timeout_s,
        denied_read_globs=tuple(settings.denied_read_globs),
        # Stockade's own sockets and state directories: hidden from every command.
        masked_dirs=tuple(dict.fromkeys((*settings.socket_dirs(), *own_for(settings).state_dirs))),
    )


def own_for(settings: ExecutorSettings) -> OwnPaths:
    """Stockade's own state, keys and configured files, for this executor's roots."""
    extra = (
        d.rsplit(":", 1)[0] if d.endswith((":ro", ":rw")) else d for d in settings.additional_dirs
    )
    roots = tuple(
        str(r) for r in (settings.workspace, settings.library_dir, settings.skills_dir, *extra) if r
    )
    return own_paths(settings.state_dir, roots=roots)


def sandbox_with_globs(
    sandbox: PathSandbox, settings: ExecutorSettings, policy: ProtectedReads | None = None
) -> PathSandbox:
    """``sandbox`` with the protected-write globs and every denied-read glob in force.

    Denied reads are the union of the policy file's read denials (DEC-16: one source), the
    executor's own ``denied_read_globs`` setting (it adds, never replaces) and whatever the
    given sandbox already had. They bind the file tools too, not only bash (EXE-9).
    """
    own = own_for(settings)
    protected = tuple(
        dict.fromkeys(
            (
                *(
                    settings.protected_write_globs
                    if settings.protected_write_globs is not None
                    else sandbox.protected_write_globs
                ),
                # Stockade's own state, keys and policy files, wherever they lie.
                *own.protected_write_globs(),
            )
        )
    )
    denied = tuple(
        dict.fromkeys(
            (
                *(policy.deny if policy is not None else ()),
                *settings.denied_read_globs,
                *sandbox.denied_read_globs,
                *own.denied_read_globs(),
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


def build_core(
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
) -> ExecutorCore:
    """The core for ``settings``.

    ``tools`` defaults to the file tools, plus run_bash when a started ``launcher`` is
    given (its layers are then reported too); ``layers`` reports further confinement
    layers; ``grant_check`` defaults to a verifier of the configured grant public key(s)
    spending grants in ``state``. ``analyzer`` judges bash commands (its owner closes it;
    without one, commands that are not ASCII are parsed by a child started for each).
    ``state`` records spent grants and session reads (shared by the replicas; this
    process's memory when None); a shared state must be given on the running loop.
    """
    bash = analyzer or BashAnalyzer(isolated=False)
    reads = protected_reads or ProtectedReads()
    tools = dict(tools) if tools is not None else file_tools()
    if launcher is not None:
        tools.setdefault("run_bash", RunBashTool(launcher, analyzer=bash))
        if layers is None:
            layers = launcher.layers
    check = grant_check if grant_check is not None else grant_check_from_settings(settings, state)
    read_state: ReadLedger | None = None
    if state is not None and state.shared:
        read_state = state.read_ledger(asyncio.get_running_loop())

    def inspector_for(box: PathSandbox, policy: ProtectedReads) -> Inspector:
        return functools.partial(
            inspect_call,
            sandbox=box,
            network_enabled=settings.network_enabled,
            denied_read_globs=box.denied_read_globs,
            ask_read_globs=policy.ask,
            analyzer=bash,
        )

    def reconfigure(policy: ProtectedReads) -> tuple[PathSandbox, Inspector]:
        box = sandbox_with_globs(sandbox, settings, policy)
        return box, inspector_for(box, policy)

    enforced, inspector = reconfigure(reads)
    return ExecutorCore(
        sandbox=enforced,
        tools=tools,
        inspector=inspector,
        limits=tool_limits(settings),
        read_state=read_state,
        grant_check=check,
        grant_layer=grant_layer(check),
        protected_reads=reads,
        reconfigure=reconfigure,
        host_layers=layers or no_process_confinement,
        analyzer=bash,
    )


async def watch_policy(core: ExecutorCore, settings: ExecutorSettings, interval_s: float) -> None:
    """Reload the policy file(s)' protected reads into ``core`` when they change, until
    cancelled. A file that fails to load keeps the last good protected reads, and says why.
    """
    paths = [p for p in (settings.policy_file, settings.project_policy_file) if p]
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
            reads = policy_reads(settings)
        except StockadeError as exc:
            log.error("policy reload failed, keeping the last good protected reads: %s", exc)
            continue
        core.apply_protected_reads(reads)
        log.info(
            "policy protected reads reloaded: %d denied, %d asked",
            len(reads.deny),
            len(reads.ask),
        )


async def watch_grant_keys(core: ExecutorCore, check: StoreGrantCheck, interval_s: float) -> None:
    """Re-read the grant public key files every ``interval_s`` and put what changed in
    force, until cancelled. Each change and each problem (a file unreadable or invalid,
    keeping its last good key) is logged once, and shows in the grant_verification layer
    that GetCapabilities reports."""
    files = check.key_files
    if files is None:
        return
    reported: dict[Path, str] = {}
    while True:
        await asyncio.sleep(interval_s)
        try:
            added, removed = await check.reload_keys()
        except Exception:  # a watcher that dies would leave keys unrotated, silently
            log.exception("grant public key reload failed; keeping the keys in force")
            continue
        if added or removed:
            log.warning(
                "grant public keys reloaded: now accepting %s (added %s, removed %s)",
                ", ".join(check.verifier.key_ids),
                ", ".join(sorted(added)) or "none",
                ", ".join(sorted(removed)) or "none",
            )
        problems = dict(files.problems)
        for path, why in problems.items():
            if reported.get(path) != why:
                log.error("grant public key file problem, keeping its last good key: %s", why)
        for path in reported.keys() - problems.keys():
            log.warning("grant public key file %s holds a valid key again", path)
        if added or removed or problems != reported:
            core.grant_layer = grant_layer(check)
        reported = problems


@contextlib.asynccontextmanager
async def executor_servicer(
    settings: ExecutorSettings, sandbox: PathSandbox | None = None
) -> AsyncIterator[ExecutorServicer]:
    """The executor's servicer with its state store, launcher and bash analyzer open
    (closed again on exit), and the policy file's protected reads loaded and watched
    (DEC-16). The layers the kernel refuses are logged at start (EXE-9: say so)."""
    reads = policy_reads(settings)
    if sandbox is None:
        sandbox = build_sandbox(settings)
    state = await open_state(
        settings.state_dsn or None, settings.state_dir, wait_s=settings.store_wait_s
    )
    log.info("executor state (spent grants, session reads): %s", state.description)
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
                    log.warning("confinement layer %s is not active: %s", layer.name, layer.detail)
            core = build_core(
                settings,
                sandbox,
                launcher=launcher,
                protected_reads=reads,
                analyzer=analyzer,
                state=state,
            )
            watchers = [asyncio.create_task(watch_policy(core, settings, settings.policy_poll_s))]
            if isinstance(core.grant_check, StoreGrantCheck):
                watchers.append(
                    asyncio.create_task(
                        watch_grant_keys(core, core.grant_check, settings.grant_key_poll_s)
                    )
                )
            try:
                yield ExecutorServicer(core, metrics=ExecutorMetrics())
            finally:
                for watcher in watchers:
                    watcher.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watcher
        finally:
            await launcher.close()
            await asyncio.to_thread(analyzer.close)
    finally:
        await state.close()


@dataclass
class ExecutorApp:
    """ServiceApp for the executor."""

    settings: ExecutorSettings
    name: str = "executor"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[list[Registration]]:
        """Open the dependencies and build the servicer; close them on exit.

        With mTLS on, only the agent's identity may run or cancel calls (X-3).
        """
        async with executor_servicer(self.settings, build_sandbox(self.settings)) as servicer:
            layers = servicer.core.layers()
            log.info(
                "executor workspace %s; confinement active: %s; inactive: %s",
                self.settings.workspace,
                ", ".join(layer.name for layer in layers if layer.active) or "none",
                ", ".join(layer.name for layer in layers if not layer.active) or "none",
            )
            yield [
                Registration(
                    x_grpc.add_ExecutorServiceServicer_to_server,
                    servicer,
                    SERVICE_NAME,
                    method_identities={
                        "Execute": frozenset(self.settings.execute_identities),
                        "Cancel": frozenset(self.settings.execute_identities),
                    },
                )
            ]
