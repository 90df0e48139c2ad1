"""Compiled rules kept by tool name, so a decision only looks at rules that can apply to
its tool, with one ``RuleTier`` per tool and effect."""

from __future__ import annotations

from collections.abc import Iterable

from stockade.decision.rules.compiled import CompiledRule, compile_rule
from stockade.decision.rules.model import Effect, Rule
from stockade.decision.rules.tier import RuleTier


class RuleIndex:
    """Compiled rules kept by tool name, in evaluation order, split by effect."""

    def __init__(self, rules: Iterable[Rule], *, cwd: str = "/", start: int = 0) -> None:
        self.cwd = cwd
        self.compiled: tuple[CompiledRule, ...] = tuple(
            compile_rule(r, start + i, cwd=cwd) for i, r in enumerate(rules)
        )
        self._by_tool: dict[str, list[CompiledRule]] = {}
        self._any_tool: list[CompiledRule] = []
        for c in self.compiled:
            if c.tool is None:
                self._any_tool.append(c)
            else:
                self._by_tool.setdefault(c.tool, []).append(c)
        self._cache: dict[str, tuple[tuple[CompiledRule, ...], ...]] = {}
        self._tiers: dict[str, tuple[RuleTier, RuleTier, RuleTier]] = {}
        self._shared: dict[tuple[CompiledRule, ...], RuleTier] = {}

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The rules in evaluation order."""
        return tuple(c.rule for c in self.compiled)

    def for_tool(self, tool_name: str) -> tuple[tuple[CompiledRule, ...], ...]:
        """Rules that may apply to ``tool_name``, as (deny, ask, allow) tuples in order."""
        hit = self._cache.get(tool_name)
        if hit is not None:
            return hit
        merged = sorted(self._by_tool.get(tool_name, []) + self._any_tool, key=lambda c: c.order)
        result = tuple(tuple(c for c in merged if c.effect is e) for e in Effect)
        if len(self._cache) < 4096:  # tool names come from callers; bound the memo
            self._cache[tool_name] = result
        return result

    def tiers(self, tool_name: str) -> tuple[RuleTier, RuleTier, RuleTier]:
        """``for_tool`` as matchers per effect: (deny, ask, allow)."""
        hit = self._tiers.get(tool_name)
        if hit is not None:
            return hit
        deny, ask, allow = self.for_tool(tool_name)
        result = (self._tier(deny), self._tier(ask), self._tier(allow))
        if len(self._tiers) < 4096:  # tool names come from callers; bound the memo
            self._tiers[tool_name] = result
        return result

    def _tier(self, rules: tuple[CompiledRule, ...]) -> RuleTier:
        """The tier of ``rules``, shared by every tool with the same rules: all tools
        without rules of their own get the wildcard rules, so a stream of unknown tool
        names reuses one tier instead of building pattern sets per name."""
        hit = self._shared.get(rules)
        if hit is None:
            hit = RuleTier(rules)
            if len(self._shared) < 4096:
                self._shared[rules] = hit
        return hit

    def build(self) -> None:
        """Build every tier (and so its pattern sets) now: for each tool the rules name and
        for the tools they do not (the wildcard rules alone), so the first call of a tool
        after a policy load does not pay for compiling them and a pattern the matcher cannot
        take fails at load."""
        for tool in [*self._by_tool, "*"]:
            self.tiers(tool)

    def __len__(self) -> int:
        return len(self.compiled)
