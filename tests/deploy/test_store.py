"""Where the stateful services keep their state, and what follows from it (STORE-5).

A service on SQLite has one writer: one replica of a StatefulSet with its file on a
volume claim, no HPA, no PDB. A service on PostgreSQL (components/scale-out) is a
Deployment of interchangeable replicas: no fixed replica count, an HPA that keeps two or
more, a PDB that lets a drain take one, nothing durable in the pod, and its DSN (with the
password) only from a Secret. Checked for every rendered set: dev, prod, and prod with the
single-instance PostgreSQL component.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from .conftest import (
    DEPLOY,
    POSTGRES_COMBINATION,
    RENDERED_SETS,
    Manifest,
    env_of,
    find,
    pod_labels,
    pod_spec,
    workload,
    workloads,
)

STATEFUL = ("decision", "audit")
STORE_DSN = {"decision": "STOCKADE_DECISION_STORE_DSN", "audit": "STOCKADE_AUDIT_STORE_DSN"}
"""The setting that puts a service on PostgreSQL."""
STORE_LABEL = "stockade.dev/store"
COMPONENTS = DEPLOY / "k8s" / "components"


def _main(obj: Manifest) -> Manifest:
    return dict(obj["spec"]["template"]["spec"]["containers"][0])


def store_of(objs: list[Manifest], service: str) -> str:
    """``postgresql`` when the service's container is given a store DSN, else ``sqlite``."""
    setting = STORE_DSN.get(service)
    env = env_of(_main(workload(objs, service)))
    return "postgresql" if setting and setting in env else "sqlite"


def _hpas_for(objs: list[Manifest], obj: Manifest) -> list[Manifest]:
    return [
        o
        for o in objs
        if o["kind"] == "HorizontalPodAutoscaler"
        and o["spec"]["scaleTargetRef"]["name"] == obj["metadata"]["name"]
    ]


def _pdbs_for(objs: list[Manifest], obj: Manifest) -> list[Manifest]:
    labels = pod_labels(obj)
    return [
        o
        for o in objs
        if o["kind"] == "PodDisruptionBudget"
        and o["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ]


@pytest.mark.parametrize("overlay", RENDERED_SETS)
@pytest.mark.parametrize("service", STATEFUL)
def test_replicas_above_one_only_on_postgresql(
    rendered: dict[str, list[Manifest]], overlay: str, service: str
) -> None:
    objs = rendered[overlay]
    obj = workload(objs, service)
    container = _main(obj)
    env = env_of(container)
    hpas, pdbs = _hpas_for(objs, obj), _pdbs_for(objs, obj)
    if store_of(objs, service) == "sqlite":
        assert obj["kind"] == "StatefulSet", f"{overlay}/{service}"
        assert obj["spec"].get("replicas", 1) == 1, "SQLite has one writer"
        assert hpas == [] and pdbs == [], f"{overlay}/{service}: SQLite cannot scale out"
        claims = {c["metadata"]["name"] for c in obj["spec"]["volumeClaimTemplates"]}
        state_dir = env[f"STOCKADE_{service.upper()}_STATE_DIR"]["value"]
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == state_dir)
        assert mount["name"] in claims and not mount.get("readOnly")
        governing = find(objs, "Service", obj["spec"]["serviceName"])
        assert governing["spec"].get("clusterIP") == "None"
        assert STORE_LABEL not in pod_labels(obj)
        return
    assert obj["kind"] == "Deployment", f"{overlay}/{service}"
    # The HPA owns the count: a fixed one would scale the service back on every apply.
    assert "replicas" not in obj["spec"]
    assert "volumeClaimTemplates" not in obj["spec"] and "serviceName" not in obj["spec"]
    assert len(hpas) == 1, f"{overlay}/{service}: {len(hpas)} HPAs"
    ref = hpas[0]["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"]) == ("apps/v1", "Deployment")
    low, high = hpas[0]["spec"]["minReplicas"], hpas[0]["spec"]["maxReplicas"]
    assert 2 <= low <= high
    assert len(pdbs) == 1, f"{overlay}/{service}: {len(pdbs)} PDBs"
    # A drain may take one pod, never the last one.
    assert 1 <= pdbs[0]["spec"]["minAvailable"] < low
    # Nothing durable in the pod: the state folder is scratch.
    state_dir = env[f"STOCKADE_{service.upper()}_STATE_DIR"]["value"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == state_dir)
    volume = next(v for v in pod_spec(obj)["volumes"] if v["name"] == mount["name"])
    assert "emptyDir" in volume
    ref_dsn = env[STORE_DSN[service]]["valueFrom"]["secretKeyRef"]
    assert ref_dsn == {"name": f"stockade-store-{service}", "key": "dsn"}
    assert pod_labels(obj)[STORE_LABEL] == "postgresql"
    # No headless Service left behind by the StatefulSet this was.
    assert not [
        o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == f"{service}-pods"
    ]


def test_dev_keeps_one_sqlite_replica_each(rendered: dict[str, list[Manifest]]) -> None:
    for service in STATEFUL:
        assert store_of(rendered["dev"], service) == "sqlite", service
    assert not [o for o in rendered["dev"] if o["kind"] == "HorizontalPodAutoscaler"]


@pytest.mark.parametrize("overlay", ["prod", POSTGRES_COMBINATION])
def test_prod_runs_the_postgresql_services_scaled_out(
    rendered: dict[str, list[Manifest]], overlay: str
) -> None:
    for service in STORE_DSN:
        assert store_of(rendered[overlay], service) == "postgresql", service
    # Each audit pod appends its own hash chain, named by the pod (STORE-4).
    audit = workload(rendered[overlay], "audit")
    env = env_of(_main(audit))
    assert env["STOCKADE_AUDIT_REPLICA_ID"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.name"}
    }
    # ... and signs its chain's head with a key from a Secret (what catches a chain
    # rewritten with fresh hashes by someone who can write the database).
    key_file = env["STOCKADE_AUDIT_HEAD_SIGNING_KEY_FILE"]["value"]
    mount = next(
        m for m in _main(audit)["volumeMounts"] if key_file.startswith(m["mountPath"] + "/")
    )
    volume = next(v for v in pod_spec(audit)["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "stockade-audit-head-signing"
    assert [i["path"] for i in volume["secret"]["items"]] == [key_file.rsplit("/", 1)[1]]


def test_the_postgres_component_is_one_instance(rendered: dict[str, list[Manifest]]) -> None:
    objs = rendered[POSTGRES_COMBINATION]
    server = workload(objs, "postgres")
    assert server["kind"] == "StatefulSet" and server["spec"]["replicas"] == 1
    assert not _hpas_for(objs, server) and not _pdbs_for(objs, server)
    claims = {c["metadata"]["name"] for c in server["spec"]["volumeClaimTemplates"]}
    data = next(m for m in _main(server)["volumeMounts"] if m["name"] in claims)
    pgdata = env_of(_main(server))["PGDATA"]["value"]
    # initdb refuses a folder with lost+found in it: the data is one level down.
    assert pgdata.startswith(data["mountPath"] + "/")
    # The components that are not asked for are not there.
    assert not [w for w in workloads(rendered["prod"]) if w["metadata"]["name"] == "postgres"]


# --- DSNs only from Secrets -------------------------------------------------------------------


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Every string in a manifest, with where it is."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{path}[{i}]")]
    return []


def dsn_leaks(objs: list[Manifest]) -> list[str]:
    """Where a rendered set carries a database address or password in the clear: a
    ``*DSN*`` or ``*PASSWORD*`` variable with a literal value (or from a ConfigMap), a
    ``postgres(ql)://`` URI anywhere, or a Secret object (key material is never in git)."""
    leaks = []
    for obj in objs:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "Secret":
            leaks.append(f"{where}: a Secret in the manifests")
        for path, text in _strings(obj):
            if "postgres://" in text.lower() or "postgresql://" in text.lower():
                leaks.append(f"{where}{path}: a PostgreSQL URI")
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        spec = pod_spec(obj)
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            for entry in container.get("env", []):
                if "DSN" in entry["name"] or "PASSWORD" in entry["name"]:
                    if "secretKeyRef" not in entry.get("valueFrom", {}):
                        leaks.append(f"{where}: {entry['name']} not from a Secret")
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    leaks.append(f"{where}: environment from a ConfigMap")
    return leaks


def test_dsns_and_passwords_only_from_secrets(
    rendered: dict[str, list[Manifest]], console_rendered: list[Manifest]
) -> None:
    for overlay, objs in [*rendered.items(), ("prod+console", console_rendered)]:
        assert dsn_leaks(objs) == [], overlay
    # ... and there are DSNs to check: the checker looked at real ones.
    dsns = [
        e
        for w in workloads(rendered["prod"])
        for e in _main(w).get("env", [])
        if "DSN" in e["name"]
    ]
    assert dsns


def test_the_leak_check_is_not_vacuous(rendered: dict[str, list[Manifest]]) -> None:
    """A DSN written into the manifests, however it gets there, is caught."""
    base = rendered[POSTGRES_COMBINATION]
    audit_index = next(i for i, o in enumerate(base) if o is workload(base, "audit"))

    def planted(mutate: Any) -> list[str]:
        objs = copy.deepcopy(base)
        mutate(objs[audit_index])
        return dsn_leaks(objs)

    def literal(obj: Manifest) -> None:
        for entry in _main_ref(obj)["env"]:
            if entry["name"] == "STOCKADE_AUDIT_STORE_DSN":
                entry.pop("valueFrom")
                entry["value"] = "postgresql://stockade_audit:hunter2@postgres/stockade_audit"

    def from_config_map(obj: Manifest) -> None:
        for entry in _main_ref(obj)["env"]:
            if entry["name"] == "STOCKADE_AUDIT_STORE_DSN":
                entry["valueFrom"] = {"configMapKeyRef": {"name": "cfg", "key": "dsn"}}

    def in_args(obj: Manifest) -> None:
        _main_ref(obj)["args"] = ["audit", "--dsn=POSTGRESQL://u:p@h/db"]

    def password(obj: Manifest) -> None:
        _main_ref(obj)["env"].append({"name": "PGPASSWORD", "value": "hunter2"})

    for mutate in (literal, from_config_map, in_args, password):
        assert planted(mutate), mutate.__name__
    secret: Manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}}
    assert dsn_leaks([*base, secret])


def _main_ref(obj: Manifest) -> Manifest:
    """The main container itself (not a copy), for the mutations above."""
    container: Manifest = obj["spec"]["template"]["spec"]["containers"][0]
    return container


# --- the executors' shared state (STORE-3) -----------------------------------------------------


def test_prod_executors_share_their_spent_grants_with_the_least_rights(
    rendered: dict[str, list[Manifest]],
) -> None:
    """The executors record spent grants in PostgreSQL with a role that may only call the
    state functions; the one Job that creates them holds the administrator's DSN and
    grants exactly the role the component's roles.sql creates."""
    objs = rendered[POSTGRES_COMBINATION]
    executor = workload(objs, "executor")
    env = env_of(_main(executor))
    assert env["STOCKADE_EXECUTOR_STATE_DSN"]["valueFrom"]["secretKeyRef"] == {
        "name": "stockade-store-executor",
        "key": "dsn",
    }
    assert pod_labels(executor)[STORE_LABEL] == "postgresql"
    job = workload(objs, "executor-state-migrate")
    assert job["kind"] == "Job"
    container = _main(job)
    command = container["command"]
    assert command[:3] == ["stockade", "executor-state", "migrate"]
    role = command[command.index("--role") + 1]
    assert env_of(container)["STOCKADE_EXECUTOR_STATE_ADMIN_DSN"]["valueFrom"] == {
        "secretKeyRef": {"name": "stockade-store-executor-admin", "key": "dsn"}
    }
    # A finished Job is removed, so the next apply (a new image) runs it again.
    assert 0 < job["spec"]["ttlSecondsAfterFinished"] <= 3600
    # The role it grants is the one the postgres component creates, and it owns nothing.
    roles = (COMPONENTS / "postgres" / "roles.sql").read_text()
    assert f"CREATE ROLE {role} LOGIN" in roles
    assert f"OWNER {role};" not in roles


def test_dev_executors_keep_their_state_on_their_node(rendered: dict[str, list[Manifest]]) -> None:
    objs = rendered["dev"]
    assert "STOCKADE_EXECUTOR_STATE_DSN" not in env_of(_main(workload(objs, "executor")))
    assert not [w for w in workloads(objs) if w["kind"] == "Job"]
