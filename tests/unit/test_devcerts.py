"""Tests for stockade.devcerts: file layout and modes, idempotence, re-issue rules, names,
the grant key pair, and a real gRPC mTLS handshake with the generated material."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import _async as health_async
from grpc_health.v1 import health_pb2, health_pb2_grpc

from stockade import devcerts

SERVICES = ("decision", "executor", "audit", "agent", "console")


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _verify_signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> None:
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert leaf.signature_hash_algorithm is not None
    public.verify(
        leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(leaf.signature_hash_algorithm)
    )


def test_generates_every_file_with_private_modes(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    result = devcerts.generate(out)
    names = {p.name for p in out.iterdir()}
    expected = {"ca.crt", "ca.key", "admin.crt", "admin.key", "grant-signing.key"}
    expected |= {"grant-signing.pub"} | {f"{s}.{ext}" for s in SERVICES for ext in ("crt", "key")}
    assert names == expected
    assert {p.name for p in result.written} == expected
    assert result.kept == []
    for path in out.iterdir():
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.suffix == ".key":
            assert mode == 0o600, path
        else:
            assert mode & 0o022 == 0, path
    assert stat.S_IMODE(out.stat().st_mode) == 0o700


def test_second_run_keeps_every_byte(tmp_path: Path) -> None:
    devcerts.generate(tmp_path)
    before = _snapshot(tmp_path)
    result = devcerts.generate(tmp_path)
    assert result.written == []
    assert _snapshot(tmp_path) == before


def test_service_certificate_names_and_usages(tmp_path: Path) -> None:
    devcerts.generate(tmp_path, namespace="prod-ns")
    ca = _cert(tmp_path / "ca.crt")
    for service in SERVICES:
        cert = _cert(tmp_path / f"{service}.crt")
        _verify_signed_by(cert, ca)
        cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        assert cn == service
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = set(sans.get_values_for_type(x509.DNSName))
        assert {service, f"{service}.prod-ns.svc", "localhost"} <= dns
        ips = set(sans.get_values_for_type(x509.IPAddress))
        assert ipaddress.ip_address("127.0.0.1") in ips
        assert sans.get_values_for_type(x509.UniformResourceIdentifier) == [
            f"spiffe://stockade/{service}"
        ]
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        basic = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        assert basic.ca is False


def test_admin_certificate_is_client_only(tmp_path: Path) -> None:
    devcerts.generate(tmp_path)
    cert = _cert(tmp_path / "admin.crt")
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == []
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"


def test_ca_is_a_ca_and_leaves_are_not(tmp_path: Path) -> None:
    devcerts.generate(tmp_path)
    ca = _cert(tmp_path / "ca.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    leaf = _cert(tmp_path / "decision.crt")
    # A leaf must not be able to mint certificates: no keyCertSign.
    assert leaf.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is False


def test_missing_leaf_is_reissued_alone(tmp_path: Path) -> None:
    devcerts.generate(tmp_path)
    before = _snapshot(tmp_path)
    (tmp_path / "executor.key").unlink()
    result = devcerts.generate(tmp_path)
    assert {p.name for p in result.written} == {"executor.crt", "executor.key"}
    after = _snapshot(tmp_path)
    assert after["executor.crt"] != before["executor.crt"]
    assert {k: v for k, v in after.items() if not k.startswith("executor.")} == {
        k: v for k, v in before.items() if not k.startswith("executor.")
    }
    _verify_signed_by(_cert(tmp_path / "executor.crt"), _cert(tmp_path / "ca.crt"))


def test_new_ca_reissues_every_leaf(tmp_path: Path) -> None:
    devcerts.generate(tmp_path)
    old_leaf = (tmp_path / "audit.crt").read_bytes()
    (tmp_path / "ca.key").unlink()
    devcerts.generate(tmp_path)
    ca = _cert(tmp_path / "ca.crt")
    assert (tmp_path / "audit.crt").read_bytes() != old_leaf
    for name in (*SERVICES, "admin"):
        _verify_signed_by(_cert(tmp_path / f"{name}.crt"), ca)


def test_leaf_from_another_ca_is_replaced(tmp_path: Path) -> None:
    """A planted certificate (same name, foreign issuer, matching key) must not be kept."""
    devcerts.generate(tmp_path / "real")
    devcerts.generate(tmp_path / "evil")
    for suffix in ("crt", "key"):
        planted = (tmp_path / "evil" / f"decision.{suffix}").read_bytes()
        (tmp_path / "real" / f"decision.{suffix}").write_bytes(planted)
    result = devcerts.generate(tmp_path / "real")
    assert tmp_path / "real" / "decision.crt" in result.written
    _verify_signed_by(
        _cert(tmp_path / "real" / "decision.crt"), _cert(tmp_path / "real" / "ca.crt")
    )


def test_forged_issuer_name_is_caught_by_signature(tmp_path: Path) -> None:
    """Same issuer name, different CA key: only the signature check tells them apart."""
    devcerts.generate(tmp_path / "real")
    devcerts.generate(tmp_path / "evil")
    evil_ca = _cert(tmp_path / "evil" / "ca.crt")
    real_ca = _cert(tmp_path / "real" / "ca.crt")
    assert evil_ca.subject == real_ca.subject
    with pytest.raises(InvalidSignature):
        _verify_signed_by(_cert(tmp_path / "evil" / "agent.crt"), real_ca)
    (tmp_path / "real" / "agent.crt").write_bytes((tmp_path / "evil" / "agent.crt").read_bytes())
    (tmp_path / "real" / "agent.key").write_bytes((tmp_path / "evil" / "agent.key").read_bytes())
    devcerts.generate(tmp_path / "real")
    _verify_signed_by(_cert(tmp_path / "real" / "agent.crt"), real_ca)


def test_corrupt_files_are_rewritten(tmp_path: Path) -> None:
    devcerts.generate(tmp_path)
    (tmp_path / "agent.crt").write_text("not a certificate")
    (tmp_path / "grant-signing.pub").write_text("garbage")
    result = devcerts.generate(tmp_path)
    assert tmp_path / "agent.crt" in result.written
    assert tmp_path / "grant-signing.pub" in result.written
    _cert(tmp_path / "agent.crt")


def test_leaf_close_to_expiry_is_renewed(tmp_path: Path) -> None:
    long_ago = dt.datetime.now(dt.UTC) - devcerts.LEAF_VALIDITY + dt.timedelta(days=5)
    devcerts.generate(tmp_path, now=long_ago)
    old = _cert(tmp_path / "decision.crt")
    result = devcerts.generate(tmp_path)
    new = _cert(tmp_path / "decision.crt")
    assert new.not_valid_after_utc > old.not_valid_after_utc
    # The CA is still years from expiry, so it is kept.
    assert tmp_path / "ca.crt" in result.kept


def test_changed_namespace_reissues_service_leaves(tmp_path: Path) -> None:
    devcerts.generate(tmp_path, namespace="one")
    result = devcerts.generate(tmp_path, namespace="two")
    assert tmp_path / "decision.crt" in result.written
    sans = _cert(tmp_path / "decision.crt").extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert "decision.two.svc" in sans.value.get_values_for_type(x509.DNSName)


def test_grant_key_pair_signs_and_verifies(tmp_path: Path) -> None:
    devcerts.generate(tmp_path)
    private = serialization.load_pem_private_key(
        (tmp_path / "grant-signing.key").read_bytes(), password=None
    )
    public = serialization.load_pem_public_key((tmp_path / "grant-signing.pub").read_bytes())
    assert isinstance(private, ed25519.Ed25519PrivateKey)
    assert isinstance(public, ed25519.Ed25519PublicKey)
    signature = private.sign(b'{"call":"x"}')
    public.verify(signature, b'{"call":"x"}')
    with pytest.raises(InvalidSignature):
        public.verify(signature, b'{"call":"y"}')
    # The public file carries no private material.
    assert b"PRIVATE" not in (tmp_path / "grant-signing.pub").read_bytes()


def test_mismatched_grant_public_key_is_regenerated(tmp_path: Path) -> None:
    devcerts.generate(tmp_path / "a")
    devcerts.generate(tmp_path / "b")
    (tmp_path / "a" / "grant-signing.pub").write_bytes(
        (tmp_path / "b" / "grant-signing.pub").read_bytes()
    )
    devcerts.generate(tmp_path / "a")
    private = serialization.load_pem_private_key(
        (tmp_path / "a" / "grant-signing.key").read_bytes(), password=None
    )
    public = serialization.load_pem_public_key((tmp_path / "a" / "grant-signing.pub").read_bytes())
    assert isinstance(private, ed25519.Ed25519PrivateKey)
    assert isinstance(public, ed25519.Ed25519PublicKey)
    public.verify(private.sign(b"m"), b"m")


@pytest.mark.parametrize(
    "name", ["../escape", "a/b", "Decision", "-x", "x-", "", "ca", "admin", "grant-signing", "é"]
)
def test_bad_service_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError):
        devcerts.generate(tmp_path / "out", [name])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_bad_namespace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="namespace"):
        devcerts.generate(tmp_path, namespace="a.b")


def test_cli_custom_services_and_usage_error(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "stockade.devcerts", "--out", str(tmp_path), "--services", "papers"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "papers.crt").exists()
    assert not (tmp_path / "decision.crt").exists()
    assert "wrote" in run.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "stockade.devcerts", "--out", str(tmp_path), "--services", "../x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "invalid service name" in bad.stderr


# --- a real mTLS handshake with the generated files -------------------------------------


async def _health_status(
    port: int, creds: grpc.ChannelCredentials, target_name: str = "decision"
) -> int:
    options = (("grpc.ssl_target_name_override", target_name),)
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds, options=options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
        return int(reply.status)


def _client_creds(
    folder: Path, name: str, ca_folder: Path | None = None
) -> grpc.ChannelCredentials:
    ca = (ca_folder or folder) / "ca.crt"
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(),
        private_key=(folder / f"{name}.key").read_bytes(),
        certificate_chain=(folder / f"{name}.crt").read_bytes(),
    )


async def test_generated_certificates_work_for_grpc_mtls(tmp_path: Path) -> None:
    real, evil = tmp_path / "real", tmp_path / "evil"
    devcerts.generate(real)
    devcerts.generate(evil)
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health_async.HealthServicer(), server)
    server_creds = grpc.ssl_server_credentials(
        [((real / "decision.key").read_bytes(), (real / "decision.crt").read_bytes())],
        root_certificates=(real / "ca.crt").read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", server_creds)
    await server.start()
    try:
        serving = health_pb2.HealthCheckResponse.SERVING
        assert await _health_status(port, _client_creds(real, "agent")) == serving
        assert await _health_status(port, _client_creds(real, "admin")) == serving
        # A certificate from another CA is refused at the handshake.
        with pytest.raises(grpc.aio.AioRpcError) as foreign:
            await _health_status(port, _client_creds(evil, "agent", ca_folder=real))
        assert foreign.value.code() == grpc.StatusCode.UNAVAILABLE
        # No client certificate at all is refused too.
        no_cert = grpc.ssl_channel_credentials(root_certificates=(real / "ca.crt").read_bytes())
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await _health_status(port, no_cert)
        assert missing.value.code() == grpc.StatusCode.UNAVAILABLE
        # The server's certificate does not cover another service's name.
        with pytest.raises(grpc.aio.AioRpcError) as wrong_host:
            await _health_status(port, _client_creds(real, "agent"), target_name="executor")
        assert wrong_host.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(None)
