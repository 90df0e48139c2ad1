"""Which modules of the bash analysis run compiled, and whether they match their source.

``make native`` (scripts/build_native.py) compiles the modules below to C with mypyc for
PERF-4a (SPEC §9): the same type-checked source, about 1.5–2× faster. The extension
modules sit beside their sources, where an editable install imports them first, and a
manifest records the SHA-256 of each source compiled. A module whose source changed since
it was compiled would run old code: :func:`stale` names them (the test suite refuses to
start with any; ``make native`` rebuilds them).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
from pathlib import Path

__all__ = ["C_SOURCES", "MANIFEST", "NATIVE_MODULES", "compiled", "source_digest", "stale"]

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent  # the folder holding stockade/

# Relative to the folder that holds `stockade/` (services/).
NATIVE_MODULES: tuple[str, ...] = (
    "stockade/executor/paths.py",
    "stockade/executor/globs.py",
    "stockade/executor/bash/analyzer.py",
    "stockade/executor/bash/parser.py",
    "stockade/executor/bash/walker.py",
    "stockade/executor/bash/lists.py",
    "stockade/executor/bash/options.py",
    "stockade/executor/bash/programs.py",
    "stockade/executor/bash/findings.py",
    "stockade/executor/bash/explain.py",
    "stockade/executor/bash/braces.py",
    "stockade/executor/bash/globsyntax.py",
    "stockade/executor/bash/patterns.py",
    "stockade/executor/bash/filevars.py",
    "stockade/executor/bash/judges/archives.py",
    "stockade/executor/bash/judges/awk.py",
    "stockade/executor/bash/judges/find.py",
    "stockade/executor/bash/judges/git.py",
    "stockade/executor/bash/judges/interpreters.py",
    "stockade/executor/bash/judges/readers.py",
    "stockade/executor/bash/judges/sed.py",
    "stockade/executor/bash/judges/variables.py",
    "stockade/executor/bash/judges/writes.py",
)

# Hand-written C extension modules built beside them (the same folder layout): a system
# call that ctypes makes slowly (executor/openat2.py keeps the ctypes version as fallback).
C_SOURCES: tuple[str, ...] = ("stockade/executor/_openat2.c",)

MANIFEST = _PACKAGE_ROOT / "stockade" / "executor" / "native-manifest.json"


def source_digest(relative: str, root: Path = _PACKAGE_ROOT) -> str:
    """SHA-256 of one module's source, as the manifest records it."""
    return hashlib.sha256((root / relative).read_bytes()).hexdigest()


def _extensions(relative: str, root: Path) -> list[Path]:
    source = root / relative
    stem = source.stem
    return [
        source.with_name(stem + suffix)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if source.with_name(stem + suffix).exists()
    ]


def compiled(root: Path = _PACKAGE_ROOT) -> list[str]:
    """The modules of :data:`NATIVE_MODULES` that have an extension module beside them."""
    return [relative for relative in NATIVE_MODULES if _extensions(relative, root)]


def stale(root: Path = _PACKAGE_ROOT) -> list[str]:
    """Modules whose extension module was not built from their current source (or whose
    build recorded no digest): importing them would run other code than the source says."""
    present = compiled(root) + [relative for relative in C_SOURCES if _extensions(relative, root)]
    if not present:
        return []
    manifest = root / MANIFEST.relative_to(_PACKAGE_ROOT)
    try:
        recorded = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return present
    if not isinstance(recorded, dict):
        return present
    return [
        relative for relative in present if recorded.get(relative) != source_digest(relative, root)
    ]
