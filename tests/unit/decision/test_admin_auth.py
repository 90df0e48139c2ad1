"""Admin RPC authorisation (X-3): bearer tokens or an mTLS identity; nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.errors import NotAuthorized
from stockade.server.access import AdminAuth


class FakeContext:
    """Only the two ServicerContext methods AdminAuth reads (a real server is tested in
    tests/integration/test_decision_service.py; peer certificates need mTLS set-up)."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = (), cn: str | None = None):
        self._metadata = metadata
        self._auth = {"x509_common_name": [cn.encode()]} if cn else {}

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._auth


def check(auth: AdminAuth, ctx: FakeContext) -> str:
    return auth.check(ctx, "SetMode")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "metadata",
    [
        (),
        (("authorization", "Bearer nope"),),
        (("authorization", "tok"),),  # no scheme
        (("authorization", "Basic tok"),),
        (("x-authorization", "Bearer tok"),),
        (("authorization", "Bearer tok2"),),  # a prefix-extended token
        (("authorization", "Bearer to"),),  # a truncated token
    ],
)
def test_wrong_or_missing_tokens_are_refused(metadata: Any) -> None:
    with pytest.raises(NotAuthorized) as err:
        check(AdminAuth(["tok"]), FakeContext(metadata))
    assert err.value.code == "PERMISSION_DENIED" and "SetMode" in err.value.message


def test_token_and_identity_accepted() -> None:
    auth = AdminAuth(["tok"], ["ops-admin"])
    assert check(auth, FakeContext((("authorization", "bearer tok"),))) == "token:token-1"
    assert check(auth, FakeContext(cn="ops-admin")) == "mtls:ops-admin"
    with pytest.raises(NotAuthorized):
        check(auth, FakeContext(cn="agent"))


def test_nothing_configured_refuses_everyone_and_says_how_to_configure() -> None:
    with pytest.raises(NotAuthorized) as err:
        check(
            AdminAuth([], [], configure_hint="set STOCKADE_DECISION_ADMIN_TOKENS"),
            FakeContext((("authorization", "Bearer "),), cn="x"),
        )
    assert "STOCKADE_DECISION_ADMIN_TOKENS" in err.value.message


def test_named_tokens_name_the_caller_and_the_old_form_still_works() -> None:
    auth = AdminAuth(["alice=tok-a", "tok-b", "dGVzdA=="])
    assert check(auth, FakeContext((("authorization", "Bearer tok-a"),))) == "token:alice"
    assert check(auth, FakeContext((("authorization", "Bearer tok-b"),))) == "token:token-2"
    # base64 padding is not a name separator
    assert check(auth, FakeContext((("authorization", "Bearer dGVzdA=="),))) == "token:token-3"
    # the name is not a password: "alice" alone, or "alice=tok-a" as a token, is refused
    for wrong in ("alice", "alice=tok-a"):
        with pytest.raises(NotAuthorized):
            check(auth, FakeContext((("authorization", f"Bearer {wrong}"),)))


def test_on_behalf_of_is_honoured_only_from_trusted_admin_callers() -> None:
    on_behalf = ("x-stockade-on-behalf-of", "bob@example.com")
    console = (("authorization", "Bearer tok-c"), on_behalf)
    other = (("authorization", "Bearer tok-o"), on_behalf)
    auth = AdminAuth(["console=tok-c", "ops=tok-o"], [], ["token:console"])
    assert auth.resolver_identity(FakeContext(console), "ResolveApproval") == (  # type: ignore[arg-type]
        "bob@example.com",
        "token:console",
    )
    # another admin is not a trusted delegate: its own identity, the header ignored
    assert auth.resolver_identity(FakeContext(other), "ResolveApproval") == ("token:ops", "")  # type: ignore[arg-type]
    # without admin rights the header buys nothing
    with pytest.raises(NotAuthorized):
        auth.resolver_identity(FakeContext((on_behalf,)), "ResolveApproval")  # type: ignore[arg-type]
    # no delegate list: any admin caller may act for a signed-in person
    open_auth = AdminAuth(["ops=tok-o"])
    assert open_auth.resolver_identity(FakeContext(other), "ResolveApproval")[0] == (  # type: ignore[arg-type]
        "bob@example.com"
    )
