"""Kernel-level confinement of bash commands (SPEC EXE-9, PERF-4/5).

Public API: :class:`Launcher` (one per executor) runs commands under a
:class:`ConfinementPolicy` and returns a :class:`RunOutcome` listing the
:class:`Layer` objects applied; :func:`probe_layers` reports what this host allows.
"""

from __future__ import annotations

from stockade.executor.confine.client import ConfinementFailed, Launcher, probe_layers
from stockade.executor.confine.policy import (
    LAYER_NAMES,
    ConfinementPolicy,
    Layer,
    Rlimits,
    RunOutcome,
)

__all__ = [
    "LAYER_NAMES",
    "ConfinementFailed",
    "ConfinementPolicy",
    "Launcher",
    "Layer",
    "Rlimits",
    "RunOutcome",
    "probe_layers",
]
