"""Sign-in and roles: proxy headers only from the proxy, tokens compared in full, roles
from the settings, and the attempts to get around each."""

from __future__ import annotations

import pytest

from stockade.console.people import MAX_HEADER_CHARS, HeaderError, People, Person, Role

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789xx"}


def people(**kw: object) -> People:
    base: dict[str, object] = {
        "tokens": TOKENS,
        "trusted_proxies": ["10.1.2.3", "192.168.7.0/24"],
        "admins": ["alice", "root@example.com"],
        "resolvers": ["bob", "group:oncall"],
        "viewers": ["group:staff"],
    }
    base.update(kw)
    return People(**base)  # type: ignore[arg-type]


def test_proxy_headers_name_the_person_only_from_a_trusted_address() -> None:
    p = people()
    headers = {"x-forwarded-email": "root@example.com", "x-forwarded-user": "root"}
    assert p.from_proxy("10.1.2.3", headers) == Person("root@example.com", (), "proxy")
    assert p.from_proxy("192.168.7.200", headers) is not None
    for peer in ("10.1.2.4", "127.0.0.1", "192.168.8.1", None, "", "not-an-ip", "::ffff:10.1.2.4"):
        assert p.from_proxy(peer, headers) is None, peer


def test_without_configured_proxies_headers_never_count() -> None:
    p = people(trusted_proxies=[])
    assert p.from_proxy("127.0.0.1", {"x-forwarded-user": "alice"}) is None


def test_user_header_is_used_when_no_email() -> None:
    assert people().from_proxy("10.1.2.3", {"x-forwarded-user": "carol"}) == Person(
        "carol", (), "proxy"
    )
    assert people().from_proxy("10.1.2.3", {"x-forwarded-user": "  "}) is None


@pytest.mark.parametrize(
    "headers",
    [
        {"x-forwarded-email": "a" * (MAX_HEADER_CHARS + 1)},
        {"x-forwarded-user": "alice\nX-Injected: 1"},
        {"x-forwarded-user": "alice\x00admin"},
        {"x-forwarded-user": "alice", "x-forwarded-groups": ",".join(f"g{i}" for i in range(65))},
    ],
)
def test_malformed_proxy_identities_are_refused_not_cut(headers: dict[str, str]) -> None:
    with pytest.raises(HeaderError):
        people().from_proxy("10.1.2.3", headers)


def test_groups_from_the_proxy_map_to_roles() -> None:
    p = people()
    oncall = p.from_proxy(
        "10.1.2.3", {"x-forwarded-user": "dan", "x-forwarded-groups": "x, oncall"}
    )
    assert oncall is not None and p.role_of(oncall) is Role.RESOLVER
    staff = p.from_proxy("10.1.2.3", {"x-forwarded-user": "eve", "x-forwarded-groups": "staff"})
    assert staff is not None and p.role_of(staff) is Role.VIEWER


def test_roles_take_the_highest_and_unknown_people_get_none() -> None:
    p = people()
    assert p.role_of(Person("alice")) is Role.ADMIN
    assert p.role_of(Person("bob")) is Role.RESOLVER
    assert p.role_of(Person("mallory")) is Role.NONE
    assert p.role_of(None) is Role.NONE
    # A user named like a group entry is not in that group.
    assert p.role_of(Person("group:oncall")) is Role.RESOLVER  # the literal name is listed
    assert p.role_of(Person("oncall")) is Role.NONE
    assert people(viewers=["*"]).role_of(Person("anyone")) is Role.VIEWER
    assert people(admins=["*"]).role_of(Person("anyone")) is Role.NONE  # * reads, nothing more


def test_tokens_must_match_in_full() -> None:
    p = people()
    assert p.from_token(TOKENS["alice"]) == Person("alice")
    assert p.from_token(f"  {TOKENS['bob']} ") == Person("bob")
    for guess in ("", " ", TOKENS["alice"][:-1], TOKENS["alice"] + "x", TOKENS["alice"].upper(),
                  "alice", "alice-token-0123456789\x00"):  # fmt: skip
        assert p.from_token(guess) is None, guess


def test_login_is_offered_only_with_tokens() -> None:
    assert people().token_login and people().token_names == {"alice", "bob"}
    assert not people(tokens={}).token_login
    assert people(tokens={}).from_token("") is None
