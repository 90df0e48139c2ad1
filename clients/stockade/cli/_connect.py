"""How every CLI command that dials a service presents itself: address, mTLS files, and
a readable error (with a hint when a plaintext client meets an mTLS server).

``--tls-cert/--tls-key/--tls-ca`` (defaults ``$STOCKADE_TLS_CERT``, ``$STOCKADE_TLS_KEY``,
``$STOCKADE_TLS_CA``) make the command use mutual TLS, as the production overlay
requires; ``--tls-server-name`` (``$STOCKADE_TLS_SERVER_NAME``) checks the server
certificate against another name than the address's host (e.g. ``decision`` through a
port-forward).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import grpc

from stockade.client.base import TlsConfig, rpc_error
from stockade.client.errors import ServiceError

_TLS_ENV = {
    "tls_cert": "STOCKADE_TLS_CERT",
    "tls_key": "STOCKADE_TLS_KEY",
    "tls_ca": "STOCKADE_TLS_CA",
    "tls_server_name": "STOCKADE_TLS_SERVER_NAME",
}


def add_tls_args(parser: argparse.ArgumentParser) -> None:
    """``--tls-cert``, ``--tls-key``, ``--tls-ca`` and ``--tls-server-name``."""
    group = parser.add_argument_group("mutual TLS (all three files, or none)")
    group.add_argument(
        "--tls-cert",
        metavar="PEM",
        default=os.environ.get(_TLS_ENV["tls_cert"], ""),
        help="client certificate (default $STOCKADE_TLS_CERT)",
    )
    group.add_argument(
        "--tls-key",
        metavar="PEM",
        default=os.environ.get(_TLS_ENV["tls_key"], ""),
        help="client private key (default $STOCKADE_TLS_KEY)",
    )
    group.add_argument(
        "--tls-ca",
        metavar="PEM",
        default=os.environ.get(_TLS_ENV["tls_ca"], ""),
        help="CA bundle the server certificate chains to (default $STOCKADE_TLS_CA)",
    )
    group.add_argument(
        "--tls-server-name",
        metavar="NAME",
        default=os.environ.get(_TLS_ENV["tls_server_name"], ""),
        help="name to check in the server certificate (default: the address's host)",
    )


class ConnectError(Exception):
    """The connection options are unusable (the message says which and why)."""


def tls_from_args(args: argparse.Namespace) -> TlsConfig | None:
    """The client TLS configuration, or None for plaintext; ``ConnectError`` when only
    some of the files are given or one cannot be read."""
    files = {
        "--tls-cert": getattr(args, "tls_cert", ""),
        "--tls-key": getattr(args, "tls_key", ""),
        "--tls-ca": getattr(args, "tls_ca", ""),
    }
    given = {flag: value for flag, value in files.items() if value}
    if not given:
        return None
    if len(given) != len(files):
        missing = ", ".join(flag for flag in files if flag not in given)
        raise ConnectError(f"mutual TLS needs all three files; missing {missing}")
    for flag, value in given.items():
        if not Path(value).is_file():
            raise ConnectError(f"{flag} {value}: no such file")
    return TlsConfig(
        Path(files["--tls-cert"]),
        Path(files["--tls-key"]),
        Path(files["--tls-ca"]),
        server_name=getattr(args, "tls_server_name", "") or "",
    )


def rpc_error_text(err: grpc.RpcError | ServiceError, *, tls: bool, address: str) -> str:
    """``CODE: details`` with a hint for the failures a first-time user meets (from a raw
    stub's ``grpc.RpcError`` or a typed client's ``ServiceError``)."""
    if not isinstance(err, ServiceError):
        err = rpc_error("", err)
    code = grpc.StatusCode.__members__.get(err.code, grpc.StatusCode.UNKNOWN)
    details = err.details
    text = f"{err.code}: {details}"
    lowered = details.lower()
    if (
        code is grpc.StatusCode.UNAVAILABLE
        and not tls
        and ("socket closed" in lowered or "connection reset" in lowered or "ssl" in lowered)
    ):
        text += (
            f"\n  hint: {address} may require mutual TLS; pass --tls-cert, --tls-key and "
            "--tls-ca (or set STOCKADE_TLS_CERT, STOCKADE_TLS_KEY, STOCKADE_TLS_CA)"
        )
    elif (
        code is grpc.StatusCode.UNAVAILABLE
        and tls
        and ("handshake" in lowered or "ssl" in lowered or "certificate" in lowered)
    ):
        text += (
            "\n  hint: the TLS handshake failed: check that --tls-ca signed the server's "
            "certificate, that the server trusts --tls-cert, and --tls-server-name"
        )
    elif code is grpc.StatusCode.UNAVAILABLE:
        text += f"\n  hint: is the service running at {address}?"
    return text
