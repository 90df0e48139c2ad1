"""NetworkPolicies of the prod overlay, checked by evaluating them.

A small evaluator implements the NetworkPolicy semantics (a pod is isolated for a
direction once any policy selecting it names that direction; then a connection needs a
matching rule on both ends) and the tests ask it concrete questions: may the agent call
the executor? may the executor reach DNS, the collector or the internet? may an
unlabelled pod call the decision service?
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    DEPLOY,
    GRPC_PORTS,
    POSTGRES_COMBINATION,
    STOCKADE_SERVICES,
    Manifest,
    pod_labels,
    render,
    workload,
)

NAMESPACE = "stockade"


@dataclass(frozen=True)
class Endpoint:
    """A pod (labels in a namespace) or an address outside the cluster."""

    labels: dict[str, str] = field(default_factory=dict)
    namespace: str | None = NAMESPACE
    ip: str | None = None

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace} if self.namespace else {}


def _matches_selector(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_matches(peer: dict[str, Any], other: Endpoint) -> bool:
    if "ipBlock" in peer:
        if other.ip is None:
            return False
        address = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(e) for e in block.get("except", []))
    if other.namespace is None:
        return False
    if "namespaceSelector" in peer:
        if not _matches_selector(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != NAMESPACE:
        return False
    return _matches_selector(peer.get("podSelector", {}), other.labels)


def _port_matches(rule: dict[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    for entry in ports:
        assert isinstance(entry.get("port"), int), "named ports are not used in our policies"
        if entry.get("protocol", "TCP") == protocol and entry["port"] == port:
            return True
    return False


class Policies:
    """The NetworkPolicies of one rendered overlay."""

    def __init__(self, objs: list[Manifest]) -> None:
        self.items = [o for o in objs if o["kind"] == "NetworkPolicy"]

    def _selecting(self, pod: Endpoint, direction: str) -> list[Manifest]:
        if pod.namespace != NAMESPACE:
            return []
        return [
            p
            for p in self.items
            if direction in p["spec"].get("policyTypes", ["Ingress"])
            and _matches_selector(p["spec"]["podSelector"], pod.labels)
        ]

    def _allowed(self, pod: Endpoint, other: Endpoint, port: int, proto: str, way: str) -> bool:
        direction, rules_key, peers_key = (
            ("Ingress", "ingress", "from") if way == "in" else ("Egress", "egress", "to")
        )
        policies = self._selecting(pod, direction)
        if not policies:
            return True  # not isolated in this direction
        for policy in policies:
            for rule in policy["spec"].get(rules_key) or []:
                peers = rule.get(peers_key)
                if (not peers or any(_peer_matches(p, other) for p in peers)) and _port_matches(
                    rule, port, proto
                ):
                    return True
        return False

    def connects(self, src: Endpoint, dst: Endpoint, port: int, proto: str = "TCP") -> bool:
        """True when ``src`` may open a connection to ``dst:port``."""
        out_ok = self._allowed(src, dst, port, proto, "out")
        in_ok = dst.namespace is None or self._allowed(dst, src, port, proto, "in")
        return out_ok and in_ok


@pytest.fixture(scope="module")
def prod(rendered: dict[str, list[Manifest]]) -> list[Manifest]:
    return rendered["prod"]


@pytest.fixture(scope="module")
def policies(prod: list[Manifest]) -> Policies:
    return Policies(prod)


def _pod(objs: list[Manifest], name: str) -> Endpoint:
    return Endpoint(labels=pod_labels(workload(objs, name)))


DNS = Endpoint(labels={"k8s-app": "kube-dns"}, namespace="kube-system")
INTERNET = Endpoint(namespace=None, ip="203.0.113.10")
METADATA = Endpoint(namespace=None, ip="169.254.169.254")
CLUSTER_IP = Endpoint(namespace=None, ip="10.96.0.1")
ADMIN = Endpoint(labels={"stockade.dev/admin-caller": "true"})
STRANGER = Endpoint(labels={"app": "something-else"})
OTHER_NAMESPACE_AGENT = Endpoint(
    labels={"app.kubernetes.io/name": "agent", "app.kubernetes.io/part-of": "stockade"},
    namespace="intruder",
)


def test_default_deny_selects_every_pod(policies: Policies) -> None:
    deny = [p for p in policies.items if p["spec"]["podSelector"] == {}]
    assert any(
        set(p["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
        for p in deny
    )


def test_executor_is_reachable_only_from_the_agent(
    prod: list[Manifest], policies: Policies
) -> None:
    executor = _pod(prod, "executor")
    port = GRPC_PORTS["executor"]
    assert policies.connects(_pod(prod, "agent"), executor, port)
    callers = [
        *(_pod(prod, s) for s in STOCKADE_SERVICES if s not in ("agent", "executor")),
        _pod(prod, "otel-collector"),
        ADMIN,
        STRANGER,
        OTHER_NAMESPACE_AGENT,
    ]
    for caller in callers:
        assert not policies.connects(caller, executor, port), caller.labels
    # The agent may reach only the gRPC port, not anything else the pod might open.
    assert not policies.connects(_pod(prod, "agent"), executor, 22)


def test_executor_reaches_nothing_but_its_store(prod: list[Manifest], policies: Policies) -> None:
    """No collector, no internet, no other service: only, on the shared store (prod),
    PostgreSQL on 5432 and the cluster's DNS to find it."""
    executor = _pod(prod, "executor")
    on_store = pod_labels(workload(prod, "executor")).get("stockade.dev/store") == "postgresql"
    assert on_store
    targets = [
        (INTERNET, 443, "TCP"),
        (INTERNET, 80, "TCP"),
        (INTERNET, 5432, "TCP"),
        (INTERNET, 53, "UDP"),
        (METADATA, 80, "TCP"),
        (METADATA, 5432, "TCP"),
        (CLUSTER_IP, 443, "TCP"),
        (DNS, 5432, "TCP"),
        (_pod(prod, "otel-collector"), 4317, "TCP"),
        *((_pod(prod, s), GRPC_PORTS[s], "TCP") for s in STOCKADE_SERVICES if s != "executor"),
    ]
    for target, port, proto in targets:
        assert not policies.connects(executor, target, port, proto), (target, port)
    for target, port, proto in [(DNS, 53, "UDP"), (DNS, 53, "TCP"), (PRIVATE_DB, 5432, "TCP")]:
        assert policies.connects(executor, target, port, proto), (target, port)
    # The executor's own policy still says "no egress"; what it gets comes from the
    # store's policies, which select only pods labelled as on the store.
    own = next(p for p in policies.items if p["metadata"]["name"] == "executor")
    assert "Egress" in own["spec"]["policyTypes"] and not own["spec"].get("egress")
    unlabelled = Endpoint(labels={**executor.labels, "stockade.dev/store": "sqlite"})
    for target, port, proto in [(DNS, 53, "UDP"), (PRIVATE_DB, 5432, "TCP")]:
        assert not policies.connects(unlabelled, target, port, proto), (target, port)


@pytest.mark.parametrize("service", ["decision", "audit"])
def test_decision_and_audit_only_from_agent_and_admin(
    prod: list[Manifest], policies: Policies, service: str
) -> None:
    target = _pod(prod, service)
    port = GRPC_PORTS[service]
    assert policies.connects(_pod(prod, "agent"), target, port)
    assert policies.connects(ADMIN, target, port)
    # the decision service sends its decision records to the audit service, nothing else
    assert policies.connects(_pod(prod, "decision"), _pod(prod, "audit"), GRPC_PORTS["audit"])
    for other in ("executor", "agent", "papers"):
        assert not policies.connects(_pod(prod, "decision"), _pod(prod, other), GRPC_PORTS[other])
    for caller in (
        _pod(prod, "executor"),
        _pod(prod, "papers"),
        STRANGER,
        OTHER_NAMESPACE_AGENT,
        Endpoint(labels={"stockade.dev/admin-caller": "true"}, namespace="intruder"),
        Endpoint(labels={"stockade.dev/admin-caller": "yes"}),
    ):
        assert not policies.connects(caller, target, port), caller


def test_agent_egress(prod: list[Manifest], policies: Policies) -> None:
    agent = _pod(prod, "agent")
    for service in ("decision", "executor", "audit", "papers"):
        assert policies.connects(agent, _pod(prod, service), GRPC_PORTS[service]), service
    assert policies.connects(agent, DNS, 53, "UDP")
    assert policies.connects(agent, INTERNET, 443)  # the LLM endpoint
    # ... but not the cloud metadata service, other cluster addresses or plain HTTP.
    assert not policies.connects(agent, METADATA, 80)
    assert not policies.connects(agent, METADATA, 443)
    assert not policies.connects(agent, CLUSTER_IP, 443)
    assert not policies.connects(agent, INTERNET, 80)


def test_everything_but_the_executor_reaches_the_collector(
    prod: list[Manifest], policies: Policies
) -> None:
    collector = _pod(prod, "otel-collector")
    for service in STOCKADE_SERVICES:
        allowed = policies.connects(_pod(prod, service), collector, 4317)
        assert allowed is (service != "executor"), service
        if service != "executor":
            assert policies.connects(_pod(prod, service), DNS, 53, "UDP"), service
    assert not policies.connects(collector, _pod(prod, "decision"), GRPC_PORTS["decision"])


def test_papers_cannot_reach_cluster_services(prod: list[Manifest], policies: Policies) -> None:
    papers = _pod(prod, "papers")
    assert policies.connects(_pod(prod, "agent"), papers, GRPC_PORTS["papers"])
    assert not policies.connects(STRANGER, papers, GRPC_PORTS["papers"])
    for service in ("decision", "executor", "audit", "agent"):
        assert not policies.connects(papers, _pod(prod, service), GRPC_PORTS[service]), service


def test_evaluator_sees_a_missing_default_deny(prod: list[Manifest]) -> None:
    """Without the deny-all and the policies that select the executor, the stranger gets
    through and the executor gets out: the evaluator is not vacuous."""
    stripped = Policies(
        [
            o
            for o in prod
            if not (
                o["kind"] == "NetworkPolicy"
                and o["metadata"]["name"]
                in ("default-deny-all", "executor", "store-egress", "executor-store-dns")
            )
        ]
    )
    assert stripped.connects(STRANGER, _pod(prod, "executor"), GRPC_PORTS["executor"])
    assert stripped.connects(_pod(prod, "executor"), INTERNET, 443)
    # ... and without the store's DNS policy, the executor on the store resolves nothing.
    no_dns = Policies([o for o in prod if o["metadata"]["name"] != "executor-store-dns"])
    assert not no_dns.connects(_pod(prod, "executor"), DNS, 53, "UDP")


def test_dev_has_no_network_policies(rendered: dict[str, list[Manifest]]) -> None:
    """Dev clusters often lack an enforcing CNI; policies there would give false comfort."""
    assert Policies(rendered["dev"]).items == []


def test_executor_telemetry_opt_in_opens_only_the_collector_and_dns(tmp_path: Path) -> None:
    """The opt-in component (not in any overlay) adds exactly two destinations."""
    k8s = DEPLOY / "k8s"
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"namespace: {NAMESPACE}\n"
        f"resources: [{os.path.relpath(k8s / 'overlays' / 'prod', tmp_path)}]\n"
        f"components: [{os.path.relpath(k8s / 'components' / 'executor-telemetry', tmp_path)}]\n"
    )
    objs = render(tmp_path)
    policies = Policies(objs)
    executor = _pod(objs, "executor")
    assert policies.connects(executor, _pod(objs, "otel-collector"), 4317)
    assert policies.connects(executor, DNS, 53, "UDP")
    assert not policies.connects(executor, _pod(objs, "otel-collector"), 4318)
    assert not policies.connects(executor, INTERNET, 443)
    assert not policies.connects(executor, METADATA, 80)
    for service in ("decision", "audit", "agent", "papers"):
        assert not policies.connects(executor, _pod(objs, service), GRPC_PORTS[service])
    # Ingress is unchanged: still only the agent.
    assert not policies.connects(STRANGER, executor, GRPC_PORTS["executor"])


# --- PostgreSQL (components/scale-out, components/postgres) ------------------------------

POSTGRES_PORT = 5432
PRIVATE_DB = Endpoint(namespace=None, ip="10.20.30.40")
"""A managed database at a private address in the cluster's network."""
STORE_LABEL = "stockade.dev/store"


def _on_postgresql(objs: list[Manifest]) -> set[str]:
    """The Stockade services whose pods are on the PostgreSQL store."""
    return {
        s
        for s in STOCKADE_SERVICES
        if pod_labels(workload(objs, s)).get(STORE_LABEL) == "postgresql"
    }


@pytest.fixture(scope="module")
def with_postgres(rendered: dict[str, list[Manifest]]) -> list[Manifest]:
    return rendered[POSTGRES_COMBINATION]


def test_only_the_stateful_services_reach_postgres(with_postgres: list[Manifest]) -> None:
    objs = with_postgres
    policies = Policies(objs)
    server = _pod(objs, "postgres")
    on_pg = _on_postgresql(objs)
    assert {"decision", "audit", "executor"} <= on_pg
    # The executor-state migration Job reaches it too (it prepares the executor's schema).
    assert policies.connects(_pod(objs, "executor-state-migrate"), server, POSTGRES_PORT)
    for service in STOCKADE_SERVICES:
        allowed = policies.connects(_pod(objs, service), server, POSTGRES_PORT)
        assert allowed is (service in on_pg), service
        # Only the database port, nothing else the pod might open.
        assert not policies.connects(_pod(objs, service), server, 22), service
    audit_labels = pod_labels(workload(objs, "audit"))
    for caller in (
        _pod(objs, "otel-collector"),
        ADMIN,
        STRANGER,
        OTHER_NAMESPACE_AGENT,
        # A pod in another namespace wearing the audit pod's labels.
        Endpoint(labels=audit_labels, namespace="intruder"),
    ):
        assert not policies.connects(caller, server, POSTGRES_PORT), caller
    # The server's own gate admits exactly the three services that may keep state there,
    # whatever their egress says.
    allowed = ("decision", "audit", "executor", "executor-state-migrate")
    for name in (*allowed, "agent", "papers", "console", "postgres", "otel-collector"):
        peer = Endpoint(
            labels={"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "stockade"}
        )
        admitted = policies._allowed(server, peer, POSTGRES_PORT, "TCP", "in")
        assert admitted is (name in allowed), name
    # ... and a pod that is not part of Stockade does not pass by its name alone.
    lookalike = Endpoint(labels={"app.kubernetes.io/name": "audit"})
    assert not policies._allowed(server, lookalike, POSTGRES_PORT, "TCP", "in")


def test_postgres_sends_nothing(with_postgres: list[Manifest]) -> None:
    objs = with_postgres
    policies = Policies(objs)
    server = _pod(objs, "postgres")
    targets = [
        (DNS, 53, "UDP"),
        (INTERNET, 443, "TCP"),
        (METADATA, 80, "TCP"),
        (CLUSTER_IP, 443, "TCP"),
        (PRIVATE_DB, POSTGRES_PORT, "TCP"),
        (_pod(objs, "otel-collector"), 4317, "TCP"),
        *((_pod(objs, s), GRPC_PORTS[s], "TCP") for s in STOCKADE_SERVICES),
    ]
    for target, port, proto in targets:
        assert not policies.connects(server, target, port, proto), (target, port)


def test_store_egress_is_the_database_port_at_private_addresses(prod: list[Manifest]) -> None:
    """Without the postgres component (a managed database): the pods on the store reach
    TCP 5432 at a private address and nothing new besides; the others not even that."""
    policies = Policies(prod)
    on_pg = _on_postgresql(prod)
    assert on_pg
    for service in STOCKADE_SERVICES:
        pod = _pod(prod, service)
        assert policies.connects(pod, PRIVATE_DB, POSTGRES_PORT) is (service in on_pg), service
    for service in on_pg:
        pod = _pod(prod, service)
        assert not policies.connects(pod, PRIVATE_DB, 5433)
        assert not policies.connects(pod, PRIVATE_DB, 22)
        assert not policies.connects(pod, INTERNET, POSTGRES_PORT)
        assert not policies.connects(pod, METADATA, POSTGRES_PORT)
        assert not policies.connects(pod, INTERNET, 443)
