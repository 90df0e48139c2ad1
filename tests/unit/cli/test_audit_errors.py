"""``stockade audit`` reports a failed call from the typed audit client (a
``stockade.client.errors.ServiceError``, no longer a ``grpc.RpcError``) as before:
``error: CODE: details`` with a hint, exit status 1, no traceback."""

from __future__ import annotations

import grpc
import pytest

from stockade.cli._connect import rpc_error_text
from stockade.cli.main import main
from stockade.client.errors import service_error

NOBODY = "unix:///tmp/stockade-nobody-listens-agentshape-cli.sock"


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "query", "--addr", NOBODY],
        ["audit", "verify", "--addr", NOBODY],
        ["audit", "metrics", "--session", "s1", "--addr", NOBODY],
        ["audit", "tail", "--addr", NOBODY],
    ],
    ids=lambda a: a[1],
)
def test_an_unreachable_audit_service_is_one_clear_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: UNAVAILABLE: "), err
    assert f"hint: is the service running at {NOBODY}?" in err
    assert "Traceback" not in err


class _RawError(grpc.RpcError):
    """What a raw stub raises (the decision commands still use stubs)."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "Socket closed"


def test_typed_and_raw_errors_read_the_same() -> None:
    typed = service_error("audit", "UNAVAILABLE", "Socket closed")
    for err in (typed, _RawError()):
        text = rpc_error_text(err, tls=False, address="audit:50054")
        assert text.startswith("UNAVAILABLE: Socket closed\n  hint: audit:50054 may require")
