"""Runtime limits of the ReAct loop (AGT-6): the seed's termination matrix.

Each limit is a small object with one job, so the loop reads as a list of checks:

* ``StepLimiter``: max steps (default 8), then exactly one forced final answer without
  tools, with a reminder message; then the turn ends with MAX_STEPS.
* ``DuplicateDetector``: the 3rd consecutive identical (tool, args) call gets an error
  result instead of running.
* ``TokenBudget``: context size against a soft limit (32,000 → nudge to conclude) and a
  hard limit (40,000 → compact, or end with TOKEN_BUDGET).
* ``DiminishingReturns``: steps whose tool results add nothing new → end with a direct
  answer.
* ``CompactionCircuitBreaker``: repeated compaction failures → stop compacting.
* ``Budget``: steps and tokens shared by the whole agent tree; a child spends from its
  parent's budget and can never hold more than the parent has left.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from stockade.errors import ResourceExhausted


class Termination(Enum):
    """Why a turn ended; values are the ``TerminationReason`` names without prefix."""

    COMPLETED = "COMPLETED"
    MAX_STEPS = "MAX_STEPS"
    TOKEN_BUDGET = "TOKEN_BUDGET"
    DIMINISHING_RETURNS = "DIMINISHING_RETURNS"
    CANCELLED = "CANCELLED"
    DENIAL_HALT = "DENIAL_HALT"
    COMPACTION_FAILED = "COMPACTION_FAILED"
    ERROR = "ERROR"


@dataclass(frozen=True)
class LimitSettings:
    """The loop's limits; every field has the seed's default."""

    max_steps: int = 8
    """Model steps with tools before the forced final answer."""
    duplicate_threshold: int = 3
    """Consecutive identical calls at which the call is refused."""
    token_soft_limit: int = 32_000
    """Context tokens at which the model is nudged to conclude."""
    token_hard_limit: int = 40_000
    """Context tokens at which the loop compacts or ends."""
    diminishing_steps: int = 3
    """Consecutive steps without new information that end the turn."""
    compaction_max_failures: int = 3
    """Consecutive compaction failures that open the circuit breaker."""
    max_subagent_depth: int = 2
    """How deep subagents may nest (the lead is depth 0)."""
    tree_max_steps: int = 32
    """Model steps the whole agent tree may spend in one turn."""
    tree_max_tokens: int = 400_000
    """Tokens (prompt + completion) the whole agent tree may spend in one turn."""


FORCED_ANSWER_REMINDER = (
    "You have reached the maximum number of steps. Do not call any more tools: give your "
    "final answer now, based on the information you have gathered."
)
SOFT_LIMIT_NUDGE = (
    "The conversation is getting long. Conclude soon: summarise what you have found and "
    "give your answer instead of gathering more."
)
DIMINISHING_REMINDER = (
    "Your recent steps added no new information. Answer directly, based on the information "
    "you have gathered."
)


class StepPlan(Enum):
    """What the loop may do in the step it is about to run."""

    NORMAL = "normal"
    """A normal step with tools."""
    FORCED_FINAL = "forced_final"
    """One last step without tools, after the reminder."""
    STOP = "stop"
    """No more steps: end with MAX_STEPS."""


class StepLimiter:
    """Counts steps; after ``max_steps`` allows exactly one forced final answer."""

    def __init__(self, max_steps: int) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.max_steps = max_steps
        self.step = 0
        self._forced = False

    def next_step(self, budget: Budget | None = None) -> StepPlan:
        """Plan the next step; spends one step from ``budget`` when it runs."""
        if self._forced:
            return StepPlan.STOP
        if self.step >= self.max_steps or (budget is not None and not budget.try_spend_step()):
            self._forced = True
            self.step += 1
            return StepPlan.FORCED_FINAL
        self.step += 1
        return StepPlan.NORMAL


def call_key(tool: str, arguments: Mapping[str, Any]) -> str:
    """A stable identity of a call: tool plus canonical JSON arguments."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return f"{tool}:{hashlib.sha256(canonical.encode()).hexdigest()}"


class DuplicateDetector:
    """Refuses the ``threshold``-th consecutive identical call (the seed's dead-loop guard)."""

    def __init__(self, threshold: int = 3) -> None:
        self.threshold = threshold
        self._last = ""
        self._count = 0

    def observe(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Record a call; True when it must get an error result instead of running."""
        key = call_key(tool, arguments)
        if key == self._last:
            self._count += 1
        else:
            self._last, self._count = key, 1
        return self._count >= self.threshold

    @staticmethod
    def message(tool: str) -> str:
        """The error result the model sees for a refused duplicate."""
        return (
            f"Error: {tool} was called with identical arguments several times in a row; "
            "the call was not run. Use the previous result or try something different."
        )


class TokenState(Enum):
    """Where the context size stands against the limits."""

    OK = "ok"
    SOFT = "soft"
    HARD = "hard"


class TokenBudget:
    """Context size against the soft and hard limits."""

    def __init__(self, soft_limit: int = 32_000, hard_limit: int = 40_000) -> None:
        if not 0 < soft_limit <= hard_limit:
            raise ValueError("need 0 < soft_limit <= hard_limit")
        self.soft_limit = soft_limit
        self.hard_limit = hard_limit
        self._nudged = False

    def state(self, context_tokens: int) -> TokenState:
        """Classify a context size."""
        if context_tokens >= self.hard_limit:
            return TokenState.HARD
        if context_tokens >= self.soft_limit:
            return TokenState.SOFT
        return TokenState.OK

    def nudge(self, context_tokens: int) -> str | None:
        """The nudge to inject once when the soft limit is first crossed, else None."""
        if self.state(context_tokens) is TokenState.OK:
            self._nudged = False  # compaction brought us back: nudge again next time
            return None
        if self._nudged:
            return None
        self._nudged = True
        return SOFT_LIMIT_NUDGE


class DiminishingReturns:
    """Ends the loop after ``threshold`` consecutive steps without new information.

    A step adds information when one of its results (or its text) was not seen before in
    this loop; errors, duplicates and empty results add nothing.
    """

    def __init__(self, threshold: int = 3) -> None:
        self.threshold = threshold
        self._seen: set[str] = set()
        self._stale = 0

    def observe(self, results: Iterable[str], *, errors: Iterable[bool] = ()) -> bool:
        """Record one step's results; True when the loop should end."""
        flags = list(errors)
        new = False
        for index, content in enumerate(results):
            failed = flags[index] if index < len(flags) else False
            normalised = " ".join(content.split())
            if failed or not normalised:
                continue
            digest = hashlib.sha256(normalised.encode()).hexdigest()
            if digest not in self._seen:
                self._seen.add(digest)
                new = True
        self._stale = 0 if new else self._stale + 1
        return self._stale >= self.threshold


class CompactionCircuitBreaker:
    """Opens after ``max_failures`` consecutive compaction failures; a success closes it."""

    def __init__(self, max_failures: int = 3) -> None:
        self.max_failures = max_failures
        self.failures = 0

    @property
    def open(self) -> bool:
        """True when compaction must not be tried again."""
        return self.failures >= self.max_failures

    def record_success(self) -> None:
        """A compaction worked."""
        self.failures = 0

    def record_failure(self) -> None:
        """A compaction failed."""
        self.failures += 1


class Budget:
    """Steps and tokens shared by an agent tree; a child spends from its parent.

    A child's own caps are clamped to what its parent has left, and every spend is charged
    to the child and to each ancestor, so no subtree can outspend the tree.
    """

    def __init__(
        self, *, max_steps: int, max_tokens: int, parent: Budget | None = None, name: str = "lead"
    ) -> None:
        if max_steps < 0 or max_tokens < 0:
            raise ValueError("budgets cannot be negative")
        self.name = name
        self.parent = parent
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.steps_used = 0
        self.tokens_used = 0

    def _chain(self) -> list[Budget]:
        chain: list[Budget] = []
        node: Budget | None = self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain

    @property
    def remaining_steps(self) -> int:
        """Steps left here, given every ancestor's remainder."""
        return min(b.max_steps - b.steps_used for b in self._chain())

    @property
    def remaining_tokens(self) -> int:
        """Tokens left here, given every ancestor's remainder."""
        return min(b.max_tokens - b.tokens_used for b in self._chain())

    @property
    def exhausted(self) -> bool:
        """True when no step or no token is left."""
        return self.remaining_steps <= 0 or self.remaining_tokens <= 0

    def try_spend_step(self) -> bool:
        """Spend one step along the chain; False (and nothing spent) when none is left."""
        if self.remaining_steps <= 0 or self.remaining_tokens <= 0:
            return False
        for node in self._chain():
            node.steps_used += 1
        return True

    def spend_tokens(self, tokens: int) -> None:
        """Charge model tokens along the chain (usage is a fact: it is always recorded)."""
        for node in self._chain():
            node.tokens_used += max(0, tokens)

    def child(
        self, name: str, *, max_steps: int | None = None, max_tokens: int | None = None
    ) -> Budget:
        """A sub-budget for a subagent; refused when the parent has nothing left.

        Asking for more than the parent has left is not an error: the child simply gets
        what is left (its rights only narrow).
        """
        steps, tokens = self.remaining_steps, self.remaining_tokens
        if steps <= 0 or tokens <= 0:
            raise ResourceExhausted(
                f"no budget left for subagent {name!r} ({steps} steps, {tokens} tokens)",
                agent=name,
            )
        return Budget(
            max_steps=min(steps, max_steps if max_steps is not None else steps),
            max_tokens=min(tokens, max_tokens if max_tokens is not None else tokens),
            parent=self,
            name=name,
        )
