"""Start-up as an operator meets it: a typo or a bad policy stops the service with one
line naming the fix (exit 2, no traceback); a good start says what was loaded; `serve
all` wires the grant keys so the executor accepts the decision service's grants."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc

from stockade.v1 import executor_service_pb2 as x_pb2
from stockade.v1 import executor_service_pb2_grpc as x_grpc

DEADLINE_S = 60.0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("STOCKADE_")}
    env.update(extra)
    return env


def _serve(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stockade.cli.main", "serve", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


def test_a_misspelt_variable_stops_the_service_naming_the_fix(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[permissions]\nallow = ["read_file"]\n')
    done = _serve(
        ["decision"],
        _env(
            STOCKADE_DECISION_POLCY_FILE=str(policy),
            STOCKADE_DECISION_LISTEN=f"unix://{tmp_path}/d.sock",
            STOCKADE_DECISION_STATE_DIR=str(tmp_path / "state"),
        ),
    )
    assert done.returncode == 2
    assert "STOCKADE_DECISION_POLCY_FILE" in done.stderr
    assert "did you mean STOCKADE_DECISION_POLICY_FILE?" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unsupported_exporter_stops_the_service(tmp_path: Path) -> None:
    done = _serve(
        ["audit"],
        _env(
            OTEL_TRACES_EXPORTER="jaeger",
            STOCKADE_AUDIT_LISTEN=f"unix://{tmp_path}/a.sock",
            STOCKADE_AUDIT_STATE_DIR=str(tmp_path / "state"),
        ),
    )
    assert done.returncode == 2
    assert "OTEL_TRACES_EXPORTER=jaeger is not supported" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_policy_file_is_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[permissions]\nallow = ["read_file(unclosed"\n')
    done = _serve(
        ["decision"],
        _env(
            STOCKADE_DECISION_POLICY_FILE=str(policy),
            STOCKADE_DECISION_LISTEN=f"unix://{tmp_path}/d.sock",
            STOCKADE_DECISION_STATE_DIR=str(tmp_path / "state"),
        ),
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert len(errors) == 1 and "policy" in errors[0], done.stderr
    # Nothing else on stderr but the JSON log lines before it.
    others = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and "cannot start" not in line and not line.startswith("{")
    ]
    assert others == [], done.stderr


async def _wait_ready(proc: subprocess.Popen[str], ready: Path) -> dict[str, str]:
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while not ready.exists():
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
        if loop.time() > end:
            raise AssertionError("server did not become ready")
        await asyncio.sleep(0.05)
    return dict(line.split("=", 1) for line in ready.read_text().splitlines() if line)


async def test_serve_all_wires_the_grant_keys_and_says_what_it_loaded(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[permissions]\ndeny = ["run_bash(rm *)"]\nallow = ["read_file"]\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    ready = tmp_path / "ready"
    env = _env(
        STOCKADE_READY_FILE=str(ready),
        STOCKADE_DECISION_POLICY_FILE=str(policy),
        STOCKADE_EXECUTOR_WORKSPACE=str(ws),
    )
    for svc in ("decision", "executor", "audit", "agent"):
        env[f"STOCKADE_{svc.upper()}_LISTEN"] = f"unix://{tmp_path}/{svc}.sock"
        env[f"STOCKADE_{svc.upper()}_STATE_DIR"] = str(tmp_path / "state" / svc)
    for svc in ("decision", "executor", "audit"):
        env[f"STOCKADE_AGENT_{svc.upper()}_ADDR"] = f"unix://{tmp_path}/{svc}.sock"
    env["STOCKADE_AGENT_SPOOL_DIR"] = str(tmp_path / "spool")
    proc = subprocess.Popen(
        [sys.executable, "-m", "stockade.cli.main", "serve", "all"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        addresses = await _wait_ready(proc, ready)
        async with grpc.aio.insecure_channel(addresses["executor"]) as ch:
            caps = await x_grpc.ExecutorServiceStub(ch).GetCapabilities(
                x_pb2.GetCapabilitiesRequest(), timeout=20
            )
        grant = next(layer for layer in caps.layers if layer.name == "grant_verification")
        assert grant.active and "Ed25519 grants required" in grant.detail, grant.detail
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert f"policy {policy} version" in err
    assert "1 deny, 0 ask, 1 allow rules" in err
    assert "audit store" in err and "executor workspace" in err and "agent provider" in err
    assert "Traceback" not in err
