"""Shadowed-rule detection (DEC-11): rules that can never take effect, with a reason and fix.

A rule never takes effect when an earlier-or-stronger rule already covers every call it
matches: an ALLOW or ASK under a DENY that covers it (DENY always wins), an ALLOW under a
covering ASK (an explicit ASK beats ALLOW), or an exact duplicate. Coverage is decided on
the pattern text: a broader rule covers a narrower one when its tool part includes the
other's and its content matches the other's content taken literally (``git *`` covers
``git status`` and ``git s*``). That is a sound test for the prefix/suffix/substring
patterns people write; it may miss exotic overlaps, never invents them.

Before shadowing, each pattern is checked for what can never match at all: another
agent's spelling (``Bash(rm *)``, ``Read(./x)``, ``Bash(git:*)``) with the Stockade
spelling suggested, a tool name no Stockade tool has (the closest declared name
suggested), regular-expression syntax in a glob (``git (status|log)``, ``.*``, ``^…$``,
``[a-z]+``) and unbalanced parentheses (an extra ``)``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import cache

from stockade.decision.rules import (
    Effect,
    Rule,
    compile_rule,
    parse_pattern,
    split_glob,
)
from stockade.errors import InvalidPattern


@dataclass(frozen=True)
class Finding:
    """A rule that can never take effect."""

    rule: Rule
    shadowed_by: Rule | None
    """The rule that takes its effect away (None when the pattern itself never matches)."""
    reason: str
    fix: str
    kind: str = "shadowed"
    """``shadowed``, ``duplicate``, ``foreign_spelling``, ``unknown_tool``, ``regex`` or
    ``unbalanced``."""


FOREIGN_TOOLS: dict[str, tuple[str, ...]] = {
    # Claude Code
    "Bash": ("run_bash",),
    "Read": ("read_file",),
    "Edit": ("file_edit", "file_write"),
    "MultiEdit": ("file_edit",),
    "Write": ("file_write",),
    "Grep": ("grep_files",),
    "Glob": ("glob_files",),
    "LS": ("glob_files",),
    "Task": ("subagent",),
    "TodoWrite": ("todo_write",),
    "WebFetch": (),
    "WebSearch": (),
    "NotebookEdit": (),
    # Codex, Gemini CLI and other lower-case spellings
    "bash": ("run_bash",),
    "shell": ("run_bash",),
    "run_shell_command": ("run_bash",),
    "exec": ("run_bash",),
    "read": ("read_file",),
    "write": ("file_write",),
    "write_file": ("file_write",),
    "edit": ("file_edit",),
    "replace": ("file_edit",),
    "grep": ("grep_files",),
    "glob": ("glob_files",),
    "web_fetch": (),
}
"""Other agents' tool names → the Stockade tools that do the same (empty: none does)."""


@cache
def declared_tools() -> frozenset[str]:
    """Every tool name Stockade itself declares: the seed's table in the contract package
    (built-in, executor and the example remote tools), which the agent's catalogue and the
    executor are built from."""
    from stockade.contract.tools import SEED_TOOLS

    return frozenset(SEED_TOOLS)


_PREFIX_COLON = re.compile(r"^(?P<prefix>.+?):\*$")
_PATH_TOOLS = frozenset({"read_file", "file_write", "file_edit", "glob_files", "grep_files"})
_ALTERNATION = re.compile(r"(?<!\$)\((?P<alts>[^()]*\|[^()]*)\)")
_REGEX_SIGNS: tuple[tuple[re.Pattern[str], str, bool], ...] = (
    # (sign, what it is, whether it is also a regex sign in a path glob)
    (_ALTERNATION, "'(a|b)' is regex alternation", True),
    (re.compile(r"\(\?[:=!]"), "'(?:' is a regex group", True),
    (re.compile(r"\[[^\]]+\][+*?{]"), "'[...]+' is a regex character class", True),
    (re.compile(r"\\[dwsDWS]"), "'\\d', '\\w' and '\\s' are regex classes", True),
    (re.compile(r"^\^"), "'^' anchors a regex", True),
    (re.compile(r"(?<![\\$])\$$"), "'$' anchors a regex", True),
    # `config.*` is a fine file glob; in a command `git.*` is regex for `git …`.
    (re.compile(r"\w\.\*"), "'.*' is regex for 'anything'", False),
    (re.compile(r"\.\+"), "'.+' is regex for 'anything'", True),
)


def _regex_fix(tool: str | None, content: str) -> str:
    """The glob rules that say what a regex-looking content most likely meant."""
    name = tool or "*"
    alt = _ALTERNATION.search(content)
    if alt is not None:
        head, tail = content[: alt.start()], content[alt.end() :]
        rules = [f"{name}({head}{a.strip()}{tail})" for a in alt.group("alts").split("|")]
        return "write one rule per alternative: " + ", ".join(rules)
    fixed = content
    if fixed.startswith("^"):
        fixed = fixed[1:]
    if fixed.endswith("$") and not fixed.endswith("\\$"):
        fixed = fixed[:-1]
    fixed = fixed.replace(".*", " *" if tool in (None, "run_bash") else "*").replace(".+", "*")
    fixed = re.sub(r"  +\*", " *", fixed)
    if fixed != content and not any(sign.search(fixed) for sign, _, _ in _REGEX_SIGNS):
        return f"write {name}({fixed}) (patterns match the whole content; '*' is 'anything')"
    return "write glob rules where only '*' is special (one rule per alternative)"


def _tool_findings(
    rule: Rule, tool: str, content: str | None, known: Collection[str]
) -> Finding | None:
    inner = f"({content})" if content is not None else ""
    if tool in FOREIGN_TOOLS and tool not in known:
        targets = FOREIGN_TOOLS[tool]
        if content is not None and _PREFIX_COLON.match(content) and targets == ("run_bash",):
            inner = f"({_PREFIX_COLON.sub(lambda m: m.group('prefix') + ' *', content)})"
        if not targets:
            return Finding(
                rule,
                None,
                f"{tool!r} is another agent's tool name; Stockade has no such tool, so the "
                "rule never matches",
                "delete it, or write the rule for the tool your tool provider declares",
                "foreign_spelling",
            )
        spelled = " and ".join(f"{t}{inner}" for t in targets)
        return Finding(
            rule,
            None,
            f"{tool!r} is another agent's spelling; no Stockade tool is called {tool!r}, so "
            "the rule never matches",
            f"write {spelled}",
            "foreign_spelling",
        )
    if tool not in known:
        close = difflib.get_close_matches(tool, sorted(known), n=1, cutoff=0.7)
        return Finding(
            rule,
            None,
            f"no declared tool is called {tool!r}, so the rule never matches"
            + ("" if close else " unless a tool provider or a configured tool declares it"),
            f"write {close[0]}{inner}"
            if close
            else "check the tool name (stockade lint knows "
            "the built-in, executor and example tools; declare others with --tool NAME)",
            "unknown_tool",
        )
    return None


def _content_findings(rule: Rule, tool: str | None, content: str) -> Finding | None:
    if content.count("(") != content.count(")"):
        more_closing = content.count(")") > content.count("(")
        extra = "')'" if more_closing else "'('"
        fix = (
            f"write {tool or '*'}({content[:-1]})"
            if more_closing and content.endswith(")")
            else "balance the parentheses"
        )
        return Finding(
            rule,
            None,
            f"unbalanced parentheses in {content!r} (an extra {extra}); the content is "
            "matched literally, so the rule never matches what was meant",
            fix,
            "unbalanced",
        )
    if tool in (None, "run_bash", "Bash") and _PREFIX_COLON.match(content):
        prefix = _PREFIX_COLON.match(content).group("prefix")  # type: ignore[union-attr]
        return Finding(
            rule,
            None,
            f"{content!r} is Claude Code's prefix syntax; here ':' is taken literally, so "
            "the rule never matches",
            f"write {tool or '*'}({prefix} *)",
            "foreign_spelling",
        )
    for sign, what, in_paths in _REGEX_SIGNS:
        if (in_paths or tool not in _PATH_TOOLS) and sign.search(content):
            return Finding(
                rule,
                None,
                f"{content!r} looks like a regular expression ({what}); patterns are globs "
                "where only '*' is special, so the rule matches those characters literally",
                _regex_fix(tool, content),
                "regex",
            )
    return None


def pattern_findings(rule: Rule, known: Collection[str]) -> Finding | None:
    """Why ``rule``'s pattern can never match what its author meant (None: it can)."""
    try:
        p = parse_pattern(rule.pattern)
    except InvalidPattern:
        return None
    if p.tool is not None:
        found = _tool_findings(rule, p.tool, p.content, known)
        if found is not None:
            return found
    if p.content is not None:
        return _content_findings(rule, p.tool, p.content)
    return None


_STRENGTH = {Effect.DENY: 3, Effect.ASK: 2, Effect.ALLOW: 1}


@dataclass(frozen=True)
class _Parsed:
    rule: Rule
    tool: str | None
    content: str | None
    literal: str | None
    """The content with wildcards taken literally."""
    match: Callable[[str], bool] | None
    """The compiled content matcher (DENY/ASK or ALLOW semantics per the rule's effect)."""


def _parse(rule: Rule) -> _Parsed | None:
    try:
        p = parse_pattern(rule.pattern)
        compiled = compile_rule(rule, 0)
    except InvalidPattern:
        return None
    literal = None
    if p.content is not None:
        literal = "".join("*" if part is None else part for part in split_glob(p.content))
    return _Parsed(rule, p.tool, p.content, literal, compiled._text)


def _covers(b: _Parsed, n: _Parsed) -> bool:
    if b.tool is not None and b.tool != n.tool:
        return False
    if b.content is None:
        return True
    if n.content is None or b.match is None or n.literal is None:
        return False
    return b.match(n.literal) or b.match(n.content)


def covers(broad: Rule, narrow: Rule) -> bool:
    """True when every call ``narrow`` matches is also matched by ``broad``."""
    b, n = _parse(broad), _parse(narrow)
    return b is not None and n is not None and _covers(b, n)


def lint_rules(
    rules: Sequence[Rule], *, known_tools: Collection[str] | None = None
) -> list[Finding]:
    """Report every rule that can never take effect, in rule order: patterns that never
    match (other agents' spellings, unknown tools, regex syntax, unbalanced
    parentheses), then duplicates and rules shadowed by a stronger one.

    ``known_tools`` extends the declared tools (tools a tool provider declares).
    Patterns are parsed once and only rules that can share a tool are compared, so a
    policy of a thousand rules lints in well under a second.
    """
    known = declared_tools() | frozenset(known_tools or ())
    dead = {i: f for i, r in enumerate(rules) if (f := pattern_findings(r, known)) is not None}
    parsed = [_parse(r) for r in rules]
    by_tool: dict[str | None, list[tuple[int, _Parsed]]] = {}
    for i, p in enumerate(parsed):
        if p is not None:
            by_tool.setdefault(p.tool, []).append((i, p))
    findings: list[Finding] = []
    for i, p in enumerate(parsed):
        if i in dead:
            findings.append(dead[i])
            continue
        if p is None:
            continue
        candidates = sorted(by_tool.get(p.tool, []) + (by_tool.get(None, []) if p.tool else []))
        finding = _shadow(i, p, candidates)
        if finding is not None:
            findings.append(finding)
    return findings


def _shadow(index: int, p: _Parsed, candidates: list[tuple[int, _Parsed]]) -> Finding | None:
    rule = p.rule
    for j, other in candidates:
        if j >= index:
            break
        o = other.rule
        if o.effect is rule.effect and o.pattern.strip() == rule.pattern.strip():
            return Finding(
                rule,
                o,
                f"duplicate of an earlier {o.effect.value} rule from {o.source.value}",
                f"delete the second {rule.pattern!r}",
                "duplicate",
            )
    # DENY beats everything and ASK beats ALLOW whatever their order (DEC-3).
    for j, other in candidates:
        o = other.rule
        if j == index or _STRENGTH[o.effect] <= _STRENGTH[rule.effect]:
            continue
        if _covers(other, p):
            verb = "denied" if o.effect is Effect.DENY else "asked for"
            return Finding(
                rule,
                o,
                f"every call {rule.pattern!r} matches is already {verb} by "
                f"{o.pattern!r} ({o.effect.value} wins over {rule.effect.value})",
                f"narrow {o.pattern!r} so it excludes these calls, or delete {rule.pattern!r}",
            )
    return None
