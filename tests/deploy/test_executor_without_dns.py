"""deploy/README's recipe for an executor on the shared store with no DNS at all (section 6):
the overlay patch it prints removes ``executor-store-dns`` and nothing else, so the
executor reaches the database by IP on 5432 and resolves nothing. (That the stores verify
such a server by the IP SAN of its certificate is tested live in
tests/integration/test_pg_tls.py.)"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .conftest import DEPLOY, render
from .test_network_policies import DNS, INTERNET, NAMESPACE, PRIVATE_DB, Policies, _pod

README = DEPLOY / "README.md"


def _readme_patch() -> str:
    """The YAML block that follows 'remove the DNS policy in your overlay'."""
    text = README.read_text()
    match = re.search(
        r"remove the DNS policy in your overlay:\n\n(?P<indent> *)```yaml\n(?P<body>.*?)\n *```",
        text,
        re.S,
    )
    assert match, "deploy/README.md no longer shows the patch that removes executor-store-dns"
    indent = len(match.group("indent"))
    return "\n".join(line[indent:] for line in match.group("body").splitlines())


def test_the_readme_patch_leaves_the_executor_no_dns_but_its_database(tmp_path: Path) -> None:
    prod = DEPLOY / "k8s" / "overlays" / "prod"
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"namespace: {NAMESPACE}\n"
        f"resources: [{os.path.relpath(prod, tmp_path)}]\n" + _readme_patch() + "\n"
    )
    before = render(prod)
    after = render(tmp_path)
    names = lambda objs: {(o["kind"], o["metadata"]["name"]) for o in objs}  # noqa: E731
    assert names(before) - names(after) == {("NetworkPolicy", "executor-store-dns")}
    assert names(after) - names(before) == set()
    executor = _pod(after, "executor")
    # The recipe's point: no name resolution at all, the database still reachable by IP.
    assert Policies(before).connects(executor, DNS, 53, "UDP")
    policies = Policies(after)
    for proto in ("UDP", "TCP"):
        assert not policies.connects(executor, DNS, 53, proto)
    assert policies.connects(executor, PRIVATE_DB, 5432)
    assert not policies.connects(executor, INTERNET, 443)
    # The other services keep their DNS.
    assert policies.connects(_pod(after, "decision"), DNS, 53, "UDP")
