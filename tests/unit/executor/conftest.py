"""Fixtures shared by the executor's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from stockade.executor.confine import Launcher


@pytest.fixture
async def launcher() -> AsyncIterator[Launcher]:
    """A started launcher with its pre-forked, pre-confined workers (closed afterwards)."""
    launcher = Launcher()
    await launcher.start()
    try:
        yield launcher
    finally:
        await launcher.close()
