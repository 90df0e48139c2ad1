"""Risk level and a one-sentence explanation for a bash analysis (SPEC DEC-10).

No model involved: the sentence is built from the finding that decided the verdict, so a
person approving an ASK reads what the command does in plain words, e.g.
"Runs `npm install`: may modify node_modules/ and download packages."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["Finding", "explain", "risk_of"]

Risk = Literal["low", "medium", "high"]

_ORDER: Final[dict[str, int]] = {"low": 0, "medium": 1, "high": 2}

# Commands longer than this are shortened in the sentence.
_MAX_SHOWN: Final = 60


# init=False and our own __init__: see BashAnalysis in analyzer.py (the generated one stays
# interpreted Python even when compiled; a finding is built per reason of every ASK).
@dataclass(frozen=True, slots=True, init=False)
class Finding:
    """One reason the command is not simply allowed."""

    verdict: Literal["ask", "deny"]
    """What this finding asks for."""
    reason: str
    """Plain words, written to follow "Runs `cmd`:" (e.g. "deletes files")."""
    risk: Risk
    """How much harm this finding stands for."""
    immune: bool
    """An ASK that allow rules and bypass mode must not settle."""
    command: str
    """The (shortened) simple command it concerns; "" for the whole line."""

    def __init__(
        self,
        verdict: Literal["ask", "deny"],
        reason: str,
        risk: Risk,
        immune: bool,
        command: str,
    ) -> None:
        object.__setattr__(self, "verdict", verdict)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "risk", risk)
        object.__setattr__(self, "immune", immune)
        object.__setattr__(self, "command", command)

    def labelled(self) -> str:
        """The reason prefixed with its command, for the reasons list."""
        return f"`{self.command}`: {self.reason}" if self.command else self.reason


def risk_of(verdict: str, findings: Sequence[Finding]) -> Risk:
    """DENY is HIGH; ALLOW is LOW; an ASK takes its most serious finding's risk."""
    if verdict == "deny":
        return "high"
    if verdict == "allow" or not findings:
        return "low"
    # max(asks, key=risk order): the first of the most serious (a plain loop: compiled,
    # max's key calls and the generator cost more than the comparison).
    top: Finding | None = None
    for finding in findings:
        if finding.verdict == "ask" and (top is None or _ORDER[finding.risk] > _ORDER[top.risk]):
            top = finding
    if top is None:
        raise ValueError("max() arg is an empty sequence")  # what max() raised
    return top.risk


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def explain(
    verdict: str, findings: Sequence[Finding], commands: Sequence[str], network: bool
) -> str:
    """One sentence: what runs and why it is allowed, asked about or refused.

    ``findings`` are ordered most decisive first.
    """
    if verdict == "allow":
        if not commands:
            return "Sets shell variables only; nothing is read or written."
        subject = _subject(commands)
        return f"Runs {subject}: read-only, and stays inside the allowed roots."
    top = findings[0] if findings else None
    reason = top.reason if top is not None else "not known to be safe"
    if top is not None and top.command:
        subject = f"`{_shown(top.command)}`"
        more = len(commands) - 1
        if more > 0:
            subject += f" (among {len(commands)} commands)"
    elif commands:
        subject = _subject(commands)
    else:
        return f"Refused: {reason}." if verdict == "deny" else f"Asks: {reason}."
    if verdict == "deny":
        return f"Refused {subject}: {reason}."
    extra = ""
    if network and "network" not in reason and "download" not in reason:
        extra = " and uses the network"
    return f"Runs {subject}: {reason}{extra}."


def _subject(commands: Sequence[str]) -> str:
    first = f"`{_shown(commands[0])}`"
    if len(commands) == 1:
        return first
    if len(commands) == 2:
        return f"{first} and `{_shown(commands[1])}`"
    return f"{first} and {len(commands) - 1} more commands"
