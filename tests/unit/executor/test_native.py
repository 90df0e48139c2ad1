"""The compiled analysis (``make native``, mypyc) decides exactly as its Python source.

PERF-4a compiles the bash analysis and the path sandbox to C (scripts/build_native.py).
The suite runs whichever is built beside the sources (`make test` builds it); these tests
show (1) that what is imported is all of the build or none of it, from the current
sources, and (2) that a fresh interpreter made to prefer every ``.py`` over an extension
module gives the same verdict, reasons, paths and explanation as this process, over the
suite's own corpora of ordinary commands and attacks (ASCII and not).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from stockade.executor import native
from stockade.executor.bash import BashAnalyzer
from stockade.executor.paths import PathSandbox, Root
from tests.bench.bench_bash import TYPICAL
from tests.unit.executor.test_bash_analysis import ALL_CASES
from tests.unit.executor.test_bash_bypass_classes import (
    BRACE_ATTACKS,
    CHARACTER_ATTACKS,
    DATA_ATTACKS,
    ENVIRONMENT_ATTACKS,
)
from tests.unit.executor.test_bash_false_blocks import READ_ONLY

REPO = Path(__file__).resolve().parents[3]

CORPUS = list(
    dict.fromkeys(
        [
            *TYPICAL,
            *READ_ONLY,
            *(case.command for case in ALL_CASES),
            *CHARACTER_ATTACKS,
            *DATA_ATTACKS,
            *ENVIRONMENT_ATTACKS,
            *BRACE_ATTACKS,
            "cat ./ŝrc/ü.txt",  # not ASCII: parsed in the isolated child
        ]
    )
)


def _module_name(relative: str) -> str:
    return relative[: -len(".py")].replace("/", ".")


def summarize(workspace: str) -> list[list[object]]:
    """Every corpus command judged over a real workspace, as plain JSON-able data."""
    ws = Path(workspace)
    (ws / "src").mkdir(parents=True, exist_ok=True)
    (ws / "src" / "app.py").write_text("print('hi')\n")
    (ws / "README.md").write_text("readme\n")
    (ws / ".git" / "hooks").mkdir(parents=True, exist_ok=True)
    sandbox = PathSandbox([Root(str(ws), True)], str(ws))
    analyzer = BashAnalyzer(parse_cache=0)
    try:
        rows: list[list[object]] = []
        for command in CORPUS:
            result = asdict(analyzer.analyze(command, sandbox=sandbox))
            rows.append([command, json.loads(json.dumps(result, default=str))])
        return rows
    finally:
        analyzer.close()


# The child: FileFinder made to try sources before extension modules, so every module of
# NATIVE_MODULES loads from its .py (tree-sitter's binding, which has no .py, still loads).
_INTERPRETED = """
import importlib.machinery as m, json, sys
sys.path_hooks[:] = [h for h in sys.path_hooks if "FileFinder" not in getattr(h, "__name__", "")]
sys.path_hooks.append(m.FileFinder.path_hook(
    (m.SourceFileLoader, m.SOURCE_SUFFIXES),
    (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES),
    (m.ExtensionFileLoader, m.EXTENSION_SUFFIXES),
))
sys.path_importer_cache.clear()
from stockade.executor import native
from tests.unit.executor.test_native import summarize
loaded = [sys.modules[n[:-3].replace("/", ".")].__file__ for n in native.NATIVE_MODULES]
assert all(f.endswith(".py") for f in loaded), loaded
print(json.dumps(summarize(sys.argv[1])))
"""


def test_what_is_imported_is_the_whole_build_from_the_current_sources() -> None:
    built = native.compiled()
    assert built in ([], list(native.NATIVE_MODULES)), f"a partial build: {built}"
    assert native.stale() == [], "compiled modules older than their source: run `make native`"
    for relative in native.NATIVE_MODULES:
        module = importlib.import_module(_module_name(relative))
        assert module.__file__ is not None
        assert module.__file__.endswith(".py") == (not built), module.__file__


def test_a_changed_source_makes_its_build_stale(tmp_path: Path) -> None:
    """The guard the suite starts with: a build whose recorded digest no longer matches."""
    relative = native.NATIVE_MODULES[0]
    source = tmp_path / relative
    source.parent.mkdir(parents=True)
    source.write_text("x = 1\n")
    (source.parent / ("paths" + native.importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"")
    manifest = tmp_path / native.MANIFEST.relative_to(native.MANIFEST.parents[2])
    manifest.write_text(json.dumps({relative: native.source_digest(relative, tmp_path)}))
    assert native.compiled(tmp_path) == [relative]
    assert native.stale(tmp_path) == []
    source.write_text("x = 2\n")
    assert native.stale(tmp_path) == [relative]
    manifest.write_text("not json")
    assert native.stale(tmp_path) == [relative]


def test_the_compiled_analysis_decides_as_its_source(tmp_path: Path) -> None:
    assert len(CORPUS) > 400
    here = summarize(str(tmp_path / "here"))
    (tmp_path / "child").mkdir()
    out = subprocess.run(
        [sys.executable, "-c", _INTERPRETED, str(tmp_path / "child")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    child = json.loads(out.stdout)
    # The workspaces differ by name only; compare with it replaced.
    normal_here = json.loads(json.dumps(here).replace(str(tmp_path / "here"), "WS"))
    normal_child = json.loads(json.dumps(child).replace(str(tmp_path / "child"), "WS"))
    assert len(normal_here) == len(normal_child) == len(CORPUS)
    for mine, theirs in zip(normal_here, normal_child, strict=True):
        assert mine == theirs
