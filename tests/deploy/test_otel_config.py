"""The OpenTelemetry Collector configuration (deploy/otel/collector.yaml): every pipeline is
wired to components that exist, the OTLP receivers listen where the Service and the
services' OTEL_EXPORTER_OTLP_ENDPOINT point, and the cluster runs exactly this file."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from .conftest import DEPLOY, OVERLAYS, STOCKADE_SERVICES, Manifest, env_of, find, main_container

CONFIG_FILE = DEPLOY / "otel" / "collector.yaml"
SIGNALS = ("traces", "metrics", "logs")


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded = yaml.safe_load(CONFIG_FILE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_every_signal_has_a_pipeline(config: dict[str, Any]) -> None:
    pipelines = config["service"]["pipelines"]
    assert set(SIGNALS) <= set(pipelines)


def test_pipelines_reference_defined_components(config: dict[str, Any]) -> None:
    for name, pipeline in config["service"]["pipelines"].items():
        for section in ("receivers", "processors", "exporters"):
            used = pipeline.get(section, [])
            if section != "processors":
                assert used, f"pipeline {name} has no {section}"
            for component in used:
                assert component in (config.get(section) or {}), f"{name}: {component} undefined"
    for extension in config["service"].get("extensions", []):
        assert extension in config["extensions"]


def test_every_defined_component_is_used(config: dict[str, Any]) -> None:
    """An unused receiver or exporter is a wiring mistake (e.g. a backend never enabled)."""
    pipelines = config["service"]["pipelines"].values()
    for section in ("receivers", "processors", "exporters"):
        used = {c for p in pipelines for c in p.get(section, [])}
        assert set(config.get(section) or {}) == used, section


def test_memory_limiter_first_and_batch_in_every_pipeline(config: dict[str, Any]) -> None:
    for name, pipeline in config["service"]["pipelines"].items():
        processors = pipeline["processors"]
        assert processors[0] == "memory_limiter", name
        assert "batch" in processors, name
        # Batching after the limiter, so refused data is never batched.
        assert processors.index("batch") > processors.index("memory_limiter")


def test_otlp_receivers_listen_on_all_interfaces(config: dict[str, Any]) -> None:
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"
    for name, pipeline in config["service"]["pipelines"].items():
        assert "otlp" in pipeline["receivers"], name


def test_debug_exporter_and_a_documented_backend(config: dict[str, Any]) -> None:
    assert "debug" in config["exporters"]
    for pipeline in config["service"]["pipelines"].values():
        assert "debug" in pipeline["exporters"]
    # The backend exporter is shipped commented out, with an endpoint to fill in.
    text = CONFIG_FILE.read_text()
    assert "# otlp/backend:" in text
    assert "#   endpoint:" in text


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cluster_runs_this_file(
    rendered: dict[str, list[Manifest]], overlay: str, config: dict[str, Any]
) -> None:
    objs = rendered[overlay]
    deployment = find(objs, "Deployment", "otel-collector")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    config_arg = next(a for a in container["args"] if a.startswith("--config="))
    path = config_arg.split("=", 1)[1]
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
    )
    configmap = find(objs, "ConfigMap", volume["configMap"]["name"])
    key = path[len(mount["mountPath"]) + 1 :]
    assert configmap["data"][key] == CONFIG_FILE.read_text()
    assert yaml.safe_load(configmap["data"][key]) == config


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ports_line_up(
    rendered: dict[str, list[Manifest]], overlay: str, config: dict[str, Any]
) -> None:
    objs = rendered[overlay]
    container = main_container(objs, "otel-collector")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    protocols = config["receivers"]["otlp"]["protocols"]
    assert ports["otlp-grpc"] == int(protocols["grpc"]["endpoint"].rsplit(":", 1)[1])
    assert ports["otlp-http"] == int(protocols["http"]["endpoint"].rsplit(":", 1)[1])
    health = int(config["extensions"]["health_check"]["endpoint"].rsplit(":", 1)[1])
    assert ports["health"] == health
    assert container["readinessProbe"]["httpGet"]["port"] == "health"
    service = find(objs, "Service", "otel-collector")
    grpc_port = next(p for p in service["spec"]["ports"] if p["name"] == "otlp-grpc")
    for name in STOCKADE_SERVICES:
        endpoint = env_of(main_container(objs, name))["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"]
        assert endpoint == f"http://{service['metadata']['name']}:{grpc_port['port']}"
