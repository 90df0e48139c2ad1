"""Every pod that logs in to PostgreSQL can verify the server the way deploy/README's DSNs
say (``sslmode=verify-full&sslrootcert=/etc/stockade/tls/ca.crt``): the CA file its DSN
names is mounted in it. Without it the store refuses to open (a missing root certificate
fails closed, tests/integration/test_pg_tls.py), so a pod lacking the mount would never
start: the executor-state migration Job once did."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from .conftest import DEPLOY, POSTGRES_COMBINATION, Manifest, containers, pod_spec, workloads

README = DEPLOY / "README.md"


def _readme_rootcert() -> str:
    """The ``sslrootcert`` of the DSNs deploy/README tells operators to write."""
    match = re.search(
        r'^TLS="sslmode=verify-full&sslrootcert=(?P<path>[^"&]+)"$', README.read_text(), re.M
    )
    assert match, "deploy/README.md no longer shows the DSNs' TLS parameters"
    return match.group("path")


def _store_dsn_env(container: Manifest) -> list[str]:
    """The container's variables holding a store DSN (from a ``stockade-store-*`` Secret)."""
    names = []
    for entry in container.get("env", []):
        ref: dict[str, Any] = entry.get("valueFrom", {}).get("secretKeyRef", {})
        if entry["name"].endswith("_DSN") and str(ref.get("name", "")).startswith(
            "stockade-store-"
        ):
            names.append(entry["name"])
    return names


def _provides(volume: Manifest, filename: str) -> bool:
    """Whether a Secret volume puts ``filename`` (a key of the Secret) in its folder."""
    secret = volume.get("secret")
    if secret is None:
        return False
    items = secret.get("items")
    return items is None or any(i["key"] == filename and i["path"] == filename for i in items)


def test_every_pod_with_a_store_dsn_has_the_ca_its_dsn_names(
    rendered: dict[str, list[Manifest]],
) -> None:
    rootcert = _readme_rootcert()
    folder, filename = posixpath.split(rootcert)
    checked = set()
    for overlay in ("prod", POSTGRES_COMBINATION):
        for obj in workloads(rendered[overlay]):
            volumes = {v["name"]: v for v in pod_spec(obj).get("volumes", [])}
            for container in containers(obj):
                if not _store_dsn_env(container):
                    continue
                where = f"{overlay}: {obj['kind']}/{obj['metadata']['name']}"
                mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == folder]
                assert mounts, f"{where} reads a store DSN but has nothing at {folder}"
                assert _provides(volumes[mounts[0]["name"]], filename), f"{where}: no {filename}"
                checked.add(obj["metadata"]["name"])
    # The services on the store and the migration Job were all looked at.
    assert {"decision", "audit", "executor", "executor-state-migrate"} <= checked


def test_the_migration_job_gets_the_ca_and_no_key(rendered: dict[str, list[Manifest]]) -> None:
    """The Job holds the administrator's DSN: it gets the CA certificate, not the
    executors' private key from the same Secret."""
    job = next(
        o for o in workloads(rendered["prod"]) if o["metadata"]["name"] == "executor-state-migrate"
    )
    secrets = [v["secret"] for v in pod_spec(job)["volumes"] if "secret" in v]
    assert secrets, "the Job mounts no Secret"
    for secret in secrets:
        assert [i["key"] for i in secret.get("items", [{"key": "<all>"}])] == ["ca.crt"], secret
