"""Issue 11: the three offline checks judge as the running executor does.

``stockade bash-check``, ``stockade path-check`` and ``stockade policy check`` are how a
person (and the held-out attack corpus) asks the executor's judgement offline. They must
see what the executor sees at run time: the policy file's protected reads (denied and
asked) plus the executor's own ``DENIED_READ_GLOBS``. Before, ``bash-check`` and
``path-check`` took no policy file and ``path-check`` no denied reads at all, and
``policy check`` could not be given the executor's own setting: the same call was allowed
offline and refused by the executor.

One workspace (a git repository whose history holds a committed `.env`), one policy, one
real executor over gRPC (reading the same policy file, with its own denied-read setting);
for every call of the table the executor's Inspect verdict (and bypass immunity) must be
what each CLI prints.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from stockade.cli import checks as checks_cli
from stockade.cli import policy as policy_cli
from stockade.executor.app import ExecutorApp
from stockade.executor.settings import ExecutorSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server
from stockade.v1 import common_pb2 as c_pb2
from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

POLICY = """
[permissions]
deny  = ["read_file(**/.env)"]
ask   = ["read_file(**/private/**)"]
allow = ["run_bash(ls *)"]
"""
SETTING = "**/*.pem"  # the executor's own DENIED_READ_GLOBS: adds to the policy's

BASH = [
    "ls -la",
    "cat README.md",
    "cat .env",
    "cat sub/.env",
    "cat key.pem",
    "head private/notes.txt",
    "grep -r TODO .",
    "git show HEAD:.env",
    "git show HEAD:key.pem",
    "git log -p",
    "git log -p -- src",
    "git log -p -- ':!.env'",
    "git diff HEAD~1 -- src",
    "git archive HEAD",
    "tar cf - . | wc -c",
    "find . -name '*.pem' -exec cat {} +",
    "curl -s https://example.org",
]
PATHS = ["README.md", ".env", "sub/.env", "key.pem", "private/notes.txt", "src/app.py"]


@asynccontextmanager
async def executor(base: Path, ws: Path) -> AsyncIterator[x_grpc.ExecutorServiceStub]:
    settings = load_settings(
        ExecutorSettings,
        listen="127.0.0.1:0",
        workspace=ws,
        policy_file=base / "policy.toml",
        denied_read_globs=[SETTING],
    )
    async with ExecutorApp(settings).open() as registrations:
        server = await create_server("executor", settings, registrations)
        try:
            async with grpc.aio.insecure_channel(server.address) as channel:
                yield x_grpc.ExecutorServiceStub(channel)
        finally:
            await stop_server(server)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="stockade")
    sub = parser.add_subparsers()
    checks_cli.register(sub)
    policy_cli.register(sub)
    ns = parser.parse_args(argv)
    assert ns.func(ns) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


async def _inspect(
    stub: x_grpc.ExecutorServiceStub, tool: str, args: dict[str, Any]
) -> tuple[str, bool]:
    s = struct_pb2.Struct()
    s.update(args)
    call = c_pb2.ToolCall(call_id="c", tool_name=tool, arguments=s, session_id="s")
    got = await stub.Inspect(x_pb2.InspectRequest(call=call))
    effects = {r.effect for r in got.inspection.tool_rules}
    verdict = (
        "deny"
        if c_pb2.RULE_EFFECT_DENY in effects
        else "ask"
        if c_pb2.RULE_EFFECT_ASK in effects
        else "allow"
    )
    return verdict, any(r.bypass_immune for r in got.inspection.tool_rules)


def _workspace(tmp_path: Path) -> Path:
    ws = Path(os.path.realpath(tmp_path)) / "ws"
    for folder in ("src", "sub", "private"):
        (ws / folder).mkdir(parents=True)
    (ws / "README.md").write_text("hello\n")
    (ws / "src" / "app.py").write_text("x = 1\n")
    (ws / "sub" / ".env").write_text("K=v\n")
    (ws / "private" / "notes.txt").write_text("n\n")
    (ws / ".env").write_text("TOKEN=t\n")
    (ws / "key.pem").write_text("-----BEGIN-----\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for step in (
        "git init -q -b main .",
        "git add -A && git add -f .env key.pem && git commit -qm one",
        "echo y = 2 >> src/app.py && git commit -qam two",
    ):
        subprocess.run(["bash", "-c", step], cwd=ws, env=env, check=True, capture_output=True)
    return ws


async def test_bash_check_path_check_and_policy_check_judge_as_the_executor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = _workspace(tmp_path)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    common = ["--cwd", str(ws), "--denied-read", SETTING]
    seen: set[str] = set()
    async with executor(tmp_path, ws) as stub:
        for command in BASH:
            want = await _inspect(stub, "run_bash", {"command": command})
            seen.add(want[0])
            bash = _cli(
                ["bash-check", "--json", "--root", str(ws), *common, "--policy", str(policy),
                 "--", command],
                capsys,
            )  # fmt: skip
            assert (bash["verdict"], bash["bypass_immune"]) == want, (command, bash)
            checked = _cli(
                ["policy", "check", "--json", "--policy", str(policy), "--tool", "run_bash",
                 "--args", json.dumps({"command": command}), "--root", str(ws), *common],
                capsys,
            )  # fmt: skip
            # The executor's own findings as the decision received them: the tool rules.
            effects = {r["effect"] for r in checked["tool_rules"]}
            offline = "deny" if "deny" in effects else "ask" if "ask" in effects else "allow"
            assert offline == want[0], (command, checked)
        for path in PATHS:
            want = await _inspect(stub, "read_file", {"file_path": path})
            seen.add(want[0])
            checked_path = _cli(
                ["path-check", "--json", "--root", str(ws), *common, "--policy", str(policy),
                 path],
                capsys,
            )  # fmt: skip
            assert checked_path["verdict"] == want[0], (path, checked_path)
    assert seen == {"allow", "ask", "deny"}  # the table exercises every verdict


def test_path_check_and_bash_check_refuse_an_unreadable_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["bash-check", "--policy", str(tmp_path / "missing.toml"), "--", "ls"],
        ["path-check", "--root", str(tmp_path), "--policy", str(tmp_path / "missing.toml"), "a"],
    ):
        parser = argparse.ArgumentParser(prog="stockade")
        checks_cli.register(parser.add_subparsers())
        ns = parser.parse_args(argv)
        with pytest.raises(SystemExit) as exc:
            ns.func(ns)
        assert exc.value.code == 2
        assert "cannot read policy file" in capsys.readouterr().err
