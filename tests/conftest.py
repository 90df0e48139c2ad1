"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stockade.stack import LocalStack

# Tests never export telemetry anywhere; a test that needs spans installs its own exporter.
os.environ.setdefault("OTEL_SDK_DISABLED", "true")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace folder with a small text file and a secret."""
    ws = tmp_path / "workspace"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "hello.txt").write_text("hello from the workspace\nsecond line\n")
    (ws / ".env").write_text("SECRET=do-not-read\n")
    return ws


@pytest.fixture
async def stack_factory(tmp_path: Path) -> AsyncIterator[type[LocalStack]]:
    """Build LocalStacks under tmp_path; every stack made is closed after the test."""
    made: list[LocalStack] = []

    class _Factory(LocalStack):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield _Factory
    for stack in made:
        await stack.close()
