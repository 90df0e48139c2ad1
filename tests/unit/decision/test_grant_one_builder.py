"""The signed grant bytes are built one way (#13 item 4): ``contract.grant.claims_payload``,
called by the decision service's signer only, and read back by the executor through
``contract.grant.parse_claims`` only. A second builder (a copy of the claims format in a
service) would let the two sides drift; this test fails when one appears."""

from __future__ import annotations

import ast
from pathlib import Path

import stockade

CLAIM_KEYS = {"args", "cid", "exp", "insp", "kid", "nonce", "settle", "sid", "tool"}
"""The claims' field names (contract.grant's format)."""


def _sources() -> list[Path]:
    out: list[Path] = []
    for root in stockade.__path__:
        out.extend(p for p in Path(root).rglob("*.py") if "/v1/" not in str(p))
    return out


def _calls(tree: ast.AST, name: str) -> int:
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            n += called == name
    return n


def test_only_the_signer_builds_and_only_the_verifier_parses_grant_bytes() -> None:
    builders: dict[str, int] = {}
    parsers: dict[str, int] = {}
    dict_literals: list[str] = []
    for path in _sources():
        rel = path.as_posix().split("stockade/", 1)[-1]
        tree = ast.parse(path.read_text(), str(path))
        if (n := _calls(tree, "claims_payload")) and rel != "contract/grant.py":
            builders[rel] = n
        if (n := _calls(tree, "parse_claims")) and rel != "contract/grant.py":
            parsers[rel] = n
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if len(keys & CLAIM_KEYS) >= 5 and rel != "contract/grant.py":
                    dict_literals.append(rel)
    assert builders == {"decision/grants.py": 1}
    assert parsers == {"executor/grants.py": 1}
    assert dict_literals == [], f"a second copy of the claims format: {dict_literals}"
