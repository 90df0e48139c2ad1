"""Page tokens for newest-first queries (keyset paging on the row sequence).

A token is opaque to callers: urlsafe base64 of ``{"v": 1, "before": <sequence>,
"q": <digest of the filters>}``. Binding the filters means a token cannot be replayed
against another query; anything that does not decode is ``InvalidPageToken``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json

from stockade.audit.model import QueryFilters
from stockade.errors import InvalidArgument, InvalidPageToken

#: Rows per page when the caller does not say.
DEFAULT_PAGE_SIZE = 100
#: Largest page; bigger requests are served this many rows (AIP-158 coercion).
MAX_PAGE_SIZE = 1000
_VERSION = 1


def filters_digest(filters: QueryFilters) -> str:
    """A short digest identifying the query a token belongs to."""
    text = json.dumps(dataclasses.asdict(filters), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_token(before_sequence: int, filters: QueryFilters) -> str:
    """The token for the page that starts below ``before_sequence``."""
    body = {"v": _VERSION, "before": before_sequence, "q": filters_digest(filters)}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, filters: QueryFilters) -> int | None:
    """The sequence bound a token carries (``None`` for the first page), or raise."""
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        body = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidPageToken("page_token is malformed", page_token=token[:64]) from None
    if not isinstance(body, dict) or body.get("v") != _VERSION:
        raise InvalidPageToken("page_token is malformed", page_token=token[:64])
    before = body.get("before")
    if type(before) is not int or before < 1:
        raise InvalidPageToken("page_token is malformed", page_token=token[:64])
    if body.get("q") != filters_digest(filters):
        raise InvalidPageToken(
            "page_token belongs to a query with other filters", page_token=token[:64]
        )
    return before


def clamp_page_size(page_size: int) -> int:
    """The page size to serve: default for 0, at most ``MAX_PAGE_SIZE``; negative refused."""
    if page_size < 0:
        raise InvalidArgument("page_size must not be negative", field="page_size")
    if page_size == 0:
        return DEFAULT_PAGE_SIZE
    return min(page_size, MAX_PAGE_SIZE)
