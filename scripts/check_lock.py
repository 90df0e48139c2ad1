"""Fail when pyproject.toml names a dependency that a lock file does not pin, or when the
image's build tools drift from the dev lock.

`make lint` runs this, so a dependency added to pyproject.toml without `make lock` is
caught before it lands (CI, `make venv` and the image install from the lock files).
requirements-build.lock (the image builder's hatchling, mypy and setuptools) must pin
each of them, and every package it shares with requirements-dev.lock at the same version:
the image's mypyc then compiles the analysis exactly as `make native` does in dev.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


# What the image builder installs from requirements-build.lock (deploy/docker/Dockerfile).
BUILD_TOOLS = ("hatchling", "mypy", "setuptools")


def _pins(lock: Path) -> dict[str, str]:
    """Normalised name -> pinned version."""
    pins = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if match:
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return pins


def _pinned(lock: Path) -> set[str]:
    return set(_pins(lock))


def _build_lock_problems(root: Path) -> list[str]:
    build, dev = root / "requirements-build.lock", root / "requirements-dev.lock"
    if not build.is_file():
        return ["requirements-build.lock is missing"]
    if not dev.is_file():
        return []  # reported with the other locks
    pins, dev_pins = _pins(build), _pins(dev)
    problems = []
    missing = [tool for tool in BUILD_TOOLS if tool not in pins]
    if missing:
        problems.append(f"requirements-build.lock does not pin {', '.join(missing)}")
    drift = sorted(
        f"{name} {version} (dev: {dev_pins[name]})"
        for name, version in pins.items()
        if name in dev_pins and dev_pins[name] != version
    )
    if drift:
        problems.append(
            f"requirements-build.lock differs from requirements-dev.lock: {', '.join(drift)}"
        )
    return problems


def main(root: Path = ROOT) -> int:
    """Compare pyproject.toml with requirements.lock, requirements-dev.lock and
    requirements-ha-demo.lock (what `make demo-ha` installs), and requirements-build.lock
    with the dev lock."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime = {_name(r) for r in project["dependencies"]}
    dev = runtime | {_name(r) for r in extras["dev"]}
    ha_demo = runtime | {_name(r) for r in extras["ha-demo"]}
    problems = []
    for lock, wanted in (
        ("requirements.lock", runtime),
        ("requirements-dev.lock", dev | ha_demo),
        ("requirements-ha-demo.lock", ha_demo),
    ):
        path = root / lock
        if not path.is_file():
            problems.append(f"{lock} is missing")
            continue
        missing = sorted(wanted - _pinned(path))
        if missing:
            problems.append(f"{lock} does not pin {', '.join(missing)}")
    problems += _build_lock_problems(root)
    for problem in problems:
        print(f"lock check: {problem}; run `make lock`", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
