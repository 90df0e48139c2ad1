"""A TypeScript team can generate a client from the shipped protos: buf (with the
repository's buf.yaml) and protoc-gen-es, both from npm, generate one module per proto,
and the TypeScript compiler accepts them. (Go needs buf's remote plugins or a Go
toolchain, neither reachable here; buf.gen.yaml documents it.)"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUF_VERSION = "1.75.0"
ES_VERSION = "2.17.0"


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    npm = shutil.which("npm")
    assert npm, "npm is needed (make lint installs buf with it too)"
    prefix = tmp_path_factory.mktemp("npm")
    subprocess.run(
        [
            npm,
            "install",
            "--silent",
            "--no-save",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(prefix),
            f"@bufbuild/buf@{BUF_VERSION}",
            f"@bufbuild/protoc-gen-es@{ES_VERSION}",
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return prefix / "node_modules" / ".bin"


def test_typescript_generates_and_compiles(tools: Path) -> None:
    # Generated into the npm project, so the compiler resolves @bufbuild/protobuf from
    # its node_modules as a TypeScript project depending on it would.
    project = tools.parent.parent
    out = project / "gen"
    template = {
        "version": "v2",
        "inputs": [{"directory": "protos"}],
        "plugins": [{"local": str(tools / "protoc-gen-es"), "out": str(out), "opt": "target=ts"}],
    }
    subprocess.run(
        [str(tools / "buf"), "generate", "--template", json.dumps(template)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    protos = sorted(p.stem for p in (ROOT / "protos" / "stockade" / "v1").glob("*.proto"))
    generated = sorted(p.name for p in (out / "stockade" / "v1").glob("*_pb.ts"))
    assert generated == [f"{name}_pb.ts" for name in protos]
    decision = (out / "stockade" / "v1" / "decision_service_pb.ts").read_text()
    assert "export const DecisionService" in decision and "DecideRequest" in decision
    # The generated code type-checks against the runtime protoc-gen-es pulled in.
    (project / "tsconfig.json").write_text(
        json.dumps(
            {
                "compilerOptions": {
                    "strict": True,
                    "noEmit": True,
                    "target": "es2022",
                    "module": "nodenext",
                    "moduleResolution": "nodenext",
                    "skipLibCheck": True,
                    "types": [],
                },
                "include": ["gen/**/*.ts"],
            }
        )
    )
    done = subprocess.run(
        [str(tools / "tsc"), "-p", str(project / "tsconfig.json")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
