"""The console component: rendered on top of the prod overlay, every object validates
against the Kubernetes schemas, the pod is locked down like the others, its environment
is what the console's settings accept, and its NetworkPolicies let it reach the decision
and audit services only and let only the auth proxy reach it."""

from __future__ import annotations

import kubernetes_validate
import pytest

from stockade.console.settings import ConsoleSettings

from .conftest import (
    GRPC_PORTS,
    Manifest,
    env_of,
    main_container,
    pod_spec,
    workload,
)
from .test_network_policies import DNS, INTERNET, METADATA, STRANGER, Endpoint, Policies, _pod
from .test_render import K8S_VERSION
from .test_settings_wiring import _accepted_names

AUTH_PROXY = Endpoint(labels={"app.kubernetes.io/name": "auth-proxy"})


@pytest.fixture(scope="module")
def objs(console_rendered: list[Manifest]) -> list[Manifest]:
    """prod + the console component (conftest)."""
    return console_rendered


def test_every_object_validates(objs: list[Manifest]) -> None:
    failures = []
    for obj in objs:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {getattr(e, 'message', e)}")
    assert not failures, "\n".join(failures)
    assert all(
        o["metadata"].get("namespace") == "stockade" for o in objs if o["kind"] != "Namespace"
    )


def test_the_console_pod_is_locked_down(objs: list[Manifest]) -> None:
    console = workload(objs, "console")
    spec = pod_spec(console)
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    container = main_container(objs, "console")
    assert container["args"] == ["console"]
    assert container["image"] == "registry.example.com/stockade/stockade:0.1.0"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"]["memory"]


def test_the_console_environment_is_its_settings(objs: list[Manifest]) -> None:
    env = env_of(main_container(objs, "console"))
    accepted = _accepted_names(ConsoleSettings)
    for name in env:
        if name.startswith("STOCKADE_"):
            assert name in accepted, f"{name} is not a console setting"
    # mTLS towards the services, and the cookie key from a Secret, never inline.
    assert env["STOCKADE_CONSOLE_TLS_CERT_FILE"]["value"].startswith("/etc/stockade/tls/")
    assert "secretKeyRef" in env["STOCKADE_CONSOLE_COOKIE_SECRET"]["valueFrom"]
    assert "STOCKADE_CONSOLE_DECISION_ADMIN_TOKEN" not in env
    assert "STOCKADE_CONSOLE_LOGIN_TOKENS" not in env


def test_the_decision_service_trusts_the_console(objs: list[Manifest]) -> None:
    env = env_of(main_container(objs, "decision"))
    assert "console" in env["STOCKADE_DECISION_ADMIN_IDENTITIES"]["value"].split(",")
    assert env["STOCKADE_DECISION_DELEGATE_IDENTITIES"]["value"] == "mtls:console"


def test_the_console_reaches_decision_and_audit_only(objs: list[Manifest]) -> None:
    policies = Policies(objs)
    console = _pod(objs, "console")
    assert policies.connects(console, _pod(objs, "decision"), GRPC_PORTS["decision"])
    assert policies.connects(console, _pod(objs, "audit"), GRPC_PORTS["audit"])
    assert policies.connects(console, DNS, 53, "UDP")
    for service in ("executor", "agent", "papers"):
        assert not policies.connects(console, _pod(objs, service), GRPC_PORTS[service]), service
    for target, port in ((INTERNET, 443), (INTERNET, 80), (METADATA, 80)):
        assert not policies.connects(console, target, port), target
    # Only the auth proxy reaches the console, and only its HTTP port.
    assert policies.connects(AUTH_PROXY, console, 8470)
    assert not policies.connects(AUTH_PROXY, console, 22)
    proxy_elsewhere = Endpoint(labels={"app.kubernetes.io/name": "auth-proxy"}, namespace="x")
    for caller in (STRANGER, _pod(objs, "agent"), _pod(objs, "executor"), proxy_elsewhere):
        assert not policies.connects(caller, console, 8470), caller
    # The console's policy does not open decision or audit to anyone else.
    assert not policies.connects(STRANGER, _pod(objs, "decision"), GRPC_PORTS["decision"])
    assert not policies.connects(AUTH_PROXY, _pod(objs, "decision"), GRPC_PORTS["decision"])
