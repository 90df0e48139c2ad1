"""Permission rules (DEC-1/2): the pattern syntax, its compilation, and an index by tool name.

A pattern is ``*``, ``tool``, ``tool(content)`` or ``*(content)``. Content is matched
against the call's content fields: a DENY or ASK rule matches if any of ``command``,
``file_path``, ``path``, ``pattern``, ``url`` matches; an ALLOW rule matches only on the
tool's primary content field, and a bare (wildcard-free) ALLOW content must equal the
whole content. ``*`` in content is a wildcard (``prefix*``, ``*suffix``, ``*mid*``);
``\\*`` is a literal star. For path fields, both the call's path and the pattern are
normalised, ``*`` stays within one directory, ``**`` crosses directories and a pattern
without a slash matches the file's base name at any depth.

One concern per module:

- ``model``: ``Effect``, ``Source``, ``Rule`` (what a configured rule is);
- ``syntax``: parsing and validating a pattern, splitting content on its wildcards;
- ``shellwords``: shell words, quote removal, command names looked through wrappers (the
  wrapper table is ``stockade.contract.shell``'s, shared with the executor);
- ``paths``: call paths and rule paths normalised alike, path globs;
- ``content``: a call's matchable content (``call_content``), its bounds, and the DENY/ASK
  field-by-field semantics;
- ``compiled``: one rule's matchers and the one-by-one reference semantics;
- ``patternset``: many patterns against one string (exact dict, small regex, or an
  Aho–Corasick automaton with linear confirmation);
- ``tier``: a tool's rules of one effect and which of them match (``RuleTier``);
- ``index``: compiled rules kept by tool name (``RuleIndex``).

Each tool's rules of one effect form a ``RuleTier`` that says which of them match a call
with one pattern-set look-up per content string: the cost does not grow with the number of
rules and is linear in the input whatever the patterns (#18;
docs/decisions/0002-rule-matcher.md). This package re-exports the names other packages use.
"""

from stockade.decision.rules.compiled import CompiledRule, PathMatcher, TextMatcher, compile_rule
from stockade.decision.rules.content import (
    BASH_TOOL,
    CONTENT_FIELDS,
    MAX_CONTENT_CHARS,
    MAX_SUB_COMMAND_CHARS,
    PATH_FIELDS,
    CallContent,
    call_content,
    content_matches,
)
from stockade.decision.rules.index import RuleIndex
from stockade.decision.rules.model import POLICY_SOURCES, Effect, Rule, Source
from stockade.decision.rules.paths import normalize_path, rule_path
from stockade.decision.rules.shellwords import crude_split, normalize_both, normalize_command
from stockade.decision.rules.syntax import ParsedPattern, escape_content, parse_pattern, split_glob
from stockade.decision.rules.tier import RuleTier

__all__ = [
    "BASH_TOOL",
    "CONTENT_FIELDS",
    "MAX_CONTENT_CHARS",
    "MAX_SUB_COMMAND_CHARS",
    "PATH_FIELDS",
    "POLICY_SOURCES",
    "CallContent",
    "CompiledRule",
    "Effect",
    "ParsedPattern",
    "PathMatcher",
    "Rule",
    "RuleIndex",
    "RuleTier",
    "Source",
    "TextMatcher",
    "call_content",
    "compile_rule",
    "content_matches",
    "crude_split",
    "escape_content",
    "normalize_both",
    "normalize_command",
    "normalize_path",
    "parse_pattern",
    "rule_path",
    "split_glob",
]
