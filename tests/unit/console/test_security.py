"""CSRF tokens and the same-origin check, with the ways around them."""

from __future__ import annotations

from typing import Any

import pytest

from stockade.console.security import (
    CSP,
    LoginThrottle,
    csrf_ok,
    csrf_token,
    reset_csrf,
    same_origin,
)


def test_csrf_token_is_made_once_and_checked_in_full() -> None:
    session: dict[str, Any] = {}
    token = csrf_token(session)
    assert len(token) >= 40 and csrf_token(session) == token
    assert csrf_ok(session, token)
    for wrong in (None, "", token[:-1], token + "x", token.upper(), 1, [token], {"t": token}):
        assert not csrf_ok(session, wrong), wrong
    reset_csrf(session)
    assert not csrf_ok(session, token)
    assert csrf_token(session) != token


def test_a_session_without_a_token_accepts_nothing() -> None:
    assert not csrf_ok({}, "")
    assert not csrf_ok({"csrf": ""}, "")
    assert not csrf_ok({"csrf": 5}, "5")


def test_a_short_stored_token_is_replaced() -> None:
    session: dict[str, Any] = {"csrf": "short"}
    assert csrf_token(session) != "short"


@pytest.mark.parametrize(
    ("headers", "ok"),
    [
        ({}, True),
        ({"origin": "http://console.example:8470"}, True),
        ({"origin": "https://console.example:8470"}, True),
        ({"origin": "https://evil.example"}, False),
        ({"origin": "https://console.example:8470.evil.example"}, False),
        ({"origin": "https://console.example"}, False),  # another port is another origin
        ({"origin": "null"}, False),
        ({"sec-fetch-site": "same-origin"}, True),
        ({"sec-fetch-site": "none"}, True),
        ({"sec-fetch-site": "cross-site"}, False),
        ({"sec-fetch-site": "same-site"}, False),
        ({"sec-fetch-site": "same-origin", "origin": "https://evil.example"}, False),
    ],
)
def test_same_origin(headers: dict[str, str], ok: bool) -> None:
    assert same_origin(headers, "console.example:8470") is ok


def test_csp_has_no_inline_and_no_framing() -> None:
    assert "script-src 'self'" in CSP and "unsafe" not in CSP
    assert "frame-ancestors 'none'" in CSP and "default-src 'none'" in CSP


def test_failed_sign_ins_are_throttled_per_address_and_bounded() -> None:
    now = [1000.0]
    throttle = LoginThrottle(limit=3, window_s=60, max_addresses=2, clock=lambda: now[0])
    for _ in range(3):
        assert not throttle.blocked("10.0.0.1")
        throttle.failed("10.0.0.1")
    assert throttle.blocked("10.0.0.1")
    assert not throttle.blocked("10.0.0.2")  # per address
    now[0] += 61
    assert not throttle.blocked("10.0.0.1")  # the window passed
    for address in ("a", "b", "c"):
        throttle.failed(address)
    assert len(throttle._failures) == 2  # bounded: the oldest address was forgotten
