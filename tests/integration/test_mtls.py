"""mTLS and caller identities over real TLS connections (X-3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade import devcerts
from stockade.client.base import TlsConfig, aio_channel
from stockade.server.app import Registration, RunningServer, create_server, stop_server
from stockade.server.errors import error_info
from stockade.server.settings import ServerSettings

SERVICE = "stockade.test.Guarded"


async def _echo(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    return request


def _add(servicer: object, server: grpc.aio.Server) -> None:
    handlers = {
        "Execute": grpc.unary_unary_rpc_method_handler(_echo),
        "Open": grpc.unary_unary_rpc_method_handler(_echo),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki")
    devcerts.generate(out)
    return out


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("other-pki")
    devcerts.generate(out)
    return out


@pytest.fixture
async def server(pki: Path) -> AsyncIterator[RunningServer]:
    settings = ServerSettings(
        listen="127.0.0.1:0",
        health_listen="127.0.0.1:0",
        tls_cert_file=pki / "executor.crt",
        tls_key_file=pki / "executor.key",
        tls_ca_file=pki / "ca.crt",
        grace_seconds=0,
    )
    reg = Registration(_add, None, SERVICE, method_identities={"Execute": frozenset({"agent"})})
    srv = await create_server("guarded", settings, [reg])
    yield srv
    await stop_server(srv)


def _tls(pki: Path, who: str, ca: Path | None = None) -> TlsConfig:
    return TlsConfig(pki / f"{who}.crt", pki / f"{who}.key", ca or pki / "ca.crt")


async def _call(address: str, method: str, tls: TlsConfig | None) -> bytes:
    async with aio_channel(address, tls=tls) as ch:
        result: bytes = await ch.unary_unary(f"/{SERVICE}/{method}")(b"ping", timeout=5)
        return result


async def test_the_allowed_identity_may_call(server: RunningServer, pki: Path) -> None:
    assert await _call(server.address, "Execute", _tls(pki, "agent")) == b"ping"


async def test_a_valid_certificate_with_the_wrong_identity_is_refused(
    server: RunningServer, pki: Path
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(server.address, "Execute", _tls(pki, "audit"))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    detail = error_info(info.value)
    assert detail is not None and detail.reason == "NOT_AUTHORIZED"
    assert detail.metadata["caller"] == "audit"


async def test_unrestricted_methods_take_any_valid_identity(
    server: RunningServer, pki: Path
) -> None:
    assert await _call(server.address, "Open", _tls(pki, "audit")) == b"ping"


async def test_missing_client_certificate_is_refused(server: RunningServer, pki: Path) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.crt").read_bytes())
    async with grpc.aio.secure_channel(server.address, creds) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await ch.unary_unary(f"/{SERVICE}/Open")(b"ping", timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_certificate_from_another_ca_is_refused(
    server: RunningServer, pki: Path, other_pki: Path
) -> None:
    # The client trusts the server's CA but presents a certificate signed by a stranger.
    tls = TlsConfig(other_pki / "agent.crt", other_pki / "agent.key", pki / "ca.crt")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(server.address, "Execute", tls)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_plaintext_client_is_refused(server: RunningServer) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(server.address, "Open", None)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_health_only_listener_is_plaintext_and_serves_nothing_else(
    server: RunningServer,
) -> None:
    async with grpc.aio.insecure_channel(server.health_address) as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=5
        )
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await ch.unary_unary(f"/{SERVICE}/Open")(b"ping", timeout=5)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_decision_admin_rpcs_follow_the_certificate_identity(
    pki: Path, tmp_path: Path
) -> None:
    """Over real mTLS: the admin identity may change a session's mode; the agent may
    decide but not administer (X-3)."""
    from stockade.decision.app import DecisionApp
    from stockade.decision.settings import DecisionSettings
    from stockade.v1 import common_pb2 as c_pb2
    from stockade.v1 import decision_service_pb2 as d_pb2
    from stockade.v1 import decision_service_pb2_grpc as d_grpc

    settings = DecisionSettings(
        listen="127.0.0.1:0",
        state_dir=tmp_path / "decision",
        tls_cert_file=pki / "decision.crt",
        tls_key_file=pki / "decision.key",
        tls_ca_file=pki / "ca.crt",
        admin_identities=["admin"],
        grace_seconds=0,
    )
    app = DecisionApp(settings)
    async with app.open() as registrations:
        srv = await create_server("decision", settings, registrations)
        try:
            async with aio_channel(srv.address, tls=_tls(pki, "agent")) as ch:
                stub = d_grpc.DecisionServiceStub(ch)
                await stub.CreateSession(d_pb2.CreateSessionRequest(session_id="s1"), timeout=5)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.SetMode(
                        d_pb2.SetModeRequest(session_id="s1", mode=c_pb2.PERMISSION_MODE_PLAN),
                        timeout=5,
                    )
                assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            async with aio_channel(srv.address, tls=_tls(pki, "admin")) as ch:
                resp = await d_grpc.DecisionServiceStub(ch).SetMode(
                    d_pb2.SetModeRequest(session_id="s1", mode=c_pb2.PERMISSION_MODE_PLAN),
                    timeout=5,
                )
                assert resp.session.mode == c_pb2.PERMISSION_MODE_PLAN
        finally:
            await stop_server(srv)


async def test_executor_runs_calls_only_for_the_agent_identity(pki: Path, tmp_path: Path) -> None:
    """Over real mTLS the executor answers Inspect to any service but Execute only to the
    agent's certificate (and then still needs a grant)."""
    from google.protobuf import struct_pb2

    from stockade.executor.app import ExecutorApp
    from stockade.executor.settings import ExecutorSettings
    from stockade.v1 import common_pb2 as c_pb2
    from stockade.v1 import executor_service_pb2 as x_pb2
    from stockade.v1 import executor_service_pb2_grpc as x_grpc

    (tmp_path / "a.txt").write_text("hi\n")
    settings = ExecutorSettings(
        listen="127.0.0.1:0",
        workspace=tmp_path,
        tls_cert_file=pki / "executor.crt",
        tls_key_file=pki / "executor.key",
        tls_ca_file=pki / "ca.crt",
        grant_public_key_file=pki / "grant-signing.pub",
        grace_seconds=0,
    )
    args = struct_pb2.Struct()
    args.update({"file_path": "a.txt"})
    call = c_pb2.ToolCall(call_id="c1", tool_name="read_file", arguments=args, session_id="s")
    async with ExecutorApp(settings).open() as registrations:
        srv = await create_server("executor", settings, registrations)
        try:
            async with aio_channel(srv.address, tls=_tls(pki, "audit")) as ch:
                stub = x_grpc.ExecutorServiceStub(ch)
                inspected = await stub.Inspect(x_pb2.InspectRequest(call=call), timeout=5)
                assert inspected.inspection.read_only
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    async for _ in stub.Execute(x_pb2.ExecuteRequest(call=call), timeout=5):
                        pass
                assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "not allowed for caller audit" in (info.value.details() or "")
            async with aio_channel(srv.address, tls=_tls(pki, "agent")) as ch:
                stub = x_grpc.ExecutorServiceStub(ch)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    async for _ in stub.Execute(x_pb2.ExecuteRequest(call=call), timeout=5):
                        pass
                # The right caller gets past the identity check, and is stopped by the
                # missing grant instead.
                detail = error_info(info.value)
                assert detail is not None and detail.reason == "GRANT_MISSING"
        finally:
            await stop_server(srv)
