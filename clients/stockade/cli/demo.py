"""``stockade demo``: start the services and run a scripted agent session (X-6).

The four services (and the example paper ToolProvider) run as separate processes on unix
sockets with their SQLite files under a local state directory. A scripted model makes
calls that show every path through Stockade: an ALLOW, a parallel batch of read-only
calls, an ASK answered by an automated resolver watching approvals, a DENY by a policy
rule, a dangerous bash command refused by the executor's analysis, a subagent with the
read-only "explore" profile, and an ASK nobody answers, which times out into a DENY.
The transcript ends with the session's audit trail and the hash-chain check.

The approval console runs too, on a free loopback port (printed with a login token): with
``--no-bot`` nobody answers automatically, approvals wait five minutes for a person to
answer them in the page, and the services stay up after the run until Ctrl-C, so the
decision can be found in the console's audit page.

``--replicas 2`` runs the replicated setup (STORE-5): two processes of each stateful
service sharing one PostgreSQL (``--store postgresql://…``, or a throwaway embedded server
from the optional ``pgserver`` package: ``pip install 'stockade[ha-demo]'``), two agents,
each talking to its own replica of every service, the approval answered on the other
decision replica, and the audit trail read back through the other audit replica with
every replica's hash chain verified.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import warnings
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import grpc
from google.protobuf import json_format

from stockade.client.agent import AgentClient
from stockade.client.audit import AuditClient
from stockade.client.base import aio_channel
from stockade.client.decision import DecisionClient
from stockade.client.errors import ServiceError
from stockade.stack import SERVICES, LocalStack, StackError
from stockade.v1 import agent_service_pb2 as a_pb2
from stockade.v1 import audit_service_pb2 as au_pb2
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc
from stockade.v1 import executor_service_pb2 as x_pb2

SESSION = "demo-session"
AUTO_SESSION = "demo-auto"
"""The second session: auto mode, where a classifier model settles asks no rule settles."""
AUTO_TASK = "Run the demo app and tidy up the project without losing work."
RESOLVER = "demo-resolver"
# What the automated resolver approves; everything else it leaves to time out.
AUTO_APPROVE_TOOLS = frozenset({"file_write"})

WORKSPACE_FILES = {
    "README.md": "# Demo project\nA tiny workspace for the Stockade demo.\n",
    "notes/hello.txt": (
        "Hello from the Stockade demo workspace.\nEvery tool call here was checked.\n"
    ),
    "notes/todo.md": "# Notes\n- TODO: write the summary\n",
    "src/app.py": (
        "def main() -> None:\n    # TODO: handle errors\n    print('hi')\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    ),
    ".env": "DATABASE_PASSWORD=demo-secret-do-not-read\n",
}


class Style:
    """ANSI colours when writing to a terminal (and NO_COLOR is unset)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text


def prepare(state_dir: Path, script: Path | None, policy: Path | None) -> tuple[Path, Path, Path]:
    """A fresh workspace, script folder and policy file under ``state_dir``."""
    if state_dir.exists():
        shutil.rmtree(state_dir)
    workspace = state_dir / "workspace"
    for rel, text in WORKSPACE_FILES.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text)
    scripts = state_dir / "scripts"
    scripts.mkdir()
    assets = resources.files("stockade.demo")
    (scripts / "demo.yaml").write_text(
        script.read_text() if script else assets.joinpath("demo.yaml").read_text()
    )
    # auto mode's session: the agent's script, and the scripted classifier's replies.
    (scripts / "auto.yaml").write_text(assets.joinpath("auto.yaml").read_text())
    (state_dir / "classifier.yaml").write_text(assets.joinpath("classifier.yaml").read_text())
    policy_file = state_dir / "policy.toml"
    policy_file.write_text(
        policy.read_text() if policy else assets.joinpath("policy.toml").read_text()
    )
    return workspace, scripts, policy_file


def _rule(rule: c_pb2.Rule) -> str:
    source = c_pb2.RuleSource.Name(rule.source).removeprefix("RULE_SOURCE_")
    return f"{rule.pattern!r} ({source})" if rule.pattern else source


def describe(event: a_pb2.RunTurnResponse, style: Style) -> str | None:
    """One transcript line for an event (None for events not shown)."""
    who = "" if event.agent_name in ("", "lead") else style(f"[{event.agent_name}] ", "34")
    kind = event.WhichOneof("event")
    line: str | None = None
    if kind == "text":
        line = f"{style('model', '36')}  {event.text.text}"
    elif kind == "tool_call_started":
        call = event.tool_call_started.call
        args = json_format.MessageToDict(call.arguments)
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items() if k != "content")
        line = f"{style('call ', '33')}  {call.tool_name}({shown})"
    elif kind == "permission_requested":
        p = event.permission_requested
        risk = c_pb2.RiskLevel.Name(p.explanation.risk).removeprefix("RISK_LEVEL_").lower()
        line = (
            f"{style('ASK  ', '35;1')}  {p.call.tool_name}: {p.reason} "
            f"[risk {risk}] {p.explanation.summary}"
        )
    elif kind == "permission_resolved":
        r = event.permission_resolved
        verdict = c_pb2.Verdict.Name(r.verdict).removeprefix("VERDICT_")
        line = f"{style('     ', '35')}  approval {verdict}: {r.reason}"
    elif kind == "tool_call_finished":
        f = event.tool_call_finished
        if f.status == x_pb2.EXECUTION_STATUS_OK:
            first = f.content.strip().splitlines()[0] if f.content.strip() else ""
            rule = _rule(f.winning_rule)
            line = f"{style('ALLOW', '32;1')}  {f.tool_name} by {rule} -> {first[:60]!r}"
        elif f.verdict == c_pb2.VERDICT_ALLOW:
            line = f"{style('FAIL ', '31')}  {f.tool_name}: {f.reason or f.content[:80]}"
        else:
            line = f"{style('DENY ', '31;1')}  {f.tool_name} by {_rule(f.winning_rule)}: {f.reason}"
    elif kind == "subagent_started":
        s = event.subagent_started
        line = f"{style('spawn', '34;1')}  subagent {s.agent_name!r} ({s.profile}): {s.task}"
    elif kind == "subagent_stopped":
        stopped = event.subagent_stopped
        reason = a_pb2.TerminationReason.Name(stopped.reason).removeprefix("TERMINATION_REASON_")
        line = (
            f"{style('done ', '34')}  subagent {stopped.agent_name!r} {reason}: "
            f"{stopped.answer[:80]}"
        )
    elif kind == "final_answer":
        line = f"{style('final', '35;1')}  {event.final_answer.text}"
    elif kind == "terminated":
        t = event.terminated
        name = a_pb2.TerminationReason.Name(t.reason).removeprefix("TERMINATION_REASON_")
        line = f"{style('end  ', '2')}  {name}: {t.detail}"
    elif kind == "error":
        line = f"{style('error', '31')}  {event.error.message}"
    return f"  {who}{line}" if line else None


async def auto_resolver(
    address: str,
    token: str,
    style: Style,
    ready: asyncio.Event,
    *,
    session: str = SESSION,
    where: str = "",
) -> None:
    """Watch the session's approvals; approve file writes once, leave the rest unanswered.

    This stands for any resolver (a UI, a chat bot, a policy hook): several may watch at
    once and the first answer wins. ``where`` names the replica it watches, if several.
    """
    auth = (("authorization", f"Bearer {token}"),)
    on = f" on {where}" if where else ""
    async with aio_channel(address) as ch:
        stub = d_grpc.DecisionServiceStub(ch)
        stream = stub.WatchApprovals(d_pb2.WatchApprovalsRequest(session_id=session))
        ready.set()
        async for change in stream:
            approval = change.approval
            if approval.state != d_pb2.APPROVAL_STATE_PENDING:
                continue
            tool = approval.call.tool_name
            if tool in AUTO_APPROVE_TOOLS:
                await stub.ResolveApproval(
                    d_pb2.ResolveApprovalRequest(
                        approval_id=approval.approval_id,
                        resolution=d_pb2.RESOLUTION_ALLOW_ONCE,
                        resolver=RESOLVER,
                        reason=f"{tool} inside the workspace is fine",
                    ),
                    metadata=auth,
                    timeout=5,
                )
                print(f"  {style('bot  ', '32')}  {RESOLVER}: approved {tool} once{on}")
            else:
                print(
                    f"  {style('bot  ', '33')}  {RESOLVER}: not answering {tool} (it will time out)"
                )


async def print_audit(
    address: str, style: Style, sessions: tuple[str, ...] = (SESSION, AUTO_SESSION)
) -> bool:
    """Print the sessions' audit rows, oldest first, and verify the hash chain."""
    client = AuditClient(address)
    try:
        rows = [
            r
            for session in sessions
            async for r in client.query_all(au_pb2.QueryRequest(session_id=session, page_size=200))
        ]
        verified = await client.verify()
    finally:
        await client.close()
    rows.sort(key=lambda r: r.sequence, reverse=True)
    print("\n" + style("Audit trail", "1"), f"(sessions {', '.join(sessions)})")
    print(f"  {'seq':>4}  {'agent':<9} {'tool':<14} {'status':<13} {'verdict':<7} rule")
    for row in reversed(rows):
        e = row.event
        status = au_pb2.AuditStatus.Name(e.status).removeprefix("AUDIT_STATUS_")
        verdict = c_pb2.Verdict.Name(e.verdict).removeprefix("VERDICT_") if e.verdict else ""
        rule = e.winning_rule.pattern or e.termination_reason
        if e.status == au_pb2.AUDIT_STATUS_DECIDED and '"resolver"' in e.output_preview:
            rule += f"  {e.output_preview}"  # the approval and who answered it
        print(
            f"  {row.sequence:>4}  {e.agent_name:<9} {e.tool_name:<14} {status:<13} "
            f"{verdict:<7} {rule}"
        )
    if verified.ok:
        print(f"  hash chain: {style('OK', '32;1')} ({verified.rows_checked} rows verified)")
        # On PostgreSQL each replica appends its own chain; the check names every one.
        for chain in (c for c in verified.detail.split("; ") if c.startswith("chain ")):
            print(f"    {chain}")
    else:
        print(
            f"  hash chain: {style('BROKEN', '31;1')} at {verified.first_broken_sequence}: "
            f"{verified.detail}"
        )
    return verified.ok


async def run_auto_session(
    stack: LocalStack, style: Style, *, session: str = AUTO_SESSION, agent: str = "agent"
) -> None:
    """The second session, in auto mode (DEC-17): the scripted classifier allows one call,
    blocks one, and is unsure of one, which then waits for a person. ``agent`` is the
    agent process it runs on (its decision replica creates the session)."""
    on = f", on {agent}" if agent != "agent" else ""
    print(
        "\n" + style("auto mode", "1"),
        f"(session {session}{on}): a classifier model settles the asks no rule settles",
    )
    async with aio_channel(stack.addresses[stack.lane("decision", agent)]) as ch:
        # A mode other than the default needs an admin caller (DEC-6).
        await DecisionClient(ch, admin_token=stack.admin_token).create_session(
            session, c_pb2.PERMISSION_MODE_AUTO, task=AUTO_TASK
        )
    async with aio_channel(stack.addresses[agent]) as ch:
        async for event in AgentClient(ch).run_turn(
            a_pb2.RunTurnRequest(session_id=session, message=AUTO_TASK, script="auto")
        ):
            line = describe(event, style)
            if line:
                print(line)


PERSON_WAIT_S = 300
"""With --no-bot: how long an approval waits for a person in the console."""

MAX_REPLICAS = 4
"""The most replicas of a service the demo starts (each is a process on this machine)."""
HA_EXTRA = "pip install 'stockade[ha-demo]' (or: make demo-ha)"


class DemoError(Exception):
    """The demo cannot run; the message is one line for the user."""


SHAREABLE = {
    "audit": ("stockade.audit.settings", "AuditSettings", "store_dsn"),
    "decision": ("stockade.decision.settings", "DecisionSettings", "store_dsn"),
    "executor": ("stockade.executor.settings", "ExecutorSettings", "state_dsn"),
}
"""Where each stateful service would name a shared PostgreSQL (its settings field)."""


def shared_store_settings() -> dict[str, str]:
    """The services that keep their state in a shared PostgreSQL in this build, each with
    the variable that names it. A service whose PostgreSQL store is not built has no such
    setting and is left out (it then runs one replica where replicas must share state)."""
    found = {}
    for service, (module, class_name, field) in SHAREABLE.items():
        settings_class = getattr(importlib.import_module(module), class_name)
        if field in settings_class.model_fields:
            found[service] = f"STOCKADE_{service.upper()}_{field.upper()}"
    return found


@contextlib.contextmanager
def embedded_postgres() -> Iterator[str]:
    """A throwaway PostgreSQL 16 from the optional ``pgserver`` package, removed on exit;
    yields its DSN. Raises ``DemoError`` when the package is missing or the server fails."""
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime folder at import, which warns when
        # XDG_RUNTIME_DIR is unset: harmless here.
        warnings.simplefilter("ignore")
        try:
            from pgserver.postgres_server import get_server
        except ImportError:
            raise DemoError(
                "--replicas without --store needs an embedded PostgreSQL, from the optional "
                f"pgserver package: {HA_EXTRA}; or pass --store postgresql://…"
            ) from None
    # A short path: the server's unix socket lives in its data folder (107-byte limit).
    data = tempfile.mkdtemp(prefix="stk-demo-pg-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = get_server(data, cleanup_mode="stop")
    except Exception as err:
        shutil.rmtree(data, ignore_errors=True)
        raise DemoError(f"the embedded PostgreSQL did not start: {err}") from err
    try:
        yield server.get_uri()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def replica_counts(replicas: int, shared: dict[str, str]) -> dict[str, int]:
    """How many processes of each service the demo starts. Audit replicas each append
    their own chain to the shared store; executor replicas share the workspace (and,
    where built, the spent-grant store); decision replicas only where their store is
    shared, since a session lives in the store of the replica that created it; one agent
    per lane, each talking to its own replica of every service."""
    if replicas == 1:
        return {}
    return {
        "audit": replicas,
        "executor": replicas,
        "agent": replicas,
        "decision": replicas if "decision" in shared else 1,
    }


def console_person() -> str:
    """The demo's console user: the login name, as the console accepts names."""
    name = re.sub(r"[^A-Za-z0-9._@+\-]", "", os.environ.get("USER", ""))[:64]
    return name if name and name[0].isalnum() else "demo-user"


def console_env(person: str, token: str, listen: str) -> dict[str, str]:
    """The console's settings in the demo: one admin, signing in with ``token``."""
    return {
        "STOCKADE_CONSOLE_LISTEN": listen,
        "STOCKADE_CONSOLE_LOGIN_TOKENS": f"{person}={token}",
        "STOCKADE_CONSOLE_ADMINS": person,
    }


async def wait_for_signal() -> None:
    """Until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def run_demo(
    state_dir: Path,
    script: Path | None,
    policy: Path | None,
    style: Style,
    *,
    bot: bool = True,
    console_listen: str = "127.0.0.1:0",
    replicas: int = 1,
    store: str = "",
) -> int:
    """Run the demo; returns the exit code. ``store`` (a PostgreSQL DSN) puts every
    service that can share one there; ``replicas`` > 1 needs it."""
    workspace, scripts, policy_file = prepare(state_dir, script, policy)
    shared = shared_store_settings() if store else {}
    # On a server that outlives the demo, earlier runs' rows are there too: new names.
    suffix = f"-{secrets.token_hex(3)}" if store else ""
    session, auto_session = SESSION + suffix, AUTO_SESSION + suffix
    # The stack turns the services' telemetry off unless asked: a user who chose an
    # exporter (OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER or an OTLP endpoint) asked.
    chosen = any(
        os.environ.get(v)
        for v in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    common = {"OTEL_SDK_DISABLED": os.environ.get("OTEL_SDK_DISABLED", "false")} if chosen else {}
    person, login_token = console_person(), secrets.token_urlsafe(18)
    stack = LocalStack(
        state_dir,
        common_env=common,
        env={
            # The executor reads the same policy file: its read denials bind bash too (DEC-16).
            "executor": {
                "STOCKADE_EXECUTOR_WORKSPACE": str(workspace),
                "STOCKADE_EXECUTOR_POLICY_FILE": str(policy_file),
            },
            "decision": {
                "STOCKADE_DECISION_POLICY_FILE": str(policy_file),
                # auto mode's classifier, scripted: allow, block, then unsure (a person).
                "STOCKADE_DECISION_AUTO_PROVIDER": "scripted",
                "STOCKADE_DECISION_AUTO_SCRIPT_FILE": str(state_dir / "classifier.yaml"),
            },
            "agent": {"STOCKADE_AGENT_SCRIPT_DIR": str(scripts)},
            "console": console_env(person, login_token, console_listen),
        },
        replicas=replica_counts(replicas, shared),
    )
    stack.extra_env["agent"]["STOCKADE_AGENT_TOOL_PROVIDERS"] = stack.addresses["papers"]
    # Every decision (and who answered an approval) goes to the audit log too, through
    # the audit replica of the decision replica's lane.
    for name in stack.replicas["decision"]:
        stack.extra_env.setdefault(name, {})["STOCKADE_DECISION_AUDIT_ADDR"] = stack.addresses[
            stack.lane("audit", name)
        ]
    for service, variable in shared.items():
        stack.extra_env.setdefault(service, {})[variable] = store
    if "audit" in shared:
        # One hash chain per audit process, named after it.
        for name in stack.replicas["audit"]:
            stack.extra_env.setdefault(name, {})["STOCKADE_AUDIT_REPLICA_ID"] = name
    agents = stack.replicas["agent"]
    deciders = stack.replicas["decision"]
    # The resolver answers on the last decision replica: with several, not the one the
    # first session's agent asks, so the answer crosses replicas through the store.
    watched = deciders[-1]
    if not bot:
        # A person needs longer than the policy's four seconds to read and answer.
        stack.extra_env["decision"]["STOCKADE_DECISION_APPROVAL_TIMEOUT_S"] = str(PERSON_WAIT_S)
        stack.extra_env["agent"]["STOCKADE_AGENT_APPROVAL_WAIT_S"] = str(PERSON_WAIT_S + 10)
    print(style("Stockade demo", "1"), f"- state in {state_dir}")
    resolver: asyncio.Task[None] | None = None
    try:
        if replicas > 1 or store:
            describe_topology(stack, store, shared, style)
        else:
            print(
                "  starting decision, executor, audit, agent, the papers tool provider and "
                "the console ..."
            )
        names = [name for service in SERVICES for name in stack.replicas[service]]
        await stack.start([*names, "papers", "console"])
        print(
            f"  console: {style(stack.console_url, '36;1')}  "
            f"(sign in as {person} with token {login_token})"
        )
        async with aio_channel(stack.addresses["executor"]) as ch:
            caps = await ch.unary_unary(
                "/stockade.v1.ExecutorService/GetCapabilities",
                request_serializer=x_pb2.GetCapabilitiesRequest.SerializeToString,
                response_deserializer=x_pb2.GetCapabilitiesResponse.FromString,
            )(x_pb2.GetCapabilitiesRequest(), timeout=5)
        active = [layer.name for layer in caps.layers if layer.active]
        inactive = [f"{layer.name} ({layer.detail})" for layer in caps.layers if not layer.active]
        print(f"  executor confinement active: {', '.join(active)}")
        if inactive:
            print(f"  {style('inactive', '33')}: {'; '.join(inactive)}")
        if bot:
            ready = asyncio.Event()
            resolver = asyncio.create_task(
                auto_resolver(
                    stack.addresses[watched],
                    stack.admin_token,
                    style,
                    ready,
                    session=session,
                    where=watched if len(deciders) > 1 else "",
                )
            )
            await asyncio.wait_for(ready.wait(), 10)
        else:
            print(
                f"  {style('no bot', '33')}: answer the approvals in the console "
                f"(each waits {PERSON_WAIT_S} s)"
            )
        print()
        if len(agents) > 1:
            lane = ", ".join(stack.lane(s, agents[0]) for s in ("decision", "executor", "audit"))
            print(f"  session {session} on {agents[0]} ({lane})")
        async with aio_channel(stack.addresses[agents[0]]) as ch:
            async for event in AgentClient(ch).run_turn(
                a_pb2.RunTurnRequest(
                    session_id=session, message="Tidy up the project and summarise it."
                )
            ):
                line = describe(event, style)
                if line:
                    print(line)
        if resolver is not None:
            resolver.cancel()
        if bot:
            # With a person at the console the demo stops at the first session: the auto
            # session's unsure call would wait minutes for them.
            await run_auto_session(stack, style, session=auto_session, agent=agents[-1])
        # Stopping the agents drains their audit events before the trail is read.
        for name in agents:
            await stack.stop(name)
        # Read back through the last audit replica: on a shared store it holds every
        # replica's rows and checks every replica's chain.
        reader = stack.replicas["audit"][-1]
        if len(stack.replicas["audit"]) > 1:
            print(f"\n  reading the trail through {reader}")
        ok = await print_audit(stack.addresses[reader], style, (session, auto_session))
        if not bot:
            print(
                f"\n  the console stays up at {stack.console_url} (its audit page shows who "
                "approved); Ctrl-C stops everything"
            )
            await wait_for_signal()
    except (StackError, grpc.aio.AioRpcError, ServiceError) as exc:
        print(f"stockade demo: {exc}", file=sys.stderr)
        return 1
    finally:
        if resolver is not None:
            resolver.cancel()
        await stack.close()
    return 0 if ok else 1


def describe_topology(stack: LocalStack, store: str, shared: dict[str, str], style: Style) -> None:
    """Say which processes start, what they share, and what this build cannot share."""
    from stockade.audit.store.base import redact_dsn

    groups = [", ".join(stack.replicas[s]) for s in SERVICES]
    print(f"  starting {' | '.join(groups)}, the papers tool provider and the console ...")
    where = ", ".join(sorted(shared)) or "nothing"
    print(f"  shared PostgreSQL store: {style(redact_dsn(store), '36')} ({where})")
    if "decision" not in shared and len(stack.replicas["audit"]) > 1:
        print(
            f"  {style('note', '33')}: one decision replica — this build has no PostgreSQL "
            "decision store, and a session lives in the store of the replica that made it"
        )
    if "executor" not in shared and len(stack.replicas["executor"]) > 1:
        print(
            f"  {style('note', '33')}: each executor replica remembers its own spent grants "
            "and reads (this build has no shared executor state); each agent keeps to its own"
        )


def run(args: argparse.Namespace) -> int:
    """Handler of ``stockade demo``."""
    style = Style(sys.stdout.isatty() and "NO_COLOR" not in os.environ and not args.no_color)
    for path in (args.script, args.policy):
        if path is not None and not path.is_file():
            print(f"stockade demo: {path} is not a file", file=sys.stderr)
            return 2
    from stockade.server.envcheck import otel_problems
    from stockade.server.telemetry import setup_telemetry

    # The standard OTEL_* variables apply to the demo as to the services it starts (they
    # inherit them): its own client spans (RunTurn, WatchApprovals …) go to the chosen
    # exporter, and the trace context reaches the services, whose spans land in their
    # logs under --state-dir when the exporter is `console`.
    problems = otel_problems(os.environ)
    if problems:
        print(f"stockade demo: {'; '.join(problems)}", file=sys.stderr)
        return 2
    if not 1 <= args.replicas <= MAX_REPLICAS:
        print(f"stockade demo: --replicas must be 1 to {MAX_REPLICAS}", file=sys.stderr)
        return 2
    store = (args.store or "").strip()
    if store and not store.startswith(("postgresql://", "postgres://")):
        print("stockade demo: --store must be a postgresql:// URI", file=sys.stderr)
        return 2
    telemetry = setup_telemetry("demo")
    try:
        state_dir = Path(args.state_dir).resolve()
        with contextlib.ExitStack() as resources_:
            if args.replicas > 1 and not store:
                print("  starting a throwaway PostgreSQL (pgserver) for the replicas ...")
                store = resources_.enter_context(embedded_postgres())
            code = asyncio.run(
                run_demo(
                    state_dir,
                    args.script,
                    args.policy,
                    style,
                    bot=not args.no_bot,
                    console_listen=args.console_listen,
                    replicas=args.replicas,
                    store=store,
                )
            )
    except DemoError as err:
        print(f"stockade demo: {err}", file=sys.stderr)
        return 2
    finally:
        telemetry.shutdown()
    if "console" in os.environ.get("OTEL_TRACES_EXPORTER", "").lower():
        print(f"  the services' spans are in {state_dir / 'logs'}/*.log", file=sys.stderr)
    return code


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo``."""
    p = sub.add_parser(
        "demo",
        help="start the four services and run a scripted agent session",
        description=(
            "Start decision, executor, audit, agent (and the example papers tool provider) "
            "as separate processes with embedded SQLite under --state-dir, and the approval "
            "console; run a scripted session with an automated approval resolver (or, with "
            "--no-bot, a person answering in the console), and print the transcript and the "
            "audit trail."
        ),
    )
    p.add_argument("--state-dir", default=".stockade/demo", help="where state and logs go")
    p.add_argument("--script", type=Path, help="a custom script (YAML) for the scripted model")
    p.add_argument(
        "--policy", type=Path, help="a custom policy file (TOML) for the decision service"
    )
    p.add_argument("--no-color", action="store_true", help="plain output")
    p.add_argument(
        "--no-bot",
        action="store_true",
        help="no automated resolver: answer the approvals yourself in the console (they wait "
        f"{PERSON_WAIT_S} s); the services stay up after the run until Ctrl-C",
    )
    p.add_argument(
        "--console-listen",
        default="127.0.0.1:0",
        help="where the console listens (default: a free loopback port, printed)",
    )
    p.add_argument(
        "--replicas",
        type=int,
        default=1,
        help=f"run this many replicas (up to {MAX_REPLICAS}) of the stateful services and of "
        "the agent on one shared PostgreSQL: the approval is answered on another decision "
        "replica and every audit replica's hash chain is verified (default: 1, SQLite)",
    )
    p.add_argument(
        "--store",
        metavar="DSN",
        help="the PostgreSQL the services share (postgresql://…); with --replicas and no "
        f"--store, a throwaway embedded server from the ha-demo extra ({HA_EXTRA})",
    )
    p.set_defaults(func=run)
