"""Every overlay renders with ``kubectl kustomize`` and every object validates against the
Kubernetes OpenAPI schemas shipped with kubernetes-validate (strict: unknown fields are
errors). No cluster and no network are involved."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from .conftest import (
    DEPLOY,
    OVERLAYS,
    RENDERED_SETS,
    STOCKADE_SERVICES,
    Manifest,
    kubectl,
    render,
    with_components,
    workloads,
)

# The oldest Kubernetes minor these manifests promise to support: native gRPC probes (GA
# 1.27), preStop sleep (1.30), and the schemas kubernetes-validate ships.
K8S_VERSION = "1.33.0"


def _validate(obj: Manifest) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", RENDERED_SETS)
def test_every_object_validates_against_the_schemas(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    objs = rendered[overlay]
    assert objs, f"{overlay} rendered nothing"
    failures = []
    for obj in objs:
        try:
            _validate(obj)
        except (
            kubernetes_validate.ValidationError,
            kubernetes_validate.SchemaNotFoundError,
        ) as exc:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            failures.append(f"{name}: {getattr(exc, 'message', exc)}")
    assert not failures, "\n".join(failures)


def test_validator_rejects_what_the_api_server_would(
    rendered: dict[str, list[Manifest]],
) -> None:
    """The schema check is not vacuous: typos and wrong types in a real object fail."""
    deployment = next(o for o in rendered["prod"] if o["kind"] == "Deployment")
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(typo)
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(wrong_type)


@pytest.mark.parametrize("overlay", RENDERED_SETS)
def test_objects_are_unique_and_namespaced(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    objs = rendered[overlay]
    keys = Counter((o["kind"], o["metadata"]["name"]) for o in objs)
    assert [k for k, n in keys.items() if n > 1] == []
    for obj in objs:
        if obj["kind"] == "Namespace":
            assert obj["metadata"]["name"] == "stockade"
            continue
        assert obj["metadata"].get("namespace") == "stockade", obj["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_stockade_service_is_deployed(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    names = {w["metadata"]["name"] for w in workloads(rendered[overlay])}
    assert set(STOCKADE_SERVICES) <= names
    assert "otel-collector" in names


def test_namespace_enforces_restricted_pod_security(rendered: dict[str, list[Manifest]]) -> None:
    for overlay in OVERLAYS:
        ns = next(o for o in rendered[overlay] if o["kind"] == "Namespace")
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_prod_image_is_pinned_and_dev_is_local(rendered: dict[str, list[Manifest]]) -> None:
    for overlay in OVERLAYS:
        for obj in workloads(rendered[overlay]):
            for container in obj["spec"]["template"]["spec"]["containers"]:
                image = container["image"]
                assert ":" in image.rsplit("/", 1)[-1], f"{image} has no tag"
                assert not image.endswith(":latest"), image
    prod_images = {
        c["image"]
        for w in workloads(rendered["prod"])
        if w["metadata"]["name"] in STOCKADE_SERVICES
        for c in w["spec"]["template"]["spec"]["containers"]
    }
    assert prod_images == {
        "registry.example.com/stockade/stockade:0.1.0",
        "registry.example.com/stockade/stockade-executor:0.1.0",
    }
    # Only the executor runs the image with run_bash's tools.
    for w in workloads(rendered["prod"]):
        for c in w["spec"]["template"]["spec"]["containers"]:
            if c["image"].endswith("stockade-executor:0.1.0"):
                assert w["metadata"]["name"] == "executor"


def test_prod_adds_the_production_objects(rendered: dict[str, list[Manifest]]) -> None:
    prod = rendered["prod"]
    kinds = Counter(o["kind"] for o in prod)
    assert kinds["HorizontalPodAutoscaler"] == 4
    assert kinds["PodDisruptionBudget"] >= 2
    assert kinds["NetworkPolicy"] >= 5
    hpa_targets = {
        o["spec"]["scaleTargetRef"]["name"] for o in prod if o["kind"] == "HorizontalPodAutoscaler"
    }
    # decision and audit: on PostgreSQL (components/scale-out).
    assert hpa_targets == {"agent", "executor", "decision", "audit"}
    for obj in prod:
        if obj["kind"] == "HorizontalPodAutoscaler":
            assert obj["spec"]["minReplicas"] >= 2
            ref = obj["spec"]["scaleTargetRef"]
            target = next(w for w in workloads(prod) if w["metadata"]["name"] == ref["name"])
            assert target["kind"] == ref["kind"]
            # The HPA owns the replica count; a fixed one would fight it on every apply.
            assert "replicas" not in target["spec"]
    # Dev stays small and open for local clusters: no HPA, no NetworkPolicy.
    dev_kinds = Counter(o["kind"] for o in rendered["dev"])
    assert dev_kinds["HorizontalPodAutoscaler"] == 0


def test_every_pdb_selects_a_scaled_out_workload(rendered: dict[str, list[Manifest]]) -> None:
    prod = rendered["prod"]
    hpa_min = {
        o["spec"]["scaleTargetRef"]["name"]: o["spec"]["minReplicas"]
        for o in prod
        if o["kind"] == "HorizontalPodAutoscaler"
    }
    for pdb in (o for o in prod if o["kind"] == "PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        matches = [
            w
            for w in workloads(prod)
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matches) == 1, pdb["metadata"]["name"]
        name = matches[0]["metadata"]["name"]
        replicas = hpa_min.get(name, matches[0]["spec"].get("replicas", 1))
        # minAvailable must leave room for a drain, or the PDB blocks every node upgrade.
        assert pdb["spec"]["minAvailable"] < replicas, name


def test_each_base_and_component_folder_renders_alone() -> None:
    """The base renders by itself (components are exercised through the overlays)."""
    objs = render(DEPLOY / "k8s" / "base")
    assert {o["kind"] for o in objs} >= {"Deployment", "StatefulSet", "Service", "ConfigMap"}


def _components_in(overlay: str) -> set[str]:
    kustomization = yaml.safe_load(
        (DEPLOY / "k8s" / "overlays" / overlay / "kustomization.yaml").read_text()
    )
    return {Path(c).name for c in kustomization.get("components", [])}


OPT_IN = sorted(
    p.name
    for p in (DEPLOY / "k8s" / "components").iterdir()
    if p.is_dir() and p.name not in _components_in("prod")
)


def test_every_component_is_in_an_overlay_or_opt_in() -> None:
    """No component folder goes unrendered: the overlays carry some, the rest are the
    opt-ins rendered on top of prod below (as `make render` does)."""
    folders = {p.name for p in (DEPLOY / "k8s" / "components").iterdir() if p.is_dir()}
    assert folders == _components_in("prod") | _components_in("dev") | set(OPT_IN)
    assert {"postgres", "console", "executor-telemetry"} <= set(OPT_IN)
    assert "scale-out" in _components_in("prod") and "scale-out" not in _components_in("dev")


@pytest.mark.parametrize("component", OPT_IN)
def test_each_opt_in_component_renders_on_prod_and_validates(
    component: str, tmp_path: Path
) -> None:
    objs = with_components(tmp_path, "prod", [component])
    added = {(o["kind"], o["metadata"]["name"]) for o in objs} - {
        (o["kind"], o["metadata"]["name"]) for o in render(DEPLOY / "k8s" / "overlays" / "prod")
    }
    assert added, f"{component} adds nothing"
    keys = Counter((o["kind"], o["metadata"]["name"]) for o in objs)
    assert [k for k, n in keys.items() if n > 1] == []
    for obj in objs:
        _validate(obj)


def test_missing_kubectl_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """No kubectl means a failed test, never a skipped one."""
    monkeypatch.setenv("PATH", "")
    with pytest.raises(pytest.fail.Exception, match="kubectl is not on PATH"):
        kubectl()
