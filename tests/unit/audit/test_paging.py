"""Page tokens: round trip, binding to the query, refusal of anything else."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stockade.audit.model import QueryFilters
from stockade.audit.paging import clamp_page_size, decode_token, encode_token
from stockade.errors import InvalidArgument, InvalidPageToken


def test_round_trip() -> None:
    filters = QueryFilters(session_id="s", start_ns=5)
    assert decode_token(encode_token(42, filters), filters) == 42
    assert decode_token("", filters) is None


def test_token_is_bound_to_its_filters() -> None:
    token = encode_token(42, QueryFilters(session_id="s"))
    for other in (QueryFilters(), QueryFilters(session_id="t"), QueryFilters("s", end_ns=1)):
        with pytest.raises(InvalidPageToken):
            decode_token(token, other)


def _token(body: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode()


@pytest.mark.parametrize(
    "body",
    [
        {"v": 2, "before": 5, "q": ""},
        {"v": 1, "before": "5", "q": ""},
        {"v": 1, "before": 0, "q": ""},
        {"v": 1, "before": True, "q": ""},
        {"v": 1, "q": ""},
        [1, 2],
        "text",
    ],
)
def test_well_encoded_but_wrong_bodies_are_refused(body: object) -> None:
    with pytest.raises(InvalidPageToken):
        decode_token(_token(body), QueryFilters())


@given(st.text(min_size=1, max_size=80))
def test_arbitrary_text_never_crashes(token: str) -> None:
    try:
        decode_token(token, QueryFilters())
    except InvalidPageToken:
        return
    raise AssertionError(f"accepted {token!r}")


def test_page_size_rules() -> None:
    assert clamp_page_size(0) == 100
    assert clamp_page_size(7) == 7
    assert clamp_page_size(10**6) == 1000
    with pytest.raises(InvalidArgument):
        clamp_page_size(-1)
