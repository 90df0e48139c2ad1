"""The audit service wiring: settings from the environment and the retention sweep (the
app runs the core's duty at an interval)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stockade.audit.app import every
from stockade.audit.core import AuditCore
from stockade.audit.model import QueryFilters
from stockade.audit.settings import AuditSettings
from stockade.audit.store.sqlite import AuditStore
from stockade.server.settings import SettingsError, load_settings

from .conftest import BASE_NS, EventFactory

DAY = 86_400 * 10**9


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STOCKADE_AUDIT_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("STOCKADE_AUDIT_RETENTION_DAYS", "30")
    monkeypatch.setenv("STOCKADE_AUDIT_SYNCHRONOUS", "FULL")
    settings = load_settings(AuditSettings)
    assert settings.retention_days == 30
    assert settings.synchronous == "FULL"
    assert settings.db_path == str(tmp_path / "audit.db")
    assert settings.listen == "127.0.0.1:50053"


@pytest.mark.parametrize(
    ("name", "value"),
    [("RETENTION_DAYS", "-1"), ("SYNCHRONOUS", "OFF"), ("RETENTION_INTERVAL_S", "0")],
)
def test_bad_settings_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(f"STOCKADE_AUDIT_{name}", value)
    with pytest.raises(SettingsError) as caught:
        load_settings(AuditSettings)
    assert name.lower() in str(caught.value).lower()


async def test_retention_loop_deletes_old_rows_and_keeps_running(
    db_path: Path, make_event: EventFactory
) -> None:
    now = [BASE_NS]
    store = await AuditStore.open(db_path, clock=lambda: now[0])
    try:
        await store.append([make_event(i) for i in range(5)])
        now[0] = BASE_NS + 3 * DAY
        await store.append([make_event(i) for i in range(5, 8)])
        core = AuditCore(store)
        sweeper = asyncio.create_task(every(0.01, lambda: core.apply_retention(2), "retention"))
        for _ in range(1000):
            rows, _ = await store.query(QueryFilters())
            if len(rows) == 3:
                break
            await asyncio.sleep(0.01)
        assert [row.event.event_id for row in rows] == ["s1-e7", "s1-e6", "s1-e5"]
        assert not sweeper.done()
        sweeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sweeper
        assert (await store.verify()).ok
    finally:
        await store.close()
