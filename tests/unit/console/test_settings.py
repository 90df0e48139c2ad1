"""Console settings: bad values are refused with the variable's name."""

from __future__ import annotations

import pytest

from stockade.console.settings import ConsoleSettings
from stockade.server.settings import SettingsError, load_settings


def test_tokens_and_lists_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "STOCKADE_CONSOLE_LOGIN_TOKENS", "alice=0123456789abcdef, bob=fedcba9876543210"
    )
    monkeypatch.setenv("STOCKADE_CONSOLE_TRUSTED_PROXIES", "10.0.0.0/8, 127.0.0.1")
    monkeypatch.setenv("STOCKADE_CONSOLE_ADMINS", "alice,group:sec")
    s = load_settings(ConsoleSettings)
    assert s.people_tokens() == {"alice": "0123456789abcdef", "bob": "fedcba9876543210"}
    assert s.trusted_proxies == ["10.0.0.0/8", "127.0.0.1"] and s.admins == ["alice", "group:sec"]
    # The tokens never show in the settings' text.
    assert "0123456789abcdef" not in repr(s) and "0123456789abcdef" not in str(s)


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [
        ("STOCKADE_CONSOLE_LOGIN_TOKENS", "alice", "name=token"),
        ("STOCKADE_CONSOLE_LOGIN_TOKENS", "alice=short", "shorter than 16"),
        ("STOCKADE_CONSOLE_LOGIN_TOKENS", "bad name=0123456789abcdef", "name=token"),
        ("STOCKADE_CONSOLE_TRUSTED_PROXIES", "proxy.example", "not an IP"),
        ("STOCKADE_CONSOLE_LISTEN", "nowhere", "HOST:PORT"),
        ("STOCKADE_CONSOLE_MAX_PENDING", "0", "greater than 0"),
        ("STOCKADE_CONSOLE_SESSION_MAX_AGE_S", "99999999", "less than or equal"),
    ],
)
def test_bad_settings_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError) as err:
        load_settings(ConsoleSettings)
    assert var in str(err.value) and needle in str(err.value)
    assert value not in str(err.value) or "TOKENS" not in var
