"""One rule compiled: its text, path and command matchers, and the one-by-one semantics.

``CompiledRule.matches``/``allows``/``allows_command`` test one rule at a time with Python's
``re``: the plain reference the tiers (``tier``) are tested against, and for tools such as
lint that ask about one rule; never run on a call's content in ``decide``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stockade.decision.rules.content import (
    BASH_TOOL,
    PATH_FIELDS,
    CallContent,
    content_matches,
)
from stockade.decision.rules.model import Effect, Rule
from stockade.decision.rules.paths import path_glob_pieces, rule_path
from stockade.decision.rules.patternset import ANY, DIRS, Piece, Spec
from stockade.decision.rules.shellwords import normalize_pattern_command
from stockade.decision.rules.syntax import parse_pattern, split_glob


def _fast(literal: str | None, regex: re.Pattern[str] | None, exact: bool) -> Callable[[str], Any]:
    """One bound C function that tests a string: equality, substring search or full match."""
    if literal is not None:
        return literal.__eq__ if exact else re.compile(re.escape(literal)).search
    assert regex is not None
    return regex.fullmatch


def _regex_of(pieces: Sequence[Piece]) -> str:
    """Python's regex for pieces (the per-rule reference matcher; see ``RuleTier``)."""
    return "".join(re.escape(p) if isinstance(p, str) else p.regex for p in pieces)


class TextMatcher:
    """Matches free text (commands, globs, URLs): wildcards anchor, bare text is substring/equal."""

    __slots__ = ("literal", "regex", "exact", "fn", "spec")

    def __init__(self, content: str, *, exact: bool) -> None:
        pieces = tuple(ANY if p is None else p for p in split_glob(content))
        self.exact = exact
        self.literal: str | None = None
        self.regex: re.Pattern[str] | None = None
        if all(isinstance(p, str) for p in pieces):
            self.literal = "".join(p for p in pieces if isinstance(p, str))
            self.spec = Spec((self.literal,), whole=exact)
        else:
            self.regex = re.compile(_regex_of(pieces), re.DOTALL)
            self.spec = Spec(pieces, whole=True)
        """The pattern for a ``PatternSet`` (the decision path's matcher)."""
        self.fn = _fast(self.literal, self.regex, exact)
        """The same test as one C-level call (truthy on a match), for one-by-one matching."""

    def __call__(self, text: str) -> bool:
        if self.literal is not None:
            return text == self.literal if self.exact else self.literal in text
        assert self.regex is not None
        return self.regex.fullmatch(text) is not None


class PathMatcher:
    """Matches normalised absolute paths with ``*`` (one segment) and ``**`` (any depth)."""

    __slots__ = ("literal", "regex", "exact", "fn", "spec")

    def __init__(self, content: str, *, exact: bool, cwd: str) -> None:
        self.exact = exact
        raw, anchored = rule_path(content, cwd, exact=exact)
        parts = split_glob(raw)
        self.literal: str | None = None
        self.regex: re.Pattern[str] | None = None
        if all(p is not None for p in parts):
            # A bare DENY/ASK content is a substring of the path; a bare ALLOW equals it.
            self.literal = "".join(p for p in parts if p is not None)
            self.spec = Spec((self.literal,), whole=exact)
            self.fn = _fast(self.literal, None, exact)
            return
        pieces = path_glob_pieces(raw)
        if not anchored and (not pieces or pieces[0] is not DIRS):
            pieces.insert(0, DIRS)  # matches those trailing components at any depth
        self.spec = Spec(tuple(pieces), whole=True)
        self.regex = re.compile(_regex_of(pieces), re.DOTALL)
        self.fn = _fast(None, self.regex, exact)

    def __call__(self, path: str) -> bool:
        if self.literal is not None:
            return path == self.literal if self.exact else self.literal in path
        assert self.regex is not None
        return self.regex.fullmatch(path) is not None


@dataclass(frozen=True, eq=False)
class CompiledRule:
    """A rule with its pattern parsed and its matchers built, ready to test calls."""

    rule: Rule
    tool: str | None
    content: str | None
    order: int
    """Position in evaluation order (lower is earlier)."""
    _text: TextMatcher | None = field(default=None, repr=False)
    _path: PathMatcher | None = field(default=None, repr=False)
    _command: TextMatcher | None = field(default=None, repr=False)

    @property
    def effect(self) -> Effect:
        """The rule's effect."""
        return self.rule.effect

    @property
    def text_matcher(self) -> TextMatcher:
        """The free-text matcher (only for rules with content)."""
        assert self._text is not None
        return self._text

    @property
    def path_matcher(self) -> PathMatcher:
        """The path matcher (only for rules with content)."""
        assert self._path is not None
        return self._path

    @property
    def command_matcher(self) -> TextMatcher:
        """The bash command matcher (only for rules with content)."""
        assert self._command is not None
        return self._command

    @property
    def is_literal(self) -> bool:
        """True when the rule has no content, or content without wildcards."""
        return self._command is None or self._command.literal is not None

    def matches(self, call: CallContent) -> bool:
        """DENY/ASK semantics: the tool matches and any content field matches (DEC-1/2)."""
        if self.tool is not None and self.tool != call.tool_name:
            return False
        if self.content is None:
            return True
        assert self._text is not None and self._path is not None and self._command is not None
        return content_matches(call, self._text.fn, self._path.fn, self._command.fn)

    def allows(self, call: CallContent) -> bool:
        """ALLOW semantics for non-bash content: the primary field matches exactly as written."""
        if self.tool is not None and self.tool != call.tool_name:
            return False
        if self.content is None:
            return True
        field_name = call.primary_field
        if field_name is None or field_name not in call.fields:
            return False
        assert self._text is not None and self._path is not None
        if field_name in PATH_FIELDS:
            return bool(self._path.fn(call.paths.get(field_name, "")))
        return bool(self._text.fn(call.fields[field_name]))

    def allows_command(self, text: str) -> bool:
        """ALLOW semantics for one bash sub-command (or the whole command)."""
        if self.content is None:
            return True
        assert self._command is not None
        return bool(self._command.fn(text))


def compile_rule(rule: Rule, order: int, *, cwd: str = "/") -> CompiledRule:
    """Parse and compile one rule; raise ``InvalidPattern`` if its pattern is bad."""
    parsed = parse_pattern(rule.pattern)
    if parsed.content is None:
        return CompiledRule(rule=rule, tool=parsed.tool, content=None, order=order)
    exact = rule.effect is Effect.ALLOW
    content = parsed.content
    command_content = content
    if parsed.tool in (None, BASH_TOOL):
        command_content = normalize_pattern_command(content, exact=exact)
    return CompiledRule(
        rule=rule,
        tool=parsed.tool,
        content=content,
        order=order,
        _text=TextMatcher(content, exact=exact),
        _path=PathMatcher(content, exact=exact, cwd=cwd),
        _command=TextMatcher(command_content, exact=exact),
    )
