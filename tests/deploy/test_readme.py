"""deploy/README.md tells an operator which Secrets to create: those commands must create
exactly the Secrets the prod overlay mounts, with the keys it projects."""

from __future__ import annotations

import re

from .conftest import DEPLOY, POSTGRES_COMBINATION, Manifest, containers, pod_spec, workloads

README = DEPLOY / "README.md"


def _created_secrets(text: str) -> dict[str, set[str]]:
    """Secret name -> keys, from the README's `kubectl create secret generic` lines."""
    joined = text.replace("\\\n", " ")
    created: dict[str, set[str]] = {}
    for line in joined.splitlines():
        match = re.search(r"create secret generic (\S+)(.*)", line)
        if not match:
            continue
        names = [match.group(1)]
        if "$s" in names[0]:
            loop = re.search(r"for s in ([a-z ]+); do", joined)
            assert loop, "a templated secret name needs its for-loop"
            names = [names[0].replace("$s", s) for s in loop.group(1).split()]
        keys = set(re.findall(r"--from-(?:file|literal)=([\w.-]+)=", match.group(2)))
        for name in names:
            created[name] = keys
    return created


def _mounted_secrets(objs: list[Manifest]) -> dict[str, set[str]]:
    """Secret name -> keys the workloads read (projected items or secretKeyRef keys)."""
    used: dict[str, set[str]] = {}
    for obj in workloads(objs):
        for volume in pod_spec(obj).get("volumes", []):
            secret = volume.get("secret")
            if secret:
                keys = {i["key"] for i in secret.get("items", [])}
                used.setdefault(secret["secretName"], set()).update(keys)
        for container in containers(obj):
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    used.setdefault(ref["name"], set()).add(ref["key"])
    return used


def test_readme_creates_every_secret_prod_needs(
    rendered: dict[str, list[Manifest]], console_rendered: list[Manifest]
) -> None:
    created = _created_secrets(README.read_text())
    # prod, and what the opt-in console and postgres components add (their own README
    # sections).
    used = _mounted_secrets(rendered["prod"])
    for objs in (console_rendered, rendered[POSTGRES_COMBINATION]):
        for name, keys in _mounted_secrets(objs).items():
            used.setdefault(name, set()).update(keys)
    assert set(used) == set(created), set(used) ^ set(created)
    for name, keys in used.items():
        assert keys <= created[name], f"{name}: README does not create {keys - created[name]}"
    # TLS secrets are mounted whole: they must hold the three files the settings name.
    for name in (n for n in created if n.startswith("stockade-tls-")):
        assert created[name] == {"tls.crt", "tls.key", "ca.crt"}, name


def test_readme_devcerts_command_covers_every_tls_secret() -> None:
    text = README.read_text()
    match = re.search(r"python -m stockade\.devcerts --out \S+ --services ([a-z,]+)", text)
    assert match
    services = set(match.group(1).split(","))
    tls = {n.removeprefix("stockade-tls-") for n in _created_secrets(text) if "-tls-" in n}
    assert tls <= services
