"""The agent's core, loop and pipeline run without gRPC (#13): importing them, and the
clients' typed errors they read, loads no ``grpc`` module at all. import-linter checks
the static imports in ``make lint``; this checks what actually gets loaded, in a fresh
interpreter (a lazy or dynamic import would show here)."""

from __future__ import annotations

import subprocess
import sys

MODULES = [
    "stockade.agent.core",
    "stockade.agent.loop",
    "stockade.agent.pipeline",
    "stockade.agent.ports",
    "stockade.agent.lifecycle",
    "stockade.client.errors",
]


def test_importing_the_core_loads_no_grpc() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_the_composition_root_does_load_grpc() -> None:
    """The check above can fail: the app (which plugs in the gRPC clients) loads it."""
    code = "import sys, stockade.agent.app\nprint('grpc' in sys.modules)\n"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "True"
