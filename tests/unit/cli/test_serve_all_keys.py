"""`stockade serve all` gives the executor the public half of the decision service's
grant key: the generated pair, or the configured private key's (derived, never guessed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from stockade.cli.serve import _all_apps
from stockade.decision.grants import generate_keypair, load_private_key, load_public_key


def _public_raw(key: object) -> bytes:
    return key.public_bytes(  # type: ignore[attr-defined, no-any-return]
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("DECISION", "EXECUTOR", "AUDIT", "AGENT"):
        monkeypatch.setenv(f"STOCKADE_{name}_STATE_DIR", str(tmp_path / name.lower()))
    monkeypatch.setenv("STOCKADE_EXECUTOR_WORKSPACE", str(tmp_path))
    return tmp_path


def _executor_key(apps: list[object]) -> Path:
    executor = next(a for a in apps if getattr(a, "name", "") == "executor")
    path = executor.settings.grant_public_key_file  # type: ignore[attr-defined]
    assert path is not None
    return Path(path)


def test_the_generated_pair_is_wired(env: Path) -> None:
    public = _executor_key(_all_apps())  # type: ignore[arg-type]
    private = load_private_key(env / "decision" / "grant_signing_key.pem")
    assert _public_raw(load_public_key(public)) == _public_raw(private.public_key())


def test_a_configured_private_key_gives_its_public_half(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    priv, _ = generate_keypair(env / "own")
    monkeypatch.setenv("STOCKADE_DECISION_GRANT_PRIVATE_KEY_FILE", str(priv))
    public = _executor_key(_all_apps())  # type: ignore[arg-type]
    assert _public_raw(load_public_key(public)) == _public_raw(load_private_key(priv).public_key())
    # Not the state folder's generated pair.
    assert not (env / "decision" / "grant_signing_key.pem").exists()
