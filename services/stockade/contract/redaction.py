"""Secret masking for tool output, logged arguments and pages that show calls (the agent's
Redaction hook, the audit trail, the console).

Secrets that a tool reads (a private key in ``~/.ssh``, an ``.env`` with cloud keys, an
HTTP log with a bearer token) must not reach the model, nor the audit log. Each pattern
is specific enough to avoid masking ordinary text and keeps a short, recognisable label
so the model still understands that something was there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SecretPattern:
    """One kind of secret and how to find it."""

    kind: str
    """Label used in the mask, e.g. ``aws_access_key``."""
    regex: re.Pattern[str]
    """What to find; group ``secret`` (when present) is the part masked."""


def _p(kind: str, pattern: str, flags: int = 0) -> SecretPattern:
    return SecretPattern(kind, re.compile(pattern, flags))


#: The built-in patterns, most specific first (a private key block may contain text that
#: looks like other tokens).
PATTERNS: tuple[SecretPattern, ...] = (
    _p(
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*\Z)",
        re.DOTALL,
    ),
    _p("gcp_service_account_key", r'"private_key_id"\s*:\s*"(?P<secret>[0-9a-f]{16,})"'),
    _p("gcp_api_key", r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    _p("aws_access_key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
    _p(
        "aws_secret_key",
        r"(?i)\baws_?secret_?access_?key\b\s*[:=]\s*[\"']?(?P<secret>[A-Za-z0-9/+=]{40})",
    ),
    _p(
        "azure_key",
        r"(?i)\b(?:AccountKey|SharedAccessKey|azure[_-]?(?:storage|client)[_-]?(?:key|secret))"
        r"\s*[:=]\s*[\"']?(?P<secret>[A-Za-z0-9+/=_\-~.]{20,})",
    ),
    _p("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
    _p("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,250}"),
    _p("slack_webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"),
    _p("jwt", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"),
    _p("bearer_token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)"),
    _p(
        "generic_secret",
        r"(?i)\b(?:api[_-]?key|secret[_-]?key|client[_-]?secret|password|passwd|token)"
        r"\b[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;]{8,})",
    ),
)


@dataclass(frozen=True)
class Redacted:
    """The result of masking one text."""

    text: str
    """The masked text."""
    kinds: tuple[str, ...]
    """Which kinds of secret were found (one entry per match)."""


def redact(text: str, patterns: tuple[SecretPattern, ...] = PATTERNS) -> Redacted:
    """Mask every secret in ``text``."""
    kinds: list[str] = []
    for pattern in patterns:

        def mask(match: re.Match[str], kind: str = pattern.kind) -> str:
            kinds.append(kind)
            label = f"[REDACTED:{kind}]"
            if "secret" in match.re.groupindex and match.group("secret") is not None:
                start, end = match.span("secret")
                whole_start = match.start()
                return (
                    match.group(0)[: start - whole_start]
                    + label
                    + match.group(0)[end - whole_start :]
                )
            return label

        text = pattern.regex.sub(mask, text)
    return Redacted(text, tuple(kinds))


def redact_text(text: str) -> str:
    """``text`` with every secret masked."""
    return redact(text).text


def redact_value(value: Any) -> Any:
    """A JSON-like value with every string masked (for logged tool arguments)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(item) for item in value]
    return value


_SECRET_KEY = re.compile(
    r"(?i)(pass(?:word|wd|phrase)?|secret|token|api[_-]?key|authori[sz]ation|credential"
    r"|private[_-]?key|cookie|session[_-]?key)"
)
"""Argument names whose values are secrets whatever they look like."""


def redact_arguments(value: Any) -> Any:
    """Tool arguments for display: every string masked as ``redact_value`` does, and the
    whole value of a key whose name says it holds a secret (``password``, ``api_key``,
    ``token`` ...) replaced, since such a value need not look like any known secret."""
    if isinstance(value, Mapping):
        return {
            key: "[REDACTED:by_name]"
            if isinstance(key, str) and _SECRET_KEY.search(key) and value[key] not in ("", None)
            else redact_arguments(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_arguments(item) for item in value]
    return redact_value(value)
