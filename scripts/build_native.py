"""Compile the bash analysis and the path sandbox to C with mypyc (``make native``).

PERF-4a (SPEC §9): the analysis walks tree-sitter's tree and judges every word in Python;
compiled by mypyc, the same type-checked source runs about 1.5–2× faster. The modules
stay plain Python (mypy strict): without a build they import as Python, with the same
behaviour (a test compares the two). The list is ``NATIVE_MODULES`` in
services/stockade/executor/native.py; extension modules are written beside their sources
(an editable install imports them first) with a manifest of the sources' digests, which
the test suite checks before it starts.

    python scripts/build_native.py          # build (replaces an earlier build)
    python scripts/build_native.py --clean  # remove the build: everything runs as Python
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "services"
BUILD = ROOT / "build" / "native"
GROUP = "stockade_native"  # the shared library: services/stockade_native__mypyc.*.so


def _native() -> ModuleType:
    """stockade/executor/native.py by file, without importing the package (which would
    load the very extension modules this replaces)."""
    spec = importlib.util.spec_from_file_location(
        "_stockade_native_list", SERVICES / "stockade" / "executor" / "native.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clean(native: ModuleType) -> int:
    """Remove every extension module of the list, the shared library and the manifest."""
    removed = 0
    for relative in native.NATIVE_MODULES:
        for path in native._extensions(relative, SERVICES):
            path.unlink()
            removed += 1
    for path in SERVICES.glob(f"{GROUP}__mypyc*.so"):
        path.unlink()
        removed += 1
    native.MANIFEST.unlink(missing_ok=True)
    return removed


def build(native: ModuleType) -> None:
    """Compile the list; the manifest is written last, from the sources compiled."""
    from mypyc.build import mypycify
    from setuptools import setup

    clean(native)  # a failed build leaves plain Python, never a stale mix
    digests = {
        relative: native.source_digest(relative, SERVICES) for relative in native.NATIVE_MODULES
    }
    os.chdir(SERVICES)  # build_ext --inplace writes each module beside its source from here
    setup(
        name=GROUP,
        packages=[],
        ext_modules=mypycify(
            ["--config-file", str(ROOT / "pyproject.toml"), *native.NATIVE_MODULES],
            opt_level="3",
            multi_file=True,
            target_dir=str(BUILD / "c"),
            group_name=GROUP,
        ),
        script_args=[
            "--quiet",
            "build_ext",
            "--inplace",
            "--parallel",
            str(os.cpu_count() or 1),
            "--build-temp",
            str(BUILD / "obj"),
            "--build-lib",
            str(BUILD / "lib"),
        ],
    )
    if {
        relative: native.source_digest(relative, SERVICES) for relative in native.NATIVE_MODULES
    } != digests:
        clean(native)
        raise SystemExit("a source changed during the build: run `make native` again")
    native.MANIFEST.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    missing = [
        relative for relative in native.NATIVE_MODULES if relative not in native.compiled(SERVICES)
    ]
    if missing:
        clean(native)
        raise SystemExit(f"mypyc built no extension module for: {', '.join(missing)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the build instead")
    args = parser.parse_args()
    native = _native()
    if args.clean:
        print(f"removed {clean(native)} compiled files: the analysis runs as Python")
        return 0
    # mypy reads its paths relative to where it runs; the build runs from services/.
    os.environ["MYPYPATH"] = os.pathsep.join([str(ROOT / "clients"), str(SERVICES)])
    build(native)
    manifest = native.MANIFEST.relative_to(ROOT)
    print(f"compiled {len(native.NATIVE_MODULES)} modules with mypyc (manifest {manifest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
