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

The production image compiles the *installed* package instead (deploy/docker/Dockerfile,
builder stage): ``--into /opt/stockade/bin/python`` compiles the sources in that
interpreter's site-packages, in place, with mypy reading that environment's
dependencies, and the C sources, objects and mypy cache in a throwaway directory. The
build tools (mypy, setuptools, a C compiler) run from another environment, so none of
them is installed where the service runs.

    python scripts/build_native.py --into /opt/stockade/bin/python
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "services"
BUILD = ROOT / "build" / "native"
GROUP = "stockade_native"  # the shared library: services/stockade_native__mypyc.*.so


def _native(root: Path = SERVICES) -> ModuleType:
    """stockade/executor/native.py under ``root`` by file, without importing the package
    (which would load the very extension modules this replaces). Loaded from ``root``, its
    MANIFEST, compiled() and stale() all speak of the tree under ``root``."""
    spec = importlib.util.spec_from_file_location(
        "_stockade_native_list", root / "stockade" / "executor" / "native.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clean(native: ModuleType, root: Path = SERVICES) -> int:
    """Remove every extension module of the list, the shared library and the manifest."""
    removed = 0
    for relative in (*native.NATIVE_MODULES, *native.C_SOURCES):
        for path in native._extensions(relative, root):
            path.unlink()
            removed += 1
    for path in root.glob(f"{GROUP}__mypyc*.so"):
        path.unlink()
        removed += 1
    native.MANIFEST.unlink(missing_ok=True)
    return removed


def build(
    native: ModuleType,
    root: Path = SERVICES,
    build_dir: Path = BUILD,
    mypy_args: tuple[str, ...] = (),
    debug_level: str = "1",
) -> None:
    """Compile the list under ``root``; the manifest is written last, from the sources
    compiled. ``mypy_args`` go to mypy before the modules (``--into`` passes the target
    interpreter and a cache directory); ``debug_level`` is mypyc's -g level."""
    from mypyc.build import mypycify
    from setuptools import Extension, setup

    clean(native, root)  # a failed build leaves plain Python, never a stale mix
    sources = (*native.NATIVE_MODULES, *native.C_SOURCES)
    digests = {relative: native.source_digest(relative, root) for relative in sources}
    c_modules = [
        Extension(
            relative[: -len(".c")].replace("/", "."),
            [relative],
            extra_compile_args=["-O2", f"-g{debug_level}"],
        )
        for relative in native.C_SOURCES
    ]
    os.chdir(root)  # build_ext --inplace writes each module beside its source from here
    setup(
        name=GROUP,
        packages=[],
        ext_modules=mypycify(
            [
                "--config-file",
                str(ROOT / "pyproject.toml"),
                *mypy_args,
                *native.NATIVE_MODULES,
            ],
            opt_level="3",
            multi_file=True,
            target_dir=str(build_dir / "c"),
            group_name=GROUP,
            debug_level=debug_level,
        )
        + c_modules,
        script_args=[
            "--quiet",
            "build_ext",
            "--inplace",
            "--parallel",
            str(os.cpu_count() or 1),
            "--build-temp",
            str(build_dir / "obj"),
            "--build-lib",
            str(build_dir / "lib"),
        ],
    )
    if {relative: native.source_digest(relative, root) for relative in sources} != digests:
        clean(native, root)
        raise SystemExit("a source changed during the build: run `make native` again")
    native.MANIFEST.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    missing = [
        relative for relative in native.NATIVE_MODULES if relative not in native.compiled(root)
    ] + [relative for relative in native.C_SOURCES if not native._extensions(relative, root)]
    if missing:
        clean(native, root)
        raise SystemExit(f"the build made no extension module for: {', '.join(missing)}")


def site_packages(python: str) -> Path:
    """The folder holding the installed ``stockade/`` of another interpreter (a venv's
    python): its purelib, asked of that interpreter, and checked to hold native.py."""
    out = subprocess.run(
        [python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    root = Path(out).resolve()
    if not (root / "stockade" / "executor" / "native.py").is_file():
        raise SystemExit(f"{python}: no installed stockade under {root} (install the wheel first)")
    return root


def built_files(native: ModuleType, root: Path) -> list[Path]:
    """What a build adds under ``root``: the extension modules, the shared library and
    the manifest."""
    files = [
        path
        for relative in (*native.NATIVE_MODULES, *native.C_SOURCES)
        for path in native._extensions(relative, root)
    ]
    return [*files, *sorted(root.glob(f"{GROUP}__mypyc*.so")), native.MANIFEST]


def record(native: ModuleType, root: Path) -> Path:
    """Add the built files to the installed distribution's RECORD (with their SHA-256 and
    size, as a wheel install writes them), so package inventories (``pip show -f``, image
    scanners' SBOMs) attribute them to stockade rather than to nothing."""
    [dist_info] = sorted(root.glob("stockade-*.dist-info"))
    path = dist_info / "RECORD"
    added = {}
    for file in built_files(native, root):
        data = file.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        added[file.relative_to(root).as_posix()] = [
            file.relative_to(root).as_posix(),
            f"sha256={digest}",
            str(len(data)),
        ]
    rows = [row for row in csv.reader(io.StringIO(path.read_text())) if row and row[0] not in added]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([*rows, *added.values()])
    path.write_text(out.getvalue())
    return path


def build_into(python: str) -> Path:
    """Compile the stockade installed for ``python`` (see the module docstring)."""
    root = site_packages(python)
    native = _native(root)
    with tempfile.TemporaryDirectory(prefix="stockade-native-") as scratch:
        build_dir = Path(scratch)
        build(
            native,
            root,
            build_dir,
            # mypy resolves the dependencies (tree-sitter, ...) and stockade itself in the
            # target environment; its cache stays out of site-packages.
            ("--python-executable", python, "--cache-dir", str(build_dir / "mypy-cache")),
            # -g0: the same optimised code, without the megabytes of DWARF nobody reads in
            # production (mypyc's own -g1 comes after CFLAGS, so it is set here).
            debug_level="0",
        )
    record(native, root)
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove the build instead")
    parser.add_argument(
        "--into",
        metavar="PYTHON",
        help="compile the stockade installed for this interpreter (the image's venv), in place",
    )
    args = parser.parse_args()
    if args.into:
        if args.clean:
            parser.error("--clean works on the source tree only")
        root = build_into(args.into)
        print(f"compiled {len(_native(root).NATIVE_MODULES)} installed modules under {root}")
        return 0
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
