"""Without privileges (as the container runs it): layers say why they are off, the rest holds.

The executor is run as ``nobody`` with no capabilities (``setpriv``), using the system
Python 3.11 (the venv's interpreter lives under /root, which nobody cannot enter) and
only the confine package on its path, with what it imports: the path sandbox (its
protected-name matcher, shared with the run-time clean-up) and that module's one runtime
dependency, mypy_extensions (a single file).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import mypy_extensions
import pytest

import stockade.executor.confine as confine_pkg
from tests.procs import pids_with, sleep_marker

SERVICES = Path(confine_pkg.__file__).resolve().parents[3]
CLIENTS = SERVICES.parent / "clients"

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from stockade.executor.confine import ConfinementPolicy, Launcher, probe_layers

    async def main() -> None:
        ws, outside, marker = sys.argv[1], sys.argv[2], sys.argv[3]
        probed = [l.to_dict() for l in probe_layers()]
        launcher = Launcher()
        await launcher.start()
        policy = ConfinementPolicy((ws,), (ws,), masked_globs=("**/.env",))
        try:
            ran = await launcher.run(
                f"echo in > inside.txt; echo out > {outside}/x.txt;"
                f" (setsid sleep {marker} &) ; nohup sleep {marker} >/dev/null 2>&1 &"
                " echo done",
                cwd=ws, policy=policy, timeout_s=30,
            )
            killed = await launcher.run(
                f"setsid sleep {marker} & sleep {marker}", cwd=ws, policy=policy,
                timeout_s=1,
            )
        finally:
            await launcher.close()
        print(json.dumps({
            "probed": probed,
            "layers": [[l.name, l.active, l.detail] for l in ran.layers],
            "stdout": ran.stdout, "stderr": ran.stderr, "timed_out": killed.timed_out,
        }))

    asyncio.run(main())
    """
)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="stockade-unpriv-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_unprivileged_executor_reports_and_still_confines(shared_dir: Path) -> None:
    setpriv = shutil.which("setpriv")
    python = "/usr/bin/python3.11"
    assert setpriv is not None and os.path.exists(python)
    ws = shared_dir / "ws"
    outside = shared_dir / "outside"
    for d in (ws, outside):
        d.mkdir()
        d.chmod(0o777)
    (ws / ".env").write_text("SECRET\n")
    # The checkout may sit in a folder only root can enter (mktemp -d is 0700): give the
    # unprivileged user its own readable copy of the code.
    src = shared_dir / "src"
    for tree, root in (("services", SERVICES), ("clients", CLIENTS)):
        shutil.copytree(root, src / tree, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(mypy_extensions.__file__, src / "services")
    for dirpath, _, _ in os.walk(src):
        os.chmod(dirpath, 0o755)
    script = shared_dir / "run.py"
    script.write_text(SCRIPT)
    marker = sleep_marker()
    proc = subprocess.run(
        [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            python,
            str(script),
            str(ws),
            str(outside),
            marker,
        ],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{src / 'services'}:{src / 'clients'}"},
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    probed = {x["name"]: x for x in report["probed"]}
    # What needs privileges is off, and says why; nothing claims otherwise.
    for name in ("pid_namespace", "netns", "mount_mask", "pids_cgroup", "capabilities"):
        assert probed[name]["active"] is False, name
        assert probed[name]["detail"], name
    for name in ("landlock", "no_new_privs", "rlimits", "process_group", "git_neutralised"):
        assert probed[name]["active"] is True, name
    ran = {name: active for name, active, _ in report["layers"]}
    assert ran["landlock"] and ran["no_new_privs"] and not ran["netns"]
    # Landlock still confines writes; orphans still die with the command.
    assert report["stdout"] == "done\n"
    assert (ws / "inside.txt").read_text() == "in\n"
    assert not (outside / "x.txt").exists()
    assert report["timed_out"] is True
    assert pids_with(marker) == []
