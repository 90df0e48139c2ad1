"""Fail when pyproject.toml names a dependency that a lock file does not pin.

`make lint` runs this, so a dependency added to pyproject.toml without `make lock` is
caught before it lands (CI, `make venv` and the image install from the lock files).
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


def _pinned(lock: Path) -> set[str]:
    names = set()
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        if match:
            names.add(re.sub(r"[-_.]+", "-", match.group(1)).lower())
    return names


def main(root: Path = ROOT) -> int:
    """Compare pyproject.toml with requirements.lock, requirements-dev.lock and
    requirements-ha-demo.lock (what `make demo-ha` installs)."""
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
    for problem in problems:
        print(f"lock check: {problem}; run `make lock`", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
