"""The CLI reaches an mTLS deployment: certificates by flag or environment, a hint when
a plaintext client meets an mTLS server, and quiet ends on a closed pipe."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stockade import devcerts
from stockade.decision.app import DecisionApp
from stockade.decision.settings import DecisionSettings
from stockade.server import create_server, load_settings
from stockade.server.app import stop_server

STOCKADE = [sys.executable, "-m", "stockade.cli.main"]


async def _run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *STOCKADE,
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_session_commands_over_mtls(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    devcerts.generate(pki)
    policy = tmp_path / "policy.toml"
    policy.write_text('[permissions]\nallow = ["read_file"]\n')
    settings = load_settings(
        DecisionSettings,
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        policy_file=policy,
        tls_cert_file=pki / "decision.crt",
        tls_key_file=pki / "decision.key",
        tls_ca_file=pki / "ca.crt",
        admin_identities=["admin"],
    )
    async with DecisionApp(settings).open() as regs:
        srv = await create_server("decision", settings, regs)
        port = srv.address.rsplit(":", 1)[1]
        addr = ["--addr", f"localhost:{port}"]
        try:
            # Plaintext against mTLS: an error with the hint, not a bare "Socket closed".
            code, _, err = await _run("session", "create", "s1", *addr)
            assert code == 1
            assert "UNAVAILABLE" in err and "--tls-cert" in err and "mutual TLS" in err
            # Certificates by flag.
            tls = [
                "--tls-cert", str(pki / "agent.crt"),
                "--tls-key", str(pki / "agent.key"),
                "--tls-ca", str(pki / "ca.crt"),
                "--tls-server-name", "decision",
            ]  # fmt: skip
            code, out, err = await _run("session", "create", "s1", "--json", *tls, *addr)
            assert code == 0, err
            assert '"session_id": "s1"' in out
            # Certificates by environment; the human form names the mode as a word.
            # A clean environment: only the TLS variables decide how the command dials.
            env = {
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("STOCKADE_", "GRPC_", "SSL_", "OTEL_"))
            }
            env.update(
                OTEL_SDK_DISABLED="true",
                STOCKADE_TLS_CERT=str(pki / "agent.crt"),
                STOCKADE_TLS_KEY=str(pki / "agent.key"),
                STOCKADE_TLS_CA=str(pki / "ca.crt"),
                STOCKADE_TLS_SERVER_NAME="decision",
            )
            for _ in range(3):
                # A TLS handshake can fail transiently on a very busy machine; a real
                # misconfiguration fails every time.
                code, out, err = await _run("session", "get", "s1", *addr, env=env)
                if code == 0 or "UNAVAILABLE" not in err:
                    break
            assert code == 0, err
            assert "session_id: s1" in out.replace("  ", " ")
            assert "mode:" in out and "default" in out and "PERMISSION_MODE" not in out
        finally:
            await stop_server(srv)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--tls-cert", "/nonexistent.crt"], "missing --tls-key, --tls-ca"),
        (
            ["--tls-cert", "/no/c", "--tls-key", "/no/k", "--tls-ca", "/no/ca"],
            "--tls-cert /no/c: no such file",
        ),
    ],
)
async def test_incomplete_tls_flags_are_a_usage_error(flags: list[str], says: str) -> None:
    code, _, err = await _run("session", "get", "s1", "--addr", "127.0.0.1:1", *flags)
    assert code == 2
    assert says in err and "Traceback" not in err


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    lines = "".join(f'"ls dir{i}"\n' for i in range(3000))
    proc = subprocess.Popen(
        [*STOCKADE, "bash-check", "--batch", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(lines.encode())
    proc.stdin.close()
    first = proc.stdout.readline()
    assert first.startswith(b"{")
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    proc.stderr.close()
    code = proc.wait(timeout=90)
    assert code in (0, 141), err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
