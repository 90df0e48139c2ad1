"""The termination matrix's building blocks (AGT-6) and the shared tree budget."""

from __future__ import annotations

import pytest

from stockade.agent.limits import (
    SOFT_LIMIT_NUDGE,
    Budget,
    CompactionCircuitBreaker,
    DiminishingReturns,
    DuplicateDetector,
    LimitSettings,
    StepLimiter,
    StepPlan,
    TokenBudget,
    TokenState,
    call_key,
)
from stockade.errors import ResourceExhausted


def test_defaults_match_the_seed() -> None:
    settings = LimitSettings()
    assert settings.max_steps == 8
    assert settings.duplicate_threshold == 3
    assert (settings.token_soft_limit, settings.token_hard_limit) == (32_000, 40_000)


def test_max_steps_then_exactly_one_forced_answer_then_stop() -> None:
    limiter = StepLimiter(8)
    plans = [limiter.next_step() for _ in range(11)]
    assert plans[:8] == [StepPlan.NORMAL] * 8
    assert plans[8] is StepPlan.FORCED_FINAL
    assert plans[9:] == [StepPlan.STOP, StepPlan.STOP]


def test_exhausted_shared_budget_forces_the_final_answer_early() -> None:
    budget = Budget(max_steps=2, max_tokens=1000)
    limiter = StepLimiter(8)
    assert [limiter.next_step(budget) for _ in range(4)] == [
        StepPlan.NORMAL,
        StepPlan.NORMAL,
        StepPlan.FORCED_FINAL,
        StepPlan.STOP,
    ]
    assert budget.steps_used == 2
    with pytest.raises(ValueError):
        StepLimiter(0)


def test_third_consecutive_identical_call_is_refused() -> None:
    detector = DuplicateDetector(3)
    args = {"file_path": "a.txt"}
    assert not detector.observe("read_file", args)
    assert not detector.observe("read_file", args)
    # Different args reset the streak.
    assert not detector.observe("read_file", {"file_path": "b.txt"})
    assert not detector.observe("read_file", args)
    assert not detector.observe("read_file", args)
    assert detector.observe("read_file", args)
    assert detector.observe("read_file", args)  # stays refused while it repeats
    assert not detector.observe("grep_files", args)
    assert "identical arguments" in DuplicateDetector.message("read_file")


def test_call_key_ignores_key_order_but_not_values() -> None:
    assert call_key("t", {"a": 1, "b": 2}) == call_key("t", {"b": 2, "a": 1})
    assert call_key("t", {"a": 1}) != call_key("t", {"a": "1"})
    assert call_key("t", {"a": 1}) != call_key("u", {"a": 1})


def test_token_budget_states_and_single_nudge() -> None:
    budget = TokenBudget(32_000, 40_000)
    assert budget.state(31_999) is TokenState.OK
    assert budget.state(32_000) is TokenState.SOFT
    assert budget.state(40_000) is TokenState.HARD
    assert budget.nudge(10) is None
    assert budget.nudge(33_000) == SOFT_LIMIT_NUDGE
    assert budget.nudge(34_000) is None  # once per crossing
    assert budget.nudge(100) is None  # back below after compaction
    assert budget.nudge(33_000) == SOFT_LIMIT_NUDGE
    with pytest.raises(ValueError):
        TokenBudget(10, 5)


def test_diminishing_returns() -> None:
    detector = DiminishingReturns(3)
    assert not detector.observe(["paper A"])
    assert not detector.observe(["paper  A"])  # whitespace-only change is not news
    assert not detector.observe(["", "error: x"], errors=[False, True])
    assert detector.observe(["paper A"])
    fresh = DiminishingReturns(2)
    assert not fresh.observe(["a"])
    assert not fresh.observe(["a"])
    assert not fresh.observe(["b"])  # new information resets the streak
    assert not fresh.observe(["b"])
    assert fresh.observe(["a", "b"])


def test_compaction_circuit_breaker() -> None:
    breaker = CompactionCircuitBreaker(2)
    breaker.record_failure()
    assert not breaker.open
    breaker.record_success()
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.open


def test_child_spends_from_parent_and_cannot_exceed_it() -> None:
    root = Budget(max_steps=5, max_tokens=1000)
    assert root.try_spend_step()
    child = root.child("sub-1", max_steps=100, max_tokens=5000)
    assert (child.max_steps, child.max_tokens) == (4, 1000)  # clamped to what is left
    grandchild = child.child("sub-2", max_steps=2)
    assert grandchild.try_spend_step() and grandchild.try_spend_step()
    assert not grandchild.try_spend_step()  # its own cap
    assert root.steps_used == 3 and child.steps_used == 2
    grandchild.spend_tokens(900)
    assert root.remaining_tokens == 100 and child.remaining_tokens == 100
    assert child.try_spend_step()
    child.spend_tokens(200)
    assert child.exhausted and root.exhausted
    assert not child.try_spend_step()
    with pytest.raises(ResourceExhausted, match="no budget left"):
        root.child("sub-3")


def test_sibling_subagents_share_the_parent_budget() -> None:
    root = Budget(max_steps=3, max_tokens=10**6)
    first = root.child("a")
    second = root.child("b")
    assert first.try_spend_step() and first.try_spend_step()
    assert second.try_spend_step()
    assert not second.try_spend_step() and not first.try_spend_step()
    assert root.remaining_steps == 0
