"""The pattern syntax (DEC-1): ``*``, ``tool``, ``tool(content)`` or ``*(content)``.

``*`` in content is a wildcard (``prefix*``, ``*suffix``, ``*mid*``); ``\\*`` is a
literal star. Parsing validates a pattern and names the problem; what the content means
for each kind of field is in ``paths`` (file paths), ``shellwords`` (commands) and
``compiled`` (the matchers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stockade.errors import InvalidPattern

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:\-]+$")


@dataclass(frozen=True)
class ParsedPattern:
    """A pattern split into its tool part and content part."""

    tool: str | None
    """The tool name, or None for ``*``."""
    content: str | None
    """The content between the parentheses, or None when absent."""


def parse_pattern(pattern: str) -> ParsedPattern:
    """Split and validate a pattern; raise ``InvalidPattern`` naming it and the problem."""
    text = pattern.strip()
    if not text:
        raise InvalidPattern("empty rule pattern", pattern=pattern, problem="empty")
    if "(" in text:
        name, _, rest = text.partition("(")
        if not rest.endswith(")"):
            raise InvalidPattern(
                f"rule pattern {pattern!r}: missing closing ')'",
                pattern=pattern,
                problem="unbalanced parenthesis",
            )
        content = rest[:-1]
        if not content.strip():
            raise InvalidPattern(
                f"rule pattern {pattern!r}: empty content between parentheses",
                pattern=pattern,
                problem="empty content",
            )
    else:
        if ")" in text:
            raise InvalidPattern(
                f"rule pattern {pattern!r}: ')' without '('",
                pattern=pattern,
                problem="unbalanced parenthesis",
            )
        name, content = text, None
    name = name.strip()
    if name != "*" and not _TOOL_NAME.match(name):
        raise InvalidPattern(
            f"rule pattern {pattern!r}: tool name {name!r} must be '*' or letters, digits, _ . : -",
            pattern=pattern,
            problem="bad tool name",
        )
    if content is not None and content.strip() == "*" and name != "*":
        # `tool(*)` means the same as `tool`; accept it but store the simpler form.
        content = None
    return ParsedPattern(tool=None if name == "*" else name, content=content)


def escape_content(text: str) -> str:
    """Escape a literal content so it matches only itself (used for ALWAYS_ALLOW grants)."""
    return text.replace("\\", "\\\\").replace("*", "\\*")


def split_glob(content: str) -> list[str | None]:
    """Split content into literal chunks and ``None`` for each unescaped ``*``."""
    parts: list[str | None] = []
    buf: list[str] = []
    i = 0
    while i < len(content):
        ch = content[i]
        if ch == "\\" and i + 1 < len(content) and content[i + 1] in "*\\":
            buf.append(content[i + 1])
            i += 2
            continue
        if ch == "*":
            if buf:
                parts.append("".join(buf))
                buf = []
            parts.append(None)
        else:
            buf.append(ch)
        i += 1
    if buf:
        parts.append("".join(buf))
    return parts
