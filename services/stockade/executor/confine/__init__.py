"""Kernel-level confinement of bash commands (SPEC EXE-9, PERF-4/5).

Public API: :class:`Launcher` (one per executor) runs commands under a
:class:`ConfinementPolicy` and returns a :class:`RunOutcome` listing the
:class:`Layer` objects applied; :func:`probe_layers` reports what this host allows.

The client part (asyncio) is imported lazily: the launcher process imports this package
too, and every module it loads makes each forked worker larger and slower to fork.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stockade.executor.confine.policy import (
    LAYER_NAMES,
    ConfinementPolicy,
    Layer,
    Rlimits,
    RunOutcome,
)

if TYPE_CHECKING:
    from stockade.executor.confine.client import ConfinementFailed, Launcher, probe_layers

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

_LAZY = frozenset({"ConfinementFailed", "Launcher", "probe_layers"})


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from stockade.executor.confine import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
