"""PERF-1: Decide over gRPC vs an echo RPC (p50, throughput at 64 in flight) and in-process
decisions per second, dense (PERF-1c: 1,000 rules against 10) and spread out.

The decision service and the echo server run in this process with the same server
plumbing, each on a unix socket. They are measured in alternating rounds (echo, Decide,
echo, Decide, ...) and each figure pools its rounds, so a burst of load from elsewhere on
this shared machine hits both sides instead of skewing one. The benchmarked Decide is an
ALLOW, so it includes signing its Ed25519 grant (DEC-12), as every allowed call must.
PERF-1a-pg/1b-pg are the same with the session store on PostgreSQL (a throwaway pgserver,
or ``STOCKADE_TEST_POSTGRES_DSN``), each against its own echo rounds in the same run.

The in-process figures measure the decision itself, ``engine.decide`` (matching the call
against the rules, precedence, mode, explanation). Sessions, grant signing and protobuf
are service costs and are inside PERF-1a/1b instead. They use 1,000 distinct calls (no two
alike) with the executor's facts attached, as they arrive over gRPC, so no cache could
flatter them. PERF-1c (SPEC §9 rev 2) is the dense workload: most rules on three tools
(path globs ``**/secrets/<i>/**`` on read_file, exact commands on run_bash, substrings on
fetch), calls that hit and calls that miss, at 1,000 rules against the same at 10: the
ratio shows whether cost grows with the rules on a tool. PERF-1c-spread is the former
workload (1,000 rules over 203 tools). PERF-1c-linear shows matching is linear in the
input: adversarial wildcard rules against a command 10× longer cost about 10× as much.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2

from stockade.client.base import aio_channel
from stockade.contract.tools import Interrupt, Location, ToolTraits
from stockade.decision.app import DecisionApp
from stockade.decision.engine import DecisionRequest, Facts, decide
from stockade.decision.explain import Explanation, Risk
from stockade.decision.policy import PolicyDoc, compile_policy
from stockade.decision.rules import Effect, Rule, Source
from stockade.decision.settings import DecisionSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2
from stockade.v1 import decision_service_pb2_grpc as d_grpc
from tests.bench.common import echo_caller, echo_server, figure, latencies, percentile, throughput
from tests.pg import create_database, postgres_server

N_LATENCY = 1500
THROUGHPUT_S = 3.0
IN_FLIGHT = 64
ROUNDS = 4
"""Alternating rounds; each measures N_LATENCY / ROUNDS calls and THROUGHPUT_S / ROUNDS s."""


def thousand_rules(seed: int = 7) -> list[Rule]:
    """1,000 policy rules over 200 tools and the built-ins, every pattern form."""
    rng = random.Random(seed)
    tools = [f"tool_{i}" for i in range(200)] + ["run_bash", "read_file", "file_write"]
    rules = []
    for i in range(1000):
        tool = rng.choice(tools)
        form = rng.random()
        # Bare names only for the synthetic tools: the benchmarked calls of built-in tools
        # walk their content rules and end ALLOW (the hot path), not in an approval.
        if form < 0.3 and tool.startswith("tool_"):
            pattern = tool
        elif form < 0.6:
            pattern = f"{tool}(prefix{i}*)"
        elif form < 0.8:
            pattern = f"{tool}(*suffix{i})"
        else:
            pattern = f"{tool}(*mid{i}*)"
        rules.append(Rule(rng.choice(list(Effect)), pattern, Source.MANAGED))
    return rules


def distinct_requests(n: int = 1000) -> list[DecisionRequest]:
    """``n`` different calls, a mix of file reads, bash commands and other tools."""
    ex = Explanation(Risk.LOW, "Reads a file")
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            facts = Facts(read_only=True, inside_working_dir=True, explanation=ex)
            out.append(DecisionRequest("read_file", {"file_path": f"/w/src/m{i}.py"}, facts=facts))
        elif kind == 1:
            cmd = f"git log -n {i}"
            facts = Facts(sub_commands=(cmd,), read_only=True, explanation=ex)
            out.append(DecisionRequest("run_bash", {"command": cmd}, facts=facts))
        elif kind == 2:
            out.append(
                DecisionRequest(f"tool_{i % 200}", {"url": f"https://x.org/{i}"}, facts=Facts())
            )
        else:
            out.append(DecisionRequest("search_papers", {"query": f"q{i}"}, facts=Facts()))
    return out


FETCH = ToolTraits("fetch", True, True, Interrupt.CANCEL, Location.REMOTE, "url")
"""The dense workload's ``fetch``, declared (a ToolProvider's tool), so a fetch no rule names
is allowed (P8) rather than asked about as an unknown tool: misses stay misses."""


def dense_rules(n: int) -> list[Rule]:
    """``n`` rules, dense on three tools: 40% path globs on read_file (DENY), 40% exact
    commands on run_bash (ALLOW), 20% substrings on fetch (ASK)."""
    n_path, n_cmd = n * 4 // 10, n * 4 // 10
    n_sub = n - n_path - n_cmd
    rules = [
        Rule(Effect.DENY, f"read_file(**/secrets/{i}/**)", Source.MANAGED) for i in range(n_path)
    ]
    rules += [Rule(Effect.ALLOW, f"run_bash(git log -n {i})", Source.MANAGED) for i in range(n_cmd)]
    rules += [Rule(Effect.ASK, f"fetch(evil{i}.example)", Source.MANAGED) for i in range(n_sub)]
    return rules


def dense_requests(n_rules: int, n: int = 1000) -> list[DecisionRequest]:
    """``n`` distinct calls of the three tools, half hitting a rule and half missing all."""
    n_path, n_cmd = n_rules * 4 // 10, n_rules * 4 // 10
    n_sub = n_rules - n_path - n_cmd
    ex = Explanation(Risk.LOW, "Reads a file")
    out = []
    for i in range(n):
        hit = i % 2 == 0
        kind = (i // 2) % 3
        if kind == 0:
            path = f"/w/secrets/{i % n_path}/k{i}.pem" if hit else f"/w/src/m{i}.py"
            facts = Facts(read_only=True, inside_working_dir=True, explanation=ex)
            out.append(DecisionRequest("read_file", {"file_path": path}, facts=facts))
        elif kind == 1:
            cmd = f"git log -n {i % n_cmd}" if hit else f"git log -n {i} --stat"
            ask = (Rule(Effect.ASK, "run_bash", Source.TOOL, "tool check"),)
            facts = Facts(sub_commands=(cmd,), read_only=False, tool_rules=ask, explanation=ex)
            out.append(DecisionRequest("run_bash", {"command": cmd}, facts=facts))
        else:
            url = f"https://evil{i % n_sub}.example/{i}" if hit else f"https://ok{i}.org/x"
            out.append(DecisionRequest("fetch", {"url": url}, facts=Facts(explanation=ex)))
    return out


def rate(
    rules: list[Rule],
    reqs: list[DecisionRequest],
    rounds: int = 7,
    tools: Mapping[str, ToolTraits] | None = None,
) -> float:
    """Best of ``rounds`` rounds of 2 × the calls, in decisions per second of this
    process's CPU time: on this shared machine (load 10-25 on 2 cores) wall-clock rounds
    were mostly time given to other processes, and the 10-rule and 1,000-rule figures of
    one run differed by 2x from that alone."""
    policy = compile_policy(PolicyDoc(rules=tuple(rules), tools=tools or {}), cwd="/w")
    for r in reqs:
        decide(policy, r)
    best = 0.0
    for _ in range(rounds):
        t0 = time.process_time()
        for r in reqs:
            decide(policy, r)
        for r in reqs:
            decide(policy, r)
        best = max(best, 2 * len(reqs) / (time.process_time() - t0))
    return best


def in_process_rate() -> float:
    """The spread-out workload: 1,000 rules over 203 tools."""
    return rate(thousand_rules(), distinct_requests())


ADVERSARIAL = [
    "run_bash(*rm*-rf*)",
    "run_bash(*a*a*a*a*a*b*)",
    "read_file(**/a/**/a/**/a/**/b)",
    "read_file(*a*a*a*a*b)",
    "*(*x*y*z*x*y*z*)",
]
"""Patterns that make a backtracking matcher super-linear on long inputs of a's and rm's."""


def adversarial_seconds(length: int) -> float:
    """One decision each of a run_bash and a read_file call of ``length`` characters under
    the adversarial rules (none of which matches): the sum of each call's best of 7."""
    policy = compile_policy(
        PolicyDoc(rules=tuple(Rule(Effect.DENY, p, Source.MANAGED) for p in ADVERSARIAL)),
        cwd="/w",
    )
    unit = "rm a "
    cmd = (unit * (length // len(unit) + 1))[:length]
    path = "/" + ("a/" * (length // 2))[: length - 1]
    calls = [
        DecisionRequest("run_bash", {"command": cmd}, facts=Facts(sub_commands=(cmd,))),
        DecisionRequest("read_file", {"file_path": path}, facts=Facts()),
    ]
    total = 0.0
    for r in calls:
        best = float("inf")
        for _ in range(7):
            t0 = time.perf_counter()
            decide(policy, r)
            best = min(best, time.perf_counter() - t0)
        total += best
    return total


def _decide_request() -> d_pb2.DecideRequest:
    args = struct_pb2.Struct()
    args.update({"file_path": "src/main.py"})
    return d_pb2.DecideRequest(
        call=c_pb2.ToolCall(call_id="c1", tool_name="read_file", arguments=args, session_id="b"),
        inspection=d_pb2.ToolInspection(
            read_only=True,
            inside_working_dir=True,
            explanation=c_pb2.Explanation(risk=c_pb2.RISK_LEVEL_LOW, summary="Reads a file"),
        ),
    )


async def _rpc_figures(store_dsn: str = "") -> list[dict[str, Any]]:
    """PERF-1a/1b on the SQLite store, or with ``store_dsn`` on PostgreSQL (-pg)."""
    with tempfile.TemporaryDirectory(prefix="bd", dir="/tmp") as tmp:
        base = Path(tmp)
        policy = base / "policy.toml"
        rules = thousand_rules()
        lines = {e: [r.pattern for r in rules if r.effect is e] for e in Effect}
        policy.write_text(
            "[permissions]\n"
            + "".join(f"{e.value} = {lines[e]!r}\n" for e in Effect).replace("'", '"')
        )
        settings = load_settings(
            DecisionSettings,
            listen=f"unix://{base}/d.sock",
            state_dir=base / "state",
            policy_file=policy,
            grace_seconds=0,
            store_dsn=store_dsn,
        )
        async with DecisionApp(settings).open() as regs:
            srv = await create_server("decision", settings, regs)
            try:
                async with (
                    echo_server(f"unix://{base}/e.sock") as echo_addr,
                    aio_channel(echo_addr) as ech,
                    aio_channel(srv.address) as dch,
                ):
                    stub = d_grpc.DecisionServiceStub(dch)
                    req = _decide_request()

                    def decide_call() -> Any:
                        return stub.Decide(req)

                    echo = echo_caller(ech)
                    lat: dict[str, list[float]] = {"echo": [], "decide": []}
                    tp: dict[str, list[float]] = {"echo": [], "decide": []}
                    # All latency rounds, then all throughput rounds, each alternating and
                    # swapping which side goes first, so neither side always follows the
                    # other's load.
                    orders = [(("echo", echo), ("decide", decide_call))] * ROUNDS
                    orders = [o if i % 2 == 0 else o[::-1] for i, o in enumerate(orders)]
                    for order in orders:
                        for name, call in order:
                            lat[name] += await latencies(call, N_LATENCY // ROUNDS)
                    for order in orders:
                        for name, call in order:
                            tp[name].append(
                                await throughput(
                                    call, in_flight=IN_FLIGHT, seconds=THROUGHPUT_S / ROUNDS
                                )
                            )
                    echo_p50 = percentile(lat["echo"], 50)
                    dec_p50 = percentile(lat["decide"], 50)
                    # Equal-length rounds: the mean rate is the pooled calls over pooled time.
                    echo_tp = sum(tp["echo"]) / ROUNDS
                    dec_tp = sum(tp["decide"]) / ROUNDS
            finally:
                await stop_server(srv)
    suffix, store = ("-pg", "PostgreSQL store") if store_dsn else ("", "SQLite store")
    return [
        figure(
            f"PERF-1a{suffix}",
            f"Decide p50 latency vs echo RPC (unix socket, 1,000 policy rules, {store})",
            dec_p50 * 1000,
            "ms",
            baseline=echo_p50 * 1000,
            ratio=dec_p50 / echo_p50,
            target="<= 1.4",
        ),
        figure(
            f"PERF-1b{suffix}",
            f"Decide throughput vs echo RPC at {IN_FLIGHT} in flight ({store})",
            dec_tp,
            "calls/s",
            baseline=echo_tp,
            ratio=dec_tp / echo_tp,
            target=">= 0.5",
        ),
    ]


async def _pg_figures(server: str) -> list[dict[str, Any]]:
    return await _rpc_figures(await create_database(server))


def run() -> list[dict[str, Any]]:
    """The PERF-1 figures."""
    figures = asyncio.run(_rpc_figures())
    # The same on PostgreSQL (STORE-2): the session is cached after the first call, so
    # the ALLOW path reads no database and the ratios should match SQLite's.
    with postgres_server() as server:
        figures += asyncio.run(_pg_figures(server))
    dense_10 = rate(dense_rules(10), dense_requests(10), tools={"fetch": FETCH})
    dense_1000 = rate(dense_rules(1000), dense_requests(1000), tools={"fetch": FETCH})
    figures.append(
        figure(
            "PERF-1c",
            "in-process decisions/s, 1,000 dense rules (>= 200 on one tool) vs 10 rules",
            dense_1000,
            "decisions/s",
            baseline=dense_10,
            ratio=dense_1000 / dense_10,
            target=">= 0.5",
        )
    )
    figures.append(
        figure(
            "PERF-1c-spread",
            "in-process decisions/s, 1,000 rules spread over 203 tools (1,000 distinct calls)",
            in_process_rate(),
            "decisions/s",
            target="reported",
        )
    )
    short, long = adversarial_seconds(6_500), adversarial_seconds(65_000)
    figures.append(
        figure(
            "PERF-1c-linear",
            "adversarial wildcard rules: decision time at 65,000 vs 6,500 characters",
            long * 1000,
            "ms",
            baseline=short * 1000,
            ratio=long / short,
            target="<= 20 (linear: about 10)",
        )
    )
    return figures
