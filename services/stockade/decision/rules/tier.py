"""A tool's rules of one effect and which of them match a call, by pattern set (#18).

docs/decisions/0002-rule-matcher.md gives the design and the measurements.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from stockade.decision.rules.compiled import CompiledRule
from stockade.decision.rules.content import BASH_TOOL, PATH_FIELDS, CallContent
from stockade.decision.rules.model import Rule
from stockade.decision.rules.patternset import PatternSet


class RuleTier:
    """A tool's rules of one effect, in order, and which of them match a call (#18).

    ``matching`` (DENY/ASK), ``allowing`` (non-bash ALLOW) and ``allowing_command`` (bash
    ALLOW, one sub-command) give exactly the rules whose ``CompiledRule.matches``,
    ``allows`` or ``allows_command`` is true, in order, with the same field-by-field logic
    (``content_matches``). But instead of trying each rule, each kind of content (free text,
    normalised path, bash sub-command) is looked up once in a ``PatternSet`` of all the
    tier's patterns: the cost does not grow with the number of rules and is linear in the
    call's content, whatever the patterns (PERF-1c). The sets are built on first use (a
    tier for a tool no call names costs nothing). All rules given must apply to the call's
    tool (``RuleIndex.tiers`` guarantees it).
    """

    __slots__ = ("rules", "_plain", "_bare", "_content", "_sets", "_lock")

    def __init__(self, rules: Sequence[CompiledRule]) -> None:
        self.rules = tuple(rules)
        self._plain = tuple(c.rule for c in self.rules)
        self._bare = tuple(i for i, c in enumerate(self.rules) if c.content is None)
        """Rules without content match every call of their tool."""
        self._content = [i for i, c in enumerate(self.rules) if c.content is not None]
        self._sets: list[PatternSet | None] = [None, None, None]
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def _set(self, kind: int) -> Callable[[str], Sequence[int]]:
        """``search`` of the pattern set of kind 0 (text), 1 (path) or 2 (command), built
        once; it answers positions in ``rules``."""
        hit = self._sets[kind]
        if hit is not None:
            return hit.search
        with self._lock:
            hit = self._sets[kind]
            if hit is None:
                rules = self.rules
                if kind == 0:
                    specs = [rules[i].text_matcher.spec for i in self._content]
                elif kind == 1:
                    specs = [rules[i].path_matcher.spec for i in self._content]
                else:
                    specs = [rules[i].command_matcher.spec for i in self._content]
                hit = self._sets[kind] = PatternSet(specs, self._content)
        return hit.search

    def build(self) -> None:
        """Build every pattern set now (so a bad pattern set fails at load, not mid-call)."""
        for kind in range(3):
            self._set(kind)

    def _ordered(self, hits: Iterable[int]) -> list[CompiledRule]:
        rules = self.rules
        return [rules[i] for i in sorted(set(hits))]

    def matching(self, call: CallContent) -> list[CompiledRule]:
        """The rules whose DENY/ASK ``matches`` holds for ``call``, in order."""
        rules = self.rules
        return [rules[i] for i in self._matching(call)]

    def matching_rules(self, call: CallContent) -> list[Rule]:
        """``matching`` as the rules themselves (what ``decide`` records)."""
        plain = self._plain
        return [plain[i] for i in self._matching(call)] if plain else []

    def _matching(self, call: CallContent) -> Sequence[int]:
        if not self._content:
            return range(len(self.rules))  # every rule is bare (or there are none)
        hits: list[int] = list(self._bare)
        text = self._set(0)
        for name, value in call.fields.items():
            hits += text(value)
            if name in PATH_FIELDS:
                norm = call.paths.get(name)
                if norm is not None:
                    hits += self._set(1)(norm)
            elif name == "command" and call.tool_name == BASH_TOOL:
                command = self._set(2)
                for sub in call.sub_commands:
                    hits += command(sub)
        if not hits:
            return hits
        return sorted(set(hits)) if len(hits) > 1 else hits

    def allowing(self, call: CallContent) -> list[CompiledRule]:
        """The rules whose non-bash ALLOW ``allows`` holds for ``call``, in order."""
        if not self._content:
            return list(self.rules)
        field_name = call.primary_field
        if field_name is None or field_name not in call.fields:
            return [self.rules[i] for i in self._bare]
        if field_name in PATH_FIELDS:
            hits = self._set(1)(call.paths.get(field_name, ""))
        else:
            hits = self._set(0)(call.fields[field_name])
        if self._bare:
            return self._ordered([*self._bare, *hits])
        return self._ordered(hits) if hits else []

    def allowing_command(self, text: str) -> list[CompiledRule]:
        """The rules whose ``allows_command`` holds for ``text``, in order."""
        if not self._content:
            return list(self.rules)
        hits = self._set(2)(text)
        if self._bare:
            return self._ordered([*self._bare, *hits])
        return self._ordered(hits) if hits else []
