"""Security and wiring invariants of the rendered manifests, for every container of every
workload in every overlay: restricted pod security, resources, probes, Services that reach
real ports, secrets mounted only where they belong, and settings that point at mounts."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from stockade.agent.settings import AgentSettings
from stockade.server import LIVENESS

from .conftest import (
    GRPC_PORTS,
    HEALTH_SERVICES,
    OVERLAYS,
    RENDERED_SETS,
    ROOT,
    STOCKADE_SERVICES,
    Manifest,
    containers,
    env_of,
    find,
    main_container,
    pod_labels,
    pod_spec,
    workload,
    workloads,
)

# The image's venv (deploy/docker/Dockerfile); packages land in its site-packages.
IMAGE_SITE_PACKAGES = PurePosixPath("/opt/stockade/lib/python3.11/site-packages")
# Settings that name folders shipped inside the image rather than volumes.
IMAGE_DIRS = {"STOCKADE_AGENT_SCRIPT_DIR"}
GRANT_PRIVATE_SECRET = "stockade-grant-signing"
GRANT_PUBLIC_SECRET = "stockade-grant-verify"


def _all_workloads(rendered: dict[str, list[Manifest]]) -> list[tuple[str, Manifest]]:
    """Every workload of every rendered set: the overlays and the combinations with
    components (conftest), so a component's pods are held to the same rules."""
    return [(overlay, w) for overlay, objs in rendered.items() for w in workloads(objs)]


def _label(overlay: str, obj: Manifest, container: Manifest | None = None) -> str:
    suffix = f"/{container['name']}" if container else ""
    return f"{overlay}:{obj['kind']}/{obj['metadata']['name']}{suffix}"


# --- pod security ------------------------------------------------------------------------


def test_pod_level_hardening(rendered: dict[str, list[Manifest]]) -> None:
    for overlay, obj in _all_workloads(rendered):
        spec = pod_spec(obj)
        where = _label(overlay, obj)
        assert spec.get("automountServiceAccountToken") is False, where
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(host), f"{where}: {host}"
        ctx = spec.get("securityContext", {})
        assert ctx.get("runAsNonRoot") is True, where
        assert ctx.get("runAsUser", 1) != 0, where
        assert ctx.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        for volume in spec.get("volumes", []):
            assert "hostPath" not in volume, f"{where}: hostPath volume {volume['name']}"


def test_container_level_hardening(rendered: dict[str, list[Manifest]]) -> None:
    for overlay, obj in _all_workloads(rendered):
        pod_ctx = pod_spec(obj).get("securityContext", {})
        for container in containers(obj):
            where = _label(overlay, obj, container)
            ctx = container.get("securityContext", {})
            assert ctx.get("allowPrivilegeEscalation") is False, where
            assert ctx.get("readOnlyRootFilesystem") is True, where
            assert ctx.get("privileged") in (None, False), where
            assert ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")) is True, where
            assert ctx.get("runAsUser", pod_ctx.get("runAsUser", 1)) != 0, where
            caps = ctx.get("capabilities", {})
            assert caps.get("drop") == ["ALL"], where
            assert not caps.get("add"), f"{where}: adds {caps.get('add')}"
            seccomp = ctx.get("seccompProfile", pod_ctx.get("seccompProfile", {}))
            assert seccomp.get("type") == "RuntimeDefault", where
            assert ctx.get("procMount") in (None, "Default"), where


def test_service_accounts_do_not_mount_tokens(rendered: dict[str, list[Manifest]]) -> None:
    for overlay, objs in rendered.items():
        accounts = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ServiceAccount"}
        for obj in workloads(objs):
            name = pod_spec(obj).get("serviceAccountName")
            assert name in accounts, f"{_label(overlay, obj)} uses a missing/default SA"
            assert accounts[name].get("automountServiceAccountToken") is False, name


def test_resources_requests_and_limits(rendered: dict[str, list[Manifest]]) -> None:
    for overlay, obj in _all_workloads(rendered):
        for container in containers(obj):
            where = _label(overlay, obj, container)
            resources = container.get("resources", {})
            for kind in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    assert resource in resources.get(kind, {}), f"{where}: {kind}.{resource}"


def test_writable_paths_are_volumes(rendered: dict[str, list[Manifest]]) -> None:
    """With a read-only root filesystem, /tmp and the state folders must be volumes."""
    for overlay, obj in _all_workloads(rendered):
        if obj["metadata"]["name"] not in STOCKADE_SERVICES:
            continue
        for container in containers(obj):
            where = _label(overlay, obj, container)
            mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts and not mounts["/tmp"].get("readOnly"), where
            tmp_volume = next(
                v for v in pod_spec(obj)["volumes"] if v["name"] == mounts["/tmp"]["name"]
            )
            assert "emptyDir" in tmp_volume, where


# --- Services and ports --------------------------------------------------------------------


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


@pytest.mark.parametrize("overlay", RENDERED_SETS)
def test_every_service_selects_a_workload_and_targets_a_real_port(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    objs = rendered[overlay]
    for svc in (o for o in objs if o["kind"] == "Service"):
        name = svc["metadata"]["name"]
        selected = [w for w in workloads(objs) if _selects(svc["spec"]["selector"], pod_labels(w))]
        assert selected, f"Service {name} selects no workload"
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for obj in selected:
                declared = [
                    p
                    for c in obj["spec"]["template"]["spec"]["containers"]
                    for p in c.get("ports", [])
                ]
                key = "name" if isinstance(target, str) else "containerPort"
                hits = [p for p in declared if p.get(key) == target]
                assert hits, f"Service {name} port {port['name']} -> {target}: no such port"
                assert hits[0].get("protocol", "TCP") == port.get("protocol", "TCP")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_stockade_services_expose_a_port_named_grpc(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    for service in STOCKADE_SERVICES:
        svc = find(rendered[overlay], "Service", service)
        ports = {p["name"]: p for p in svc["spec"]["ports"]}
        assert ports["grpc"]["port"] == GRPC_PORTS[service]
        container = main_container(rendered[overlay], service)
        grpc_port = next(p for p in container["ports"] if p["name"] == "grpc")
        assert grpc_port["containerPort"] == GRPC_PORTS[service]
        listen = env_of(container)[f"STOCKADE_{service.upper()}_LISTEN"]["value"]
        assert listen == f"0.0.0.0:{GRPC_PORTS[service]}"


# --- probes and shutdown --------------------------------------------------------------------


def _tls_enabled(service: str, container: Manifest) -> bool:
    return f"STOCKADE_{service.upper()}_TLS_CERT_FILE" in env_of(container)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_are_grpc_health_checks(rendered: dict[str, list[Manifest]], overlay: str) -> None:
    """Plaintext servers are probed on their grpc port; mTLS servers on their plaintext
    health-only listener (kubelet cannot present a client certificate)."""
    for service in STOCKADE_SERVICES:
        container = main_container(rendered[overlay], service)
        env = env_of(container)
        if _tls_enabled(service, container):
            health_listen = env[f"STOCKADE_{service.upper()}_HEALTH_LISTEN"]["value"]
            expected_port = int(health_listen.rsplit(":", 1)[1])
            assert expected_port != GRPC_PORTS[service]
            assert any(p["containerPort"] == expected_port for p in container["ports"])
        else:
            expected_port = GRPC_PORTS[service]
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container[probe_name]
            assert set(probe) & {"httpGet", "tcpSocket", "exec"} == set(), probe_name
            assert probe["grpc"]["port"] == expected_port, f"{overlay}/{service} {probe_name}"
        # Readiness asks for the service itself, so a draining server (or one whose store
        # is down) leaves the endpoints; startup and liveness ask only whether the process
        # answers, so a store outage never restarts the pods in a loop.
        assert container["readinessProbe"]["grpc"]["service"] == HEALTH_SERVICES[service]
        for probe_name in ("startupProbe", "livenessProbe"):
            assert container[probe_name]["grpc"]["service"] == LIVENESS, (
                f"{overlay}/{service} {probe_name}"
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_grace_period_covers_prestop_and_drain(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    for service in STOCKADE_SERVICES:
        obj = workload(rendered[overlay], service)
        container = obj["spec"]["template"]["spec"]["containers"][0]
        drain = float(env_of(container)[f"STOCKADE_{service.upper()}_GRACE_SECONDS"]["value"])
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
        budget = pod_spec(obj)["terminationGracePeriodSeconds"]
        assert budget > drain + pre_stop.get("seconds", 0), f"{overlay}/{service}"


def test_long_running_services_may_finish_a_tool_call(rendered: dict[str, list[Manifest]]) -> None:
    """The executor and agent drain for at least the longest tool call (max_timeout_s)."""
    for overlay in OVERLAYS:
        executor = main_container(rendered[overlay], "executor")
        max_timeout = float(env_of(executor)["STOCKADE_EXECUTOR_MAX_TIMEOUT_S"]["value"])
        for service in ("executor", "agent"):
            container = main_container(rendered[overlay], service)
            drain = float(env_of(container)[f"STOCKADE_{service.upper()}_GRACE_SECONDS"]["value"])
            assert drain >= max_timeout, f"{overlay}/{service}"


# --- secrets --------------------------------------------------------------------------------


def _secret_refs(obj: Manifest) -> set[str]:
    """Every Secret a workload can read: volumes (incl. projected), env and envFrom."""
    refs: set[str] = set()
    spec = pod_spec(obj)
    for volume in spec.get("volumes", []):
        if "secret" in volume:
            refs.add(volume["secret"]["secretName"])
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                refs.add(source["secret"]["name"])
    for container in containers(obj):
        for entry in container.get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add(ref["name"])
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                refs.add(source["secretRef"]["name"])
    return refs


def test_grant_keys_go_only_where_they_are_used(rendered: dict[str, list[Manifest]]) -> None:
    for overlay, obj in _all_workloads(rendered):
        refs = _secret_refs(obj)
        if obj["metadata"]["name"] == "decision":
            assert GRANT_PRIVATE_SECRET in refs, overlay
        else:
            assert GRANT_PRIVATE_SECRET not in refs, _label(overlay, obj)
        # The verifying key goes to the executor alone: nobody else checks grants.
        assert (GRANT_PUBLIC_SECRET in refs) is (obj["metadata"]["name"] == "executor")


def test_executor_mounts_only_the_public_key(rendered: dict[str, list[Manifest]]) -> None:
    for overlay in OVERLAYS:
        executor = workload(rendered[overlay], "executor")
        refs = _secret_refs(executor)
        assert GRANT_PUBLIC_SECRET in refs
        # Besides: its certificate, and (prod) the DSN of a role that may only call the
        # executor-state functions. Never the administrator's DSN that creates them.
        assert refs - {GRANT_PUBLIC_SECRET} <= {"stockade-tls-executor", "stockade-store-executor"}
        volume = next(
            v
            for v in pod_spec(executor)["volumes"]
            if v.get("secret", {}).get("secretName") == GRANT_PUBLIC_SECRET
        )
        # Only the public half is projected, even if someone adds the private key to the
        # same Secret by mistake.
        assert [item["key"] for item in volume["secret"]["items"]] == ["grant-signing.pub"]
        container = executor["spec"]["template"]["spec"]["containers"][0]
        key_file = env_of(container)["STOCKADE_EXECUTOR_GRANT_PUBLIC_KEY_FILE"]["value"]
        assert key_file.endswith(".pub")


def test_store_admin_credentials_go_only_to_the_migration_job(
    rendered: dict[str, list[Manifest]],
) -> None:
    found = False
    for overlay, obj in _all_workloads(rendered):
        if "stockade-store-executor-admin" in _secret_refs(obj):
            where = _label(overlay, obj)
            assert (obj["kind"], obj["metadata"]["name"]) == ("Job", "executor-state-migrate"), (
                where
            )
            found = True
    assert found


def test_secret_volumes_are_read_only_and_not_world_readable(
    rendered: dict[str, list[Manifest]],
) -> None:
    for overlay, obj in _all_workloads(rendered):
        spec = pod_spec(obj)
        secret_volumes = {v["name"]: v for v in spec.get("volumes", []) if "secret" in v}
        for container in containers(obj):
            for mount in container.get("volumeMounts", []):
                if mount["name"] in secret_volumes:
                    assert mount.get("readOnly") is True, _label(overlay, obj, container)
        for volume in secret_volumes.values():
            mode = volume["secret"].get("defaultMode", 0o644)
            assert mode & 0o007 == 0, f"{_label(overlay, obj)}: {volume['name']} mode {mode:o}"


# --- settings wiring ------------------------------------------------------------------------


def _mounted(container: Manifest, path: str) -> Manifest | None:
    best = None
    for mount in container.get("volumeMounts", []):
        root = PurePosixPath(mount["mountPath"])
        candidate = PurePosixPath(path)
        if candidate == root or root in candidate.parents:
            if best is None or len(mount["mountPath"]) > len(best["mountPath"]):
                best = mount
    return best


def _volume(obj: Manifest, name: str) -> dict[str, Any]:
    return dict(next(v for v in pod_spec(obj)["volumes"] if v["name"] == name))


def _claims(obj: Manifest) -> set[str]:
    return {c["metadata"]["name"] for c in obj["spec"].get("volumeClaimTemplates", [])}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_file_setting_points_into_a_mounted_volume(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    """A typo in a path would otherwise only show as a crash-looping pod."""
    for service in STOCKADE_SERVICES:
        obj = workload(rendered[overlay], service)
        container = obj["spec"]["template"]["spec"]["containers"][0]
        for name, entry in env_of(container).items():
            if not name.startswith("STOCKADE_") or "value" not in entry:
                continue
            is_file = name.endswith("_FILE")
            is_dir = name.endswith(("_DIR", "_WORKSPACE"))
            if not (is_file or is_dir):
                continue
            if name in IMAGE_DIRS:
                continue  # read-only content of the image, checked below
            mount = _mounted(container, entry["value"])
            assert mount is not None, f"{overlay}/{service}: {name}={entry['value']} not mounted"
            if is_dir:
                assert not mount.get("readOnly"), f"{name} must be writable"
                writable = mount["name"] in _claims(obj) or {
                    "emptyDir",
                    "persistentVolumeClaim",
                } & set(_volume(obj, mount["name"]))
                assert writable, f"{overlay}/{service}: {name} is not on a writable volume"
            if is_file and mount["name"] not in _claims(obj):
                volume = _volume(obj, mount["name"])
                source = volume.get("secret") or volume.get("configMap")
                assert source is not None, f"{name}: expected a Secret or ConfigMap mount"
                relative = str(PurePosixPath(entry["value"]).relative_to(mount["mountPath"]))
                items = source.get("items")
                if items is not None:
                    paths = {i["path"] for i in items}
                    assert relative in paths, f"{name}: {relative} not projected"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_telemetry_environment(rendered: dict[str, list[Manifest]], overlay: str) -> None:
    collector = find(rendered[overlay], "Service", "otel-collector")
    grpc_port = next(p["port"] for p in collector["spec"]["ports"] if p["name"] == "otlp-grpc")
    for service in STOCKADE_SERVICES:
        container = main_container(rendered[overlay], service)
        env = env_of(container)
        assert env["OTEL_SERVICE_NAME"]["value"] == f"stockade-{service}"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == f"http://otel-collector:{grpc_port}"
        assert env["OTEL_TRACES_EXPORTER"]["value"] == "otlp"
        # $(POD_NAME) expands only if POD_NAME is defined before it.
        names = [e["name"] for e in container["env"]]
        assert names.index("POD_NAME") < names.index("OTEL_RESOURCE_ATTRIBUTES")


def test_plaintext_only_in_dev_and_mtls_everywhere_in_prod(
    rendered: dict[str, list[Manifest]],
) -> None:
    for service in STOCKADE_SERVICES:
        up = service.upper()
        dev = env_of(main_container(rendered["dev"], service))
        assert dev[f"STOCKADE_{up}_ALLOW_PLAINTEXT"]["value"] == "true"
        assert f"STOCKADE_{up}_TLS_CERT_FILE" not in dev
        obj = workload(rendered["prod"], service)
        prod = env_of(obj["spec"]["template"]["spec"]["containers"][0])
        assert f"STOCKADE_{up}_ALLOW_PLAINTEXT" not in prod
        for part in ("CERT", "KEY", "CA"):
            assert f"STOCKADE_{up}_TLS_{part}_FILE" in prod, f"{service} {part}"
        assert f"stockade-tls-{service}" in _secret_refs(obj)


def test_agent_llm_key_comes_from_a_secret(rendered: dict[str, list[Manifest]]) -> None:
    container = main_container(rendered["prod"], "agent")
    key = env_of(container)["STOCKADE_AGENT_OPENAI_API_KEY"]
    assert "value" not in key
    assert key["valueFrom"]["secretKeyRef"]["name"] == "stockade-llm"
    for overlay, obj in _all_workloads(rendered):
        for c in containers(obj):
            for entry in c.get("env", []):
                if any(word in entry["name"] for word in ("API_KEY", "TOKEN", "PASSWORD")):
                    assert "value" not in entry, f"{_label(overlay, obj, c)}: {entry['name']}"


def test_agent_addresses_name_real_services(rendered: dict[str, list[Manifest]]) -> None:
    for overlay in OVERLAYS:
        objs = rendered[overlay]
        env = env_of(main_container(objs, "agent"))
        addresses = [
            env["STOCKADE_AGENT_DECISION_ADDR"]["value"],
            env["STOCKADE_AGENT_EXECUTOR_ADDR"]["value"],
            env["STOCKADE_AGENT_AUDIT_ADDR"]["value"],
            *env["STOCKADE_AGENT_TOOL_PROVIDERS"]["value"].split(","),
        ]
        for address in addresses:
            host, port = address.rsplit(":", 1)
            svc = find(objs, "Service", host)
            assert int(port) in {p["port"] for p in svc["spec"]["ports"]}, address


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_image_folders_exist_in_the_package(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    """A folder setting that points into the image's venv names a folder this repository
    ships in the wheel (clients/ and services/ are merged into one namespace)."""
    env = env_of(main_container(rendered[overlay], "agent"))
    for name in IMAGE_DIRS:
        if name not in env:
            continue
        path = PurePosixPath(env[name]["value"])
        relative = path.relative_to(IMAGE_SITE_PACKAGES)
        assert relative.parts[0] == "stockade"
        sources = [ROOT / tree / relative for tree in ("clients", "services")]
        assert any(s.is_dir() for s in sources), f"{name}: {relative} is not in the package"
    if env["STOCKADE_AGENT_PROVIDER"]["value"] == "scripted":
        folder = PurePosixPath(env["STOCKADE_AGENT_SCRIPT_DIR"]["value"])
        relative = folder.relative_to(IMAGE_SITE_PACKAGES)
        default = str(AgentSettings.model_fields["default_script"].default)
        scripts = [ROOT / tree / relative / f"{default}.yaml" for tree in ("clients", "services")]
        assert any(s.is_file() for s in scripts), f"the default script {default!r} is missing"
