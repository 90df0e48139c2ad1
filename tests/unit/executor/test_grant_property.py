"""Property (DEC-12 rev 2): Execute accepts a grant only if the grant's settlement covers the
executor's own verdict, whatever inspection the caller gave Decide.

For generated commands and calls, a generated caller behaviour (honest inspection, none, an
empty one, or a forged one), a mode and allow rules, the real decision path (facts, engine,
settlement, signer) issues a grant when it allows; the real executor verifier, given the
executor's own inspection, accepts it only if (a) the executor has no ASK, or (b) the grant
settles every ASK (an immune one by an approval only) and the grant binds the executor's
own findings or none at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import struct_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.contract.grant import parse_claims
from stockade.decision.core import settlement
from stockade.decision.engine import DecisionRequest, decide
from stockade.decision.facts import facts_from_inspection
from stockade.decision.grants import GrantSigner
from stockade.decision.modes import Mode
from stockade.decision.policy import compile_policy, parse_policy_text
from stockade.decision.rules import Effect
from stockade.errors import GrantError
from stockade.executor.convert import inspection_to_proto
from stockade.executor.grants import GrantVerifier, inspection_findings
from stockade.executor.inspect import inspect_call
from stockade.executor.paths import PathSandbox, Root
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import decision_service_pb2 as d_pb2

WORDS = [
    "ls", "echo ok", "cat a.txt", "python3 -c 'print(1)'", "npm install", "rm -f a.txt",
    "nice rm a.txt", "cat /etc/passwd", "echo x > b.txt", "git status", "chmod 600 a.txt",
    "timeout 5 npm test", "env X=1 python3 -c 1", "curl http://example.com", "sort a.txt",
]  # fmt: skip
JOINERS = [" && ", "; ", " | ", " || "]
ALLOW_SETS = [
    [],
    ["run_bash(npm *)"],
    ["run_bash(cat /etc/passwd)", "run_bash(rm *)"],
    ["run_bash", "file_write"],
    ["run_bash(python3 *)", "file_edit"],
]

commands = st.builds(
    lambda parts, joins: (
        "".join(p + j for p, j in zip(parts, joins, strict=False)) + parts[-1]
        if len(parts) > 1
        else parts[0]
    ),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    st.lists(st.sampled_from(JOINERS), min_size=2, max_size=2),
)
calls = st.one_of(
    commands.map(lambda c: ("run_bash", {"command": c})),
    st.sampled_from(["a.txt", "new.txt", "../outside.txt", "/etc/hosts"]).map(
        lambda p: ("file_write", {"file_path": p, "content": "x"})
    ),
    st.sampled_from(["a.txt", "/etc/hosts"]).map(lambda p: ("read_file", {"file_path": p})),
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[PathSandbox, str]:
    ws: Path = tmp_path_factory.mktemp("ws")
    (ws / "a.txt").write_text("a\n")
    return PathSandbox([Root(str(ws), True)], str(ws)), str(ws)


def _forge(honest: d_pb2.ToolInspection, how: int) -> d_pb2.ToolInspection:
    lie = d_pb2.ToolInspection()
    lie.CopyFrom(honest)
    if how == 0:  # drop every tool rule
        del lie.tool_rules[:]
    elif how == 1:  # strip the immunity
        for r in lie.tool_rules:
            r.bypass_immune = False
    elif how == 2:  # claim read-only, inside the working dir
        lie.read_only = True
        lie.inside_working_dir = True
        del lie.tool_rules[:]
    else:  # hide a sub-command
        if lie.HasField("analysis") and lie.analysis.sub_command_texts:
            del lie.analysis.sub_command_texts[-1]
        del lie.tool_rules[:]
    return lie


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    call=calls,
    caller=st.sampled_from(["honest", "none", "empty", "forged"]),
    forge=st.integers(0, 3),
    mode=st.sampled_from(list(Mode)),
    allow=st.sampled_from(ALLOW_SETS),
    approved=st.booleans(),
)
def test_execute_accepts_only_settled_grants(
    world: tuple[PathSandbox, str],
    call: tuple[str, dict[str, str]],
    caller: str,
    forge: int,
    mode: Mode,
    allow: list[str],
    approved: bool,
) -> None:
    sandbox, cwd = world
    tool, args = call
    own = inspect_call(tool, args, sandbox=sandbox)
    args_pb = struct_pb2.Struct()
    args_pb.update(args)
    honest = inspection_to_proto(own, c_pb2.ToolCall(tool_name=tool, arguments=args_pb))
    sent = {
        "honest": honest,
        "none": None,
        "empty": d_pb2.ToolInspection(),
        "forged": _forge(honest, forge),
    }[caller]
    facts = facts_from_inspection(tool, sent)
    policy = compile_policy(
        parse_policy_text(json.dumps({"permissions": {"allow": allow}}), "yaml"), cwd=cwd
    )
    d = decide(policy, DecisionRequest(tool_name=tool, arguments=args, mode=mode, facts=facts))
    key = Ed25519PrivateKey.generate()
    signer, verifier = GrantSigner(key), GrantVerifier(key.public_key())
    if d.verdict is Effect.ALLOW:
        settle = settlement(d)
    elif d.verdict is Effect.ASK and approved:
        settle = {"by": "approval", "approval": "ap-1", "resolver": "token:alice"}
    else:
        return  # no grant is issued
    grant = signer.sign(
        session_id="s", call_id="c", tool_name=tool, arguments=args,
        findings=facts.findings, settle=settle,
    )  # fmt: skip
    try:
        verifier.verify(
            grant.payload, grant.signature, session_id="s", call_id="c", tool_name=tool,
            arguments=args, inspection=own,
        )  # fmt: skip
        accepted = True
    except GrantError:
        accepted = False
    if own.denied:
        return  # the executor refuses the call itself (REFUSED result), grant or not
    digest, rules = inspection_findings(own)
    claims = parse_claims(grant.payload)
    asks = [r for r in rules if r.effect == "ask"]
    covered = all(
        claims.settle["by"] == "approval"
        if r.bypass_immune
        else claims.settle["by"] in ("rule", "mode", "approval", "classifier")
        for r in asks
    )
    binds_own = claims.findings in ("", digest)
    assert accepted == (covered and binds_own), (call, caller, mode, allow, claims)
    if accepted and caller in ("none", "empty"):
        # findings were unknown: only a person, a rule or a mode can have allowed it
        assert claims.settle["by"] in ("approval", "rule", "mode")
    if caller == "forged" and sent is not None and sent != honest and accepted:
        raise AssertionError(f"a forged inspection bought a grant: {call} {claims}")
