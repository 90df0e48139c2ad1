"""Shared fixtures for the deploy tests: render every overlay once with ``kubectl kustomize``.

kubectl is required: a missing binary fails these tests loudly instead of skipping them,
since an unrendered manifest is an unchecked one.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("dev", "prod")
# The services Stockade itself runs (the collector is a third-party workload).
STOCKADE_SERVICES = ("decision", "executor", "audit", "agent", "papers")
GRPC_PORTS = {"decision": 50051, "executor": 50052, "audit": 50053, "agent": 50054, "papers": 50055}
HEALTH_SERVICES = {
    "decision": "stockade.v1.DecisionService",
    "executor": "stockade.v1.ExecutorService",
    "audit": "stockade.v1.AuditService",
    "agent": "stockade.v1.AgentService",
    "papers": "stockade.v1.ToolProvider",
}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")

Manifest = dict[str, Any]


def kubectl() -> str:
    """Path of kubectl, or a test failure that says how to get it."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl is not on PATH: the deploy tests need it to render the overlays")
    return found


def render(path: Path) -> list[Manifest]:
    """Render one kustomization directory into its objects."""
    run = subprocess.run(
        [kubectl(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if run.returncode != 0:
        pytest.fail(f"kubectl kustomize {path} failed:\n{run.stderr}")
    return [doc for doc in yaml.safe_load_all(run.stdout) if doc]


POSTGRES_COMBINATION = "prod+postgres"
"""The prod overlay plus the single-instance PostgreSQL component: what an operator without
a database of their own applies. Rendered beside the overlays, so every invariant that
holds for a rendered set (pod hardening, Services, schemas) holds for it too."""


RENDERED_SETS = (*OVERLAYS, POSTGRES_COMBINATION)
"""Every key of the ``rendered`` fixture."""


def with_components(here: Path, base: str, components: list[str]) -> list[Manifest]:
    """Render ``overlays/<base>`` plus ``components`` from a kustomization in ``here``,
    as an operator combines them in an overlay of their own."""
    import os

    k8s = DEPLOY / "k8s"
    listed = ", ".join(os.path.relpath(k8s / "components" / c, here) for c in components)
    (here / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "namespace: stockade\n"
        f"resources: [{os.path.relpath(k8s / 'overlays' / base, here)}]\n"
        f"components: [{listed}]\n"
        "images:\n"
        "  - name: stockade\n"
        "    newName: registry.example.com/stockade/stockade\n"
        "    newTag: 0.1.0\n"
    )
    return render(here)


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Manifest]]:
    """Every overlay's objects, keyed by overlay name, and the prod overlay with the
    postgres component (key ``POSTGRES_COMBINATION``)."""
    out = {name: render(DEPLOY / "k8s" / "overlays" / name) for name in OVERLAYS}
    here = tmp_path_factory.mktemp("postgres-overlay")
    out[POSTGRES_COMBINATION] = with_components(here, "prod", ["postgres"])
    return out


@pytest.fixture(scope="session")
def console_rendered(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    """The prod overlay plus the opt-in console component, as an operator combines them."""
    return with_components(tmp_path_factory.mktemp("console-overlay"), "prod", ["console"])


def pod_spec(obj: Manifest) -> Manifest:
    """The pod spec of a workload of any kind."""
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return dict(spec["template"]["spec"])


def pod_labels(obj: Manifest) -> dict[str, str]:
    """The labels of the pods a workload creates."""
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return dict(spec["template"]["metadata"].get("labels", {}))


def workloads(objs: list[Manifest]) -> list[Manifest]:
    """Objects that create pods."""
    return [o for o in objs if o["kind"] in WORKLOAD_KINDS]


def containers(obj: Manifest) -> list[Manifest]:
    """Every container of a workload, init containers included."""
    spec = pod_spec(obj)
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def find(objs: list[Manifest], kind: str, name: str) -> Manifest:
    """The one object of ``kind`` called ``name``."""
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind}/{name}, found {len(hits)}"
    return hits[0]


def workload(objs: list[Manifest], name: str) -> Manifest:
    """The workload (any kind) called ``name``."""
    hits = [o for o in workloads(objs) if o["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one workload {name}, found {len(hits)}"
    return hits[0]


def env_of(container: Manifest) -> dict[str, Manifest]:
    """A container's env entries by name (names must be unique)."""
    entries = container.get("env", [])
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)), f"duplicate env names in {container['name']}"
    return {e["name"]: e for e in entries}


def main_container(objs: list[Manifest], name: str) -> Manifest:
    """The first (main) container of the workload called ``name``."""
    return dict(workload(objs, name)["spec"]["template"]["spec"]["containers"][0])
