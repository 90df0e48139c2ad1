"""Regenerate (or check) the Python code generated from ``protos/``.

``python -m stockade.protogen --out clients`` writes ``*_pb2.py``, ``*_pb2_grpc.py`` and
their ``.pyi`` stubs under ``clients/stockade/v1``. ``--check`` generates into a
temporary folder and fails when the committed files differ, so the test suite notices
a proto edited without ``make proto``.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
PACKAGE = Path("stockade") / "v1"


def generate(out: Path) -> None:
    """Run protoc (from grpcio-tools) with the python, grpc and mypy plugins into ``out``."""
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / PACKAGE).glob("*.proto"))
    env = dict(os.environ)
    # protoc finds the mypy plugins on PATH; they live beside this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTOS}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *sources,
    ]
    done = subprocess.run(cmd, cwd=PROTOS, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"protoc failed:\n{done.stderr}")


def generated_files(base: Path) -> dict[str, Path]:
    """Map each generated file's name to its path under ``base``."""
    folder = base / PACKAGE
    return {p.name: p for p in folder.iterdir() if p.suffix in {".py", ".pyi"} and "_pb2" in p.name}


def check(committed_root: Path = ROOT / "clients") -> list[str]:
    """Return the names of generated files under ``committed_root`` that differ from a
    fresh generation (missing, extra or changed)."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = generated_files(Path(tmp))
        committed = generated_files(committed_root) if (committed_root / PACKAGE).is_dir() else {}
        problems = [f"missing: {n}" for n in sorted(fresh.keys() - committed.keys())]
        problems += [f"stale extra: {n}" for n in sorted(committed.keys() - fresh.keys())]
        for name in sorted(fresh.keys() & committed.keys()):
            if not filecmp.cmp(fresh[name], committed[name], shallow=False):
                problems.append(f"differs: {name}")
        return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="output root (normally clients/)")
    group.add_argument("--check", action="store_true", help="fail if generated code is stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for p in problems:
            print(f"generated code out of date: {p}", file=sys.stderr)
        if problems:
            print("run `make proto` and commit the result", file=sys.stderr)
            return 1
        print("generated code is up to date")
        return 0
    generate(args.out.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
