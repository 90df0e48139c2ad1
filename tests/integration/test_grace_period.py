"""Every service honours SIGTERM within its pod's grace period (issue 7).

The grace values come from the rendered prod overlay, so the manifests and the code
cannot drift apart: each service is started with the drain time its Deployment or
StatefulSet gives it, sent SIGTERM, and must exit cleanly well inside
``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from stockade.stack import SERVICES, LocalStack

ROOT = Path(__file__).resolve().parents[2]


def _workloads() -> dict[str, dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required to render the manifests"
    rendered = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "deploy/k8s/overlays/prod")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out = {}
    for doc in yaml.safe_load_all(rendered):
        if doc and doc["kind"] in ("Deployment", "StatefulSet"):
            out[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
    return out


def _grace_env(pod: dict[str, Any], name: str) -> float:
    env = {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}
    return float(env[f"STOCKADE_{name.upper()}_GRACE_SECONDS"])


def test_drain_fits_inside_the_pod_grace_period() -> None:
    pods = _workloads()
    for name in SERVICES:
        pod = pods[name]
        drain = _grace_env(pod, name)
        pre_stop = 0.0
        hook = pod["containers"][0].get("lifecycle", {}).get("preStop", {})
        if "sleep" in hook:
            pre_stop = float(hook["sleep"]["seconds"])
        assert drain + pre_stop < pod["terminationGracePeriodSeconds"], name


@pytest.mark.parametrize("name", SERVICES)
async def test_sigterm_exits_cleanly_within_the_grace_period(
    stack_factory: type[LocalStack], tmp_path: Path, workspace: Path, name: str
) -> None:
    pod = _workloads()[name]
    stack = stack_factory(
        tmp_path / "stack",
        env={
            name: {f"STOCKADE_{name.upper()}_GRACE_SECONDS": str(_grace_env(pod, name))},
            "executor": {"STOCKADE_EXECUTOR_WORKSPACE": str(workspace)},
        },
    )
    await stack.start([name])
    t0 = time.monotonic()
    code = await stack.stop(
        name, sig=signal.SIGTERM, timeout_s=pod["terminationGracePeriodSeconds"]
    )
    elapsed = time.monotonic() - t0
    assert code == 0, stack.log_tail(name)
    assert elapsed < pod["terminationGracePeriodSeconds"]
