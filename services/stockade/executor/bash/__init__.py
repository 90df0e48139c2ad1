"""Bash command analysis on a real parser (SPEC EXE-6 … EXE-8, DEC-10).

A :class:`BashAnalyzer` (the executor opens one and closes it) or the one-shot
``analyze(command, sandbox=..., network_enabled=..., denied_read_globs=...)`` returns a
:class:`BashAnalysis`: the verdict (allow / ask / deny), reasons, every simple command
normalised for rule matching (DEC-2), paths read and written, network use, read-only flag,
risk level, a one-sentence explanation and whether an ASK is bypass-immune.
"""

from __future__ import annotations

from stockade.executor.bash.analyzer import BashAnalysis, BashAnalyzer, SimpleCommand, analyze

__all__ = ["BashAnalysis", "BashAnalyzer", "SimpleCommand", "analyze"]
