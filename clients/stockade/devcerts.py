"""Development certificates: a private CA, one mTLS key pair per service, an admin client
certificate and the Ed25519 grant-signing key pair.

``python -m stockade.devcerts --out DIR [--services decision,executor,audit,agent,console]``
writes, with the ``cryptography`` package only (no openssl binary):

- ``ca.crt`` / ``ca.key`` — the development CA (ECDSA P-256);
- ``<service>.crt`` / ``<service>.key`` — one certificate per service, CN = the service
  name, SANs = the service name, ``<svc>.<ns>``, ``<svc>.<ns>.svc``,
  ``<svc>.<ns>.svc.cluster.local``, ``localhost``, ``127.0.0.1`` and ``::1``, a URI SAN
  ``spiffe://stockade/<svc>``, usable for both server and client authentication (the
  agent is a server and a client of the executor);
- ``admin.crt`` / ``admin.key`` — a client-only certificate (CN ``admin``) for admin RPCs;
- ``grant-signing.key`` (PKCS#8 PEM, private) / ``grant-signing.pub`` (SubjectPublicKeyInfo
  PEM) — the Ed25519 pair the decision service signs grants with and the executor checks.

Running it again is idempotent: files that exist, parse and still fit (signed by the
current CA, same names, not close to expiry) are kept; anything missing or stale is
(re)written. If the CA itself is replaced every leaf is re-issued, since the old leaves
would no longer verify. Private keys are written with mode 0600, certificates 0644.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_SERVICES: tuple[str, ...] = ("decision", "executor", "audit", "agent", "console")
DEFAULT_NAMESPACE = "stockade"
ADMIN_NAME = "admin"
CA_NAME = "ca"
GRANT_PRIVATE = "grant-signing.key"
GRANT_PUBLIC = "grant-signing.pub"
SPIFFE_PREFIX = "spiffe://stockade/"
# File stems a service may not take: its key would overwrite one of these.
RESERVED_NAMES = frozenset({CA_NAME, ADMIN_NAME, "grant-signing"})

# Development material: long enough not to expire during a dev cycle, short enough that
# nobody mistakes it for production PKI.
CA_VALIDITY = dt.timedelta(days=3650)
LEAF_VALIDITY = dt.timedelta(days=825)
# A leaf that expires within this window is re-issued on the next run.
RENEW_BEFORE = dt.timedelta(days=30)

KEY_MODE = 0o600
CERT_MODE = 0o644


@dataclass(frozen=True)
class Identity:
    """What a leaf certificate must say: its common name, DNS/IP/URI SANs and usages."""

    name: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    uris: tuple[str, ...]
    server: bool


@dataclass
class DevCertsResult:
    """The outcome of one run: every file written (new or replaced) and every file kept."""

    out: Path
    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


def service_identity(service: str, namespace: str = DEFAULT_NAMESPACE) -> Identity:
    """The identity of a service certificate: reachable by every name a client may dial."""
    return Identity(
        name=service,
        dns_names=(
            service,
            f"{service}.{namespace}",
            f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local",
            "localhost",
        ),
        ip_addresses=("127.0.0.1", "::1"),
        uris=(f"{SPIFFE_PREFIX}{service}",),
        server=True,
    )


def admin_identity() -> Identity:
    """The admin client identity: client authentication only, no host names."""
    return Identity(
        name=ADMIN_NAME,
        dns_names=(),
        ip_addresses=(),
        uris=(f"{SPIFFE_PREFIX}{ADMIN_NAME}",),
        server=False,
    )


def _is_dns_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and label.isascii()
        and all(c.isalnum() or c == "-" for c in label)
        and label[0].isalnum()
        and label[-1].isalnum()
        and label.lower() == label
    )


def validate_service_name(name: str) -> str:
    """Refuse names that cannot be a DNS label (they would make unusable SANs, or escape
    the output folder) and names whose files would overwrite the CA, admin or grant keys."""
    label = name.strip()
    if not _is_dns_label(label):
        raise ValueError(f"invalid service name {name!r}: must be a lowercase DNS label")
    if label in RESERVED_NAMES:
        raise ValueError(f"invalid service name {name!r}: reserved")
    return label


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write via a temporary file in the same folder, so a crash never leaves half a key and
    the key file never exists with looser permissions than ``mode``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _private_pem(key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _load_ec_key(path: Path) -> ec.EllipticCurvePrivateKey | None:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    return key if isinstance(key, ec.EllipticCurvePrivateKey) else None


def _load_cert(path: Path) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None


def _same_public_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    fmt = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    return cert.public_key().public_bytes(enc, fmt) == key.public_key().public_bytes(enc, fmt)


def _fresh(cert: x509.Certificate, now: dt.datetime) -> bool:
    return cert.not_valid_before_utc <= now and cert.not_valid_after_utc - RENEW_BEFORE > now


def _make_ca(now: dt.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Stockade development"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Stockade development CA"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _sans(identity: Identity) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in identity.dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in identity.ip_addresses]
    names += [x509.UniformResourceIdentifier(u) for u in identity.uris]
    return names


def _make_leaf(
    identity: Identity,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    now: dt.datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if identity.server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Stockade development"),
            x509.NameAttribute(NameOID.COMMON_NAME, identity.name),
        ]
    )
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + LEAF_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(_sans(identity)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _leaf_fits(
    cert: x509.Certificate,
    key: ec.EllipticCurvePrivateKey,
    identity: Identity,
    ca_cert: x509.Certificate,
    now: dt.datetime,
) -> bool:
    """True when an existing leaf can be kept: issued by this CA, for this key and these
    names, and not about to expire."""
    if cert.issuer != ca_cert.subject or not _same_public_key(cert, key) or not _fresh(cert, now):
        return False
    ca_public = ca_cert.public_key()
    if not isinstance(ca_public, ec.EllipticCurvePublicKey):
        return False
    try:
        hash_alg = cert.signature_hash_algorithm
        if hash_alg is None:
            return False
        ca_public.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hash_alg))
    except InvalidSignature:
        return False
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return len(cns) == 1 and cns[0].value == identity.name and set(sans) == set(_sans(identity))


def _ensure_ca(
    out: Path, now: dt.datetime, result: DevCertsResult
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, bool]:
    key_path, cert_path = out / f"{CA_NAME}.key", out / f"{CA_NAME}.crt"
    key, cert = _load_ec_key(key_path), _load_cert(cert_path)
    if key is not None and cert is not None and _same_public_key(cert, key) and _fresh(cert, now):
        result.kept += [cert_path, key_path]
        return key, cert, False
    key, cert = _make_ca(now)
    _write_atomic(key_path, _private_pem(key), KEY_MODE)
    _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), CERT_MODE)
    result.written += [cert_path, key_path]
    return key, cert, True


def _ensure_leaf(
    out: Path,
    identity: Identity,
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
    now: dt.datetime,
    force: bool,
    result: DevCertsResult,
) -> None:
    key_path, cert_path = out / f"{identity.name}.key", out / f"{identity.name}.crt"
    key, cert = _load_ec_key(key_path), _load_cert(cert_path)
    if not force and key is not None and cert is not None:
        if _leaf_fits(cert, key, identity, ca[1], now):
            result.kept += [cert_path, key_path]
            return
    key, cert = _make_leaf(identity, ca[0], ca[1], now)
    _write_atomic(key_path, _private_pem(key), KEY_MODE)
    _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), CERT_MODE)
    result.written += [cert_path, key_path]


def _ensure_grant_keys(out: Path, result: DevCertsResult) -> None:
    priv_path, pub_path = out / GRANT_PRIVATE, out / GRANT_PUBLIC
    pub_fmt = serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        priv = serialization.load_pem_private_key(priv_path.read_bytes(), password=None)
        pub = serialization.load_pem_public_key(pub_path.read_bytes())
    except (OSError, ValueError, TypeError):
        priv, pub = None, None
    if isinstance(priv, ed25519.Ed25519PrivateKey) and isinstance(pub, ed25519.Ed25519PublicKey):
        pem = serialization.Encoding.PEM
        if priv.public_key().public_bytes(pem, pub_fmt) == pub.public_bytes(pem, pub_fmt):
            result.kept += [priv_path, pub_path]
            return
    new = ed25519.Ed25519PrivateKey.generate()
    public_pem = new.public_key().public_bytes(serialization.Encoding.PEM, pub_fmt)
    _write_atomic(priv_path, _private_pem(new), KEY_MODE)
    # The public half is not secret, but it is what the executor trusts: keep it read-only
    # to others rather than writable.
    _write_atomic(pub_path, public_pem, CERT_MODE)
    result.written += [priv_path, pub_path]


def generate(
    out: Path,
    services: Sequence[str] = DEFAULT_SERVICES,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    now: dt.datetime | None = None,
) -> DevCertsResult:
    """Create (or complete) the development PKI and grant keys in ``out``; idempotent.

    Raises ``ValueError`` for a service name that is not a lowercase DNS label.
    """
    names = [validate_service_name(s) for s in services]
    if not names:
        raise ValueError("at least one service is required")
    if not _is_dns_label(namespace):
        raise ValueError(f"invalid namespace {namespace!r}: must be a lowercase DNS label")
    moment = now or _now()
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    result = DevCertsResult(out=out)
    ca_key, ca_cert, ca_new = _ensure_ca(out, moment, result)
    for name in dict.fromkeys(names):
        identity = service_identity(name, namespace)
        _ensure_leaf(out, identity, (ca_key, ca_cert), moment, ca_new, result)
    _ensure_leaf(out, admin_identity(), (ca_key, ca_cert), moment, ca_new, result)
    _ensure_grant_keys(out, result)
    return result


def _parse_services(raw: str) -> list[str]:
    items = [part.strip() for part in raw.split(",") if part.strip()]
    try:
        return [validate_service_name(item) for item in items]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of ``python -m stockade.devcerts``."""
    parser = argparse.ArgumentParser(
        prog="python -m stockade.devcerts",
        description="Create a development CA, per-service mTLS certificates, an admin "
        "client certificate and the Ed25519 grant-signing key pair (idempotent).",
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--services",
        type=_parse_services,
        default=list(DEFAULT_SERVICES),
        help="comma-separated service names (default: %(default)s)",
    )
    parser.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help="Kubernetes namespace used in the DNS SANs (default: %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: generate the files and list what was written and kept."""
    args = build_parser().parse_args(argv)
    try:
        result = generate(args.out, args.services, namespace=args.namespace)
    except ValueError as exc:
        print(f"devcerts: {exc}", file=sys.stderr)
        return 2
    for path in result.written:
        print(f"wrote {path}")
    for path in result.kept:
        print(f"kept  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
