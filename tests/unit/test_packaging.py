"""The two distributions built from this repository: `stockade` (everything) and
`stockade-client` (clients + generated code + protos, no server dependencies). Both are
built with the real build backend and their contents and dependencies checked."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOS = sorted(p.name for p in (ROOT / "protos" / "stockade" / "v1").glob("*.proto"))
SERVER_ONLY_DEPS = {"aiosqlite", "tree-sitter", "tree-sitter-bash", "cryptography", "httpx"}
STDLIB = set(sys.stdlib_module_names)


def _build(project: Path, out: Path) -> zipfile.ZipFile:
    hatchling = Path(sys.executable).parent / "hatchling"
    subprocess.run(
        [str(hatchling), "build", "-t", "wheel", "-d", str(out)],
        cwd=project,
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheels")
    return {
        "stockade": _build(ROOT, out / "full"),
        "stockade-client": _build(ROOT / "clients", out / "client"),
    }


def _requires(wheel: zipfile.ZipFile) -> set[str]:
    [meta] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    lines = wheel.read(meta).decode().splitlines()
    return {
        line.split(":", 1)[1].strip().split(">")[0].split("=")[0].split("<")[0].strip().lower()
        for line in lines
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }


@pytest.mark.parametrize("dist", ["stockade", "stockade-client"])
def test_both_ship_the_protos_and_type_markers(
    wheels: dict[str, zipfile.ZipFile], dist: str
) -> None:
    names = set(wheels[dist].namelist())
    assert {f"stockade/v1/{p}" for p in PROTOS} <= names
    for marker in ("stockade/py.typed", "stockade/client/py.typed", "stockade/v1/py.typed"):
        assert marker in names
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]


def test_the_client_has_no_server_parts_or_dependencies(
    wheels: dict[str, zipfile.ZipFile],
) -> None:
    client = wheels["stockade-client"]
    names = client.namelist()
    for server_part in ("decision/", "executor/", "audit/", "server/", "agent/", "cli/", "papers/"):
        assert not [n for n in names if n.startswith(f"stockade/{server_part}")], server_part
    assert "stockade/client/base.py" in names and "stockade/v1/common_pb2.py" in names
    # Its users learn the error type from the package's own description (clients/README).
    [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
    description = client.read(meta).decode()
    assert "stockade.client.errors.ServiceError" in description
    assert "DeadlineExceededError" in description and "CHANGELOG" in description
    requires = _requires(client)
    assert requires and not requires & SERVER_ONLY_DEPS
    assert "stockade" not in requires
    full = _requires(wheels["stockade"])
    assert requires <= full  # the full distribution is a superset
    assert SERVER_ONLY_DEPS <= full


def test_every_import_in_the_client_is_satisfied(wheels: dict[str, zipfile.ZipFile]) -> None:
    """Each module the client wheel holds imports only the standard library, its declared
    dependencies, or stockade modules the wheel itself holds."""
    client = wheels["stockade-client"]
    names = set(client.namelist())
    provided = {"grpc", "google", "opentelemetry"}
    assert {"grpcio", "protobuf", "opentelemetry-api"} <= _requires(client)
    missing = []
    for name in sorted(n for n in names if n.endswith(".py")):
        tree = ast.parse(client.read(name))
        for node in ast.walk(tree):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                else []
            )
            for module in modules:
                top = module.split(".")[0]
                if top in STDLIB or top in provided:
                    continue
                if top == "stockade":
                    path = module.replace(".", "/")
                    if f"{path}.py" in names or any(n.startswith(f"{path}/") for n in names):
                        continue
                missing.append(f"{name}: {module}")
    assert missing == []
