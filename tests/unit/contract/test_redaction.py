"""Secret masking, including obfuscation attempts and false-positive checks."""

from __future__ import annotations

import pytest

from stockade.contract.redaction import redact, redact_text, redact_value

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(
    ("text", "kind", "secret"),
    [
        (f"id_rsa:\n{PEM}\ntrailer", "private_key", "b3BlbnNzaC1rZXktdjEAAAAABG5v"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow...(cut)", "private_key", "MIIEow"),
        ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "aws_secret_key",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (
            "key=AIzaSyA-1234567890abcdefghijklmnopqrstu",
            "gcp_api_key",
            "AIzaSyA-1234567890abcdefghijklmnopqrstu",
        ),
        (
            '{"private_key_id": "0123456789abcdef0123"}',
            "gcp_service_account_key",
            "0123456789abcdef0123",
        ),
        (
            "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=abcdEFGH1234ijklMNOP5678==;",
            "azure_key",
            "abcdEFGH1234ijklMNOP5678==",
        ),
        (
            "token ghp_" + "a" * 36,
            "github_token",
            "ghp_" + "a" * 36,
        ),
        ("xoxb-1234567890-abcdefghij", "slack_token", "xoxb-1234567890-abcdefghij"),
        ("Authorization: Bearer abc.def-ghi_123456", "bearer_token", "abc.def-ghi_123456"),
        ("authorization: bearer QWERTYUIOP1234", "bearer_token", "QWERTYUIOP1234"),
        (f"cookie {JWT}", "jwt", JWT),
        ("password: hunter2hunter2", "generic_secret", "hunter2hunter2"),
    ],
)
def test_secrets_are_masked(text: str, kind: str, secret: str) -> None:
    result = redact(text)
    assert secret not in result.text
    assert kind in result.kinds
    assert f"[REDACTED:{kind}]" in result.text


def test_context_around_a_secret_is_kept() -> None:
    text = redact_text("Authorization: Bearer abcdefgh12345678 trailing")
    assert text.startswith("Authorization: Bearer [REDACTED:bearer_token]")
    assert text.endswith(" trailing")


def test_ordinary_text_is_untouched() -> None:
    text = "The bearer of bad news read AKIA docs; tokens are counted. password reset link."
    result = redact(text)
    assert result.text == text and result.kinds == ()


def test_several_secrets_and_nested_values() -> None:
    value = {"cmd": ["curl -H 'Authorization: Bearer zzzzzzzzzz1'", {"k": "AKIAABCDEFGHIJKLMNOP"}]}
    masked = redact_value(value)
    flat = repr(masked)
    assert "zzzzzzzzzz1" not in flat and "AKIAABCDEFGHIJKLMNOP" not in flat
    assert redact_value(3) == 3
