"""The lock files pin every dependency pyproject.toml names (`make lint` checks it),
with hashes, and without this machine's index settings."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _check_lock() -> object:
    spec = importlib.util.spec_from_file_location("check_lock", ROOT / "scripts" / "check_lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_locks_are_complete() -> None:
    assert _check_lock().main(ROOT) == 0  # type: ignore[attr-defined]


LOCKS = [
    "requirements.lock",
    "requirements-dev.lock",
    "requirements-ha-demo.lock",
    "requirements-build.lock",
]


@pytest.mark.parametrize("lock", LOCKS)
def test_every_pin_has_hashes_and_no_local_index(lock: str) -> None:
    text = (ROOT / lock).read_text()
    pins = re.findall(r"^([A-Za-z0-9][\w.-]*)==(\S+) \\$", text, flags=re.M)
    assert pins
    for name, _ in pins:
        block = text.split(f"\n{name}==", 1)[1].split("\n    # via", 1)[0]
        assert "--hash=sha256:" in block, name
    assert "--index-url" not in text and "--find-links" not in text and "/opt/" not in text


def test_a_dependency_missing_from_the_lock_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in LOCKS:
        shutil.copy(ROOT / name, tmp_path / name)
    pyproject = (ROOT / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(
        pyproject.replace(
            "dependencies = [\n", 'dependencies = [\n  "leftpad-nonexistent>=1",\n', 1
        )
    )
    assert _check_lock().main(tmp_path) == 1  # type: ignore[attr-defined]
    err = capsys.readouterr().err
    assert "requirements.lock does not pin leftpad-nonexistent" in err and "make lock" in err


def test_the_ha_demo_lock_must_pin_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make demo-ha` installs requirements-ha-demo.lock: without pgserver in it, the
    replicated demo could not start its database."""
    for name in LOCKS:
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    lock = tmp_path / "requirements-ha-demo.lock"
    text = lock.read_text()
    stripped = re.sub(r"^pgserver==.*?(?=^[A-Za-z])", "", text, count=1, flags=re.M | re.S)
    assert stripped != text
    lock.write_text(stripped)
    assert _check_lock().main(tmp_path) == 1  # type: ignore[attr-defined]
    assert "requirements-ha-demo.lock does not pin pgserver" in capsys.readouterr().err


def _copy_locks(tmp_path: Path) -> None:
    for name in LOCKS:
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")


def test_the_build_lock_pins_the_image_builders_tools_at_the_dev_versions() -> None:
    """The image's mypyc must be the dev venv's (`make native`), hatchling too."""
    module = _check_lock()
    build = module._pins(ROOT / "requirements-build.lock")  # type: ignore[attr-defined]
    dev = module._pins(ROOT / "requirements-dev.lock")  # type: ignore[attr-defined]
    for tool in ("mypy", "setuptools", "hatchling"):
        assert build[tool] == dev[tool], tool
    text = (ROOT / "requirements-build.lock").read_text()
    assert "requirements-build.in" in text  # resolved by `make lock` from its input file


@pytest.mark.parametrize(
    ("lock", "package"),
    [
        ("requirements-build.lock", "mypy"),
        ("requirements-dev.lock", "mypy"),
        ("requirements-build.lock", "librt"),
    ],
)
def test_a_build_tool_drifting_from_the_dev_lock_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lock: str, package: str
) -> None:
    _copy_locks(tmp_path)
    path = tmp_path / lock
    text = path.read_text()
    changed = re.sub(rf"^{package}==\S+ ", f"{package}==0.0.1 ", text, count=1, flags=re.M)
    assert changed != text
    path.write_text(changed)
    assert _check_lock().main(tmp_path) == 1  # type: ignore[attr-defined]
    err = capsys.readouterr().err
    assert "requirements-build.lock differs from requirements-dev.lock" in err
    assert f"{package} " in err and "0.0.1" in err


def test_a_build_lock_without_mypy_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _copy_locks(tmp_path)
    lock = tmp_path / "requirements-build.lock"
    text = lock.read_text()
    stripped = re.sub(r"^mypy==.*?(?=^[A-Za-z])", "", text, count=1, flags=re.M | re.S)
    assert stripped != text
    lock.write_text(stripped)
    assert _check_lock().main(tmp_path) == 1  # type: ignore[attr-defined]
    assert "requirements-build.lock does not pin mypy" in capsys.readouterr().err
    (tmp_path / "requirements-build.lock").unlink()
    assert _check_lock().main(tmp_path) == 1  # type: ignore[attr-defined]
    assert "requirements-build.lock is missing" in capsys.readouterr().err
