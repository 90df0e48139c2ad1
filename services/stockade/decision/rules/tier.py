"""A tool's rules of one effect and which of them match a call, by pattern set (#18).

docs/decisions/0002-rule-matcher.md gives the design and the measurements.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from stockade.decision.rules.compiled import CompiledRule
from stockade.decision.rules.content import BASH_TOOL, PATH_FIELDS, CallContent
from stockade.decision.rules.model import Rule
from stockade.decision.rules.patternset import PatternSet

_T = TypeVar("_T")


class RuleTier:
    """A tool's rules of one effect, in order, and which of them match a call (#18).

    ``matching`` (DENY/ASK), ``allowing`` (non-bash ALLOW) and ``allowing_command`` (bash
    ALLOW, one sub-command) give exactly the rules whose ``CompiledRule.matches``,
    ``allows`` or ``allows_command`` is true, in order, with the same field-by-field logic
    (``content_matches``). But instead of trying each rule, each kind of content (free text,
    normalised path, bash sub-command) is looked up once in a ``PatternSet`` of all the
    tier's patterns: the cost does not grow with the number of rules and is linear in the
    call's content, whatever the patterns (PERF-1c). A set's ``screen`` (one C call) rules
    out most texts before its ``search`` (Python) runs, so a tool with a handful of rules
    costs what one combined-regex prefilter costs (the spread-out workload of PERF-1c).

    The sets are built here, once (a tier is made when a policy loads, or on the first
    call of a tool for session rules), and never change: threads may share a tier. All
    rules given must apply to the call's tool (``RuleIndex.tiers`` guarantees it).
    """

    __slots__ = ("rules", "_plain", "_bare", "_content", "_text", "_path", "_command")

    def __init__(self, rules: Sequence[CompiledRule]) -> None:
        self.rules = tuple(rules)
        self._plain = tuple(c.rule for c in self.rules)
        self._bare = tuple(i for i, c in enumerate(self.rules) if c.content is None)
        """Rules without content match every call of their tool."""
        content = [i for i, c in enumerate(self.rules) if c.content is not None]
        self._content = content
        self._text = PatternSet([self.rules[i].text_matcher.spec for i in content], content)
        self._path = PatternSet([self.rules[i].path_matcher.spec for i in content], content)
        self._command = self._text
        """Command patterns differ from text ones only for run_bash and ``*`` rules (their
        command names are normalised), so other tools share the text set."""
        if any(self.rules[i].tool in (None, BASH_TOOL) for i in content):
            specs = [self.rules[i].command_matcher.spec for i in content]
            self._command = PatternSet(specs, content)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    @property
    def pattern_sets(self) -> tuple[PatternSet, PatternSet, PatternSet]:
        """The text, path and command pattern sets (for tests and lint)."""
        return self._text, self._path, self._command

    def _ordered(self, hits: Iterable[int]) -> list[CompiledRule]:
        rules = self.rules
        return [rules[i] for i in sorted(set(hits))]

    def matching(self, call: CallContent) -> list[CompiledRule]:
        """The rules whose DENY/ASK ``matches`` holds for ``call``, in order."""
        return self._select(self.rules, call)

    def matching_rules(self, call: CallContent) -> list[Rule]:
        """``matching`` as the rules themselves (what ``decide`` records)."""
        return self._select(self._plain, call)

    def _select(self, pick: tuple[_T, ...], call: CallContent) -> list[_T]:
        """``pick[i]`` for each rule ``i`` that matches ``call`` (DENY/ASK semantics, as
        ``content_matches``), in order."""
        if not self._content:
            return list(pick)  # every rule is bare (or there are none)
        hits: list[int] = [*self._bare] if self._bare else []
        text = self._text
        screen = text.screen
        for name, value in call.fields.items():
            if screen is None or screen(value):
                hits += text.search(value)
            if name in PATH_FIELDS:
                norm = call.paths.get(name)
                if norm is not None:
                    path = self._path
                    if path.screen is None or path.screen(norm):
                        hits += path.search(norm)
            elif name == "command" and call.tool_name == BASH_TOOL:
                command = self._command
                c_screen = command.screen
                for sub in call.sub_commands:
                    if c_screen is None or c_screen(sub):
                        hits += command.search(sub)
        if not hits:
            return []
        if len(hits) == 1:
            return [pick[hits[0]]]
        return [pick[i] for i in sorted(set(hits))]

    def allowing(self, call: CallContent) -> list[CompiledRule]:
        """The rules whose non-bash ALLOW ``allows`` holds for ``call``, in order."""
        if not self._content:
            return list(self.rules)
        field_name = call.primary_field
        if field_name is None or field_name not in call.fields:
            return [self.rules[i] for i in self._bare]
        if field_name in PATH_FIELDS:
            found = self._path
            value = call.paths.get(field_name, "")
        else:
            found = self._text
            value = call.fields[field_name]
        screen = found.screen
        hits = found.search(value) if screen is None or screen(value) else ()
        if self._bare:
            return self._ordered([*self._bare, *hits])
        return self._ordered(hits) if hits else []

    def allowing_command(self, text: str) -> list[CompiledRule]:
        """The rules whose ``allows_command`` holds for ``text``, in order."""
        if not self._content:
            return list(self.rules)
        command = self._command
        screen = command.screen
        hits = command.search(text) if screen is None or screen(text) else ()
        if self._bare:
            return self._ordered([*self._bare, *hits])
        return self._ordered(hits) if hits else []
