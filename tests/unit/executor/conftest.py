"""Fixtures shared by the executor's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from stockade.executor.bash import BashAnalyzer
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


@pytest.fixture(scope="module")
def analyzer() -> Iterator[BashAnalyzer]:
    """A bash analyzer with its long-lived child parser, as the executor opens it (one per
    test module: property tests feed it non-ASCII text many times)."""
    with BashAnalyzer() as analyzer:
        yield analyzer
