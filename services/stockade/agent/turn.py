"""The state of one running turn, shared by its loops and built-in tools."""

from __future__ import annotations

from dataclasses import dataclass

from stockade.agent.builtin_hooks import CancelToken
from stockade.agent.events import Emit
from stockade.agent.limits import Termination
from stockade.llm.base import Provider

__all__ = ["LoopResult", "TurnCancelled", "TurnState"]


class TurnCancelled(Exception):
    """The user cancelled the turn while the model was answering."""


@dataclass
class LoopResult:
    """How one agent loop (lead or subagent) ended."""

    reason: Termination
    """Why."""
    detail: str
    """Details for the stream and the audit row."""
    answer: str = ""
    """The final answer, if any."""
    steps: int = 0
    """Steps run."""


@dataclass
class TurnState:
    """State shared by the loops of one turn (the lead and its subagents)."""

    session_id: str
    """The turn's session."""
    provider: Provider
    """The model."""
    emit: Emit
    """Puts an event on the turn's stream."""
    cancel: CancelToken
    """Set when the user cancels the turn."""
    tokens_used: int = 0
    """Tokens the model used in this turn so far (all agents)."""
