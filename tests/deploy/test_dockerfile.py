"""Static checks of deploy/docker/Dockerfile and .dockerignore (no Docker daemon needed):
multi-stage on a base pinned by digest, the locked dependencies installed (hashes
checked) before the sources are copied, the wheel built in the builder, the bash analysis
compiled there (PERF-4a) with hashed build tools kept out of the runtime venv and the
build refused unless the installed analysis imports compiled, two runtime targets
(`service`, and `executor`, the only one with git and ripgrep) each with a non-root
numeric USER, no compilers or pip, the `stockade serve` entrypoint, and a build context
that carries the sources but never keys, venvs, git history or a dev build.
tests/deploy/test_image_native.py runs the builder's native step itself."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

import pytest

from .conftest import ROOT

DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
BUILD_TOOLS = {
    "gcc",
    "g++",
    "make",
    "build-essential",
    "clang",
    "cmake",
    "python3-dev",
    "libc6-dev",
    "pkg-config",
    "cargo",
    "rustc",
}


@dataclass
class Stage:
    """One FROM ... section: its base, alias and instructions (keyword, argument text)."""

    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [arg for key, arg in self.instructions if key == keyword]


def _logical_lines(text: str) -> list[str]:
    """Instructions with continuations joined and comment lines dropped (as BuildKit does)."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "dangling line continuation"
    return lines


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages of a Dockerfile."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = rest.split()
            alias = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), ""), parts[0])
            stages.append(Stage(base=base, alias=alias))
        elif not stages:
            if keyword == "ARG" and "=" in rest:
                name, _, value = rest.partition("=")
                global_args[name.strip()] = value.strip()
        else:
            stages[-1].instructions.append((keyword, rest.strip()))
    return global_args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text())[1]


def chain(stages: list[Stage], target: str | None = None) -> Stage:
    """The instructions a target runs, its ancestor stages' first (``FROM base AS x``)."""
    by_alias = {s.alias: s for s in stages if s.alias}
    stage = by_alias[target] if target else stages[-1]
    lineage = [stage]
    while lineage[0].base in by_alias:
        lineage.insert(0, by_alias[lineage[0].base])
    merged = Stage(base=lineage[0].base, alias=stage.alias)
    for part in lineage:
        merged.instructions.extend(part.instructions)
    return merged


def test_multi_stage_on_slim_python_311_pinned_by_digest(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    aliases = {s.alias for s in stages}
    for stage in stages:
        if stage.base in aliases:
            continue  # built on an earlier stage of this file
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?@sha256:[0-9a-f]{64}", stage.base), stage.base
    assert stages[0].alias == "builder"


def test_locked_dependencies_are_installed_before_the_sources_are_copied(
    stages: list[Stage],
) -> None:
    builder = stages[0]
    keys = [(k, a) for k, a in builder.instructions if k in ("COPY", "RUN")]
    lock_copy = next(i for i, (k, a) in enumerate(keys) if k == "COPY" and "requirements.lock" in a)
    lock_install = next(
        i for i, (k, a) in enumerate(keys) if k == "RUN" and "-r requirements.lock" in a
    )
    assert "--require-hashes" in keys[lock_install][1]
    sources = [i for i, (k, a) in enumerate(keys) if k == "COPY" and "services" in a]
    assert lock_copy < lock_install < min(sources)
    # The project wheel is installed without re-resolving dependencies.
    runs = " ".join(builder.args("RUN"))
    assert re.search(r"pip install --no-deps /wheels/stockade-", runs)


@pytest.mark.parametrize("target", ["service", "executor"])
def test_both_targets_exist_and_the_executor_is_the_default(
    stages: list[Stage], target: str
) -> None:
    assert target in {s.alias for s in stages}
    assert stages[-1].alias == "executor"


def test_git_and_ripgrep_are_only_in_the_executor_image(stages: list[Stage]) -> None:
    def installed(stage: Stage) -> set[str]:
        runs = " ".join(stage.args("RUN"))
        found: set[str] = set()
        for match in re.finditer(r"apt-get install ([^&;|]+)", runs):
            found |= {w for w in shlex.split(match.group(1)) if not w.startswith("-")}
        return found

    tools = {"git", "ripgrep", "procps"}
    assert tools <= installed(chain(stages, "executor"))
    assert not tools & installed(chain(stages, "service"))
    assert json.loads(chain(stages, "service").args("CMD")[-1]) != ["all"]


def test_builder_builds_the_project_wheel_without_cache(stages: list[Stage]) -> None:
    builder = stages[0]
    runs = " ".join(builder.args("RUN"))
    assert "pip wheel" in runs and " ." in runs
    assert "python -m venv /opt/stockade" in runs
    no_cache = "--no-cache-dir" in runs or any(
        "PIP_NO_CACHE_DIR=1" in env for env in builder.args("ENV")
    )
    assert no_cache, "pip must not leave a cache in the layers"


@pytest.mark.parametrize("target", ["service", "executor"])
def test_final_stage_has_no_build_tools_and_no_pip(stages: list[Stage], target: str) -> None:
    final = chain(stages, target)
    runs = " ".join(final.args("RUN"))
    installed: set[str] = set()
    for match in re.finditer(r"apt-get install ([^&;|]+)", runs):
        installed |= {w for w in shlex.split(match.group(1)) if not w.startswith("-")}
    assert installed, "expected the runtime tools to be installed explicitly"
    assert not installed & BUILD_TOOLS, installed & BUILD_TOOLS
    assert "--no-install-recommends" in runs
    assert "rm -rf /var/lib/apt/lists" in runs
    assert "pip install" not in runs
    # The base image's pip is removed too, so nothing can install code at run time.
    assert "pip uninstall --yes pip" in runs
    # Sources come only from the builder's venv, never the raw build context.
    copies = final.args("COPY")
    assert copies and all(c.startswith("--from=builder /opt/stockade") for c in copies), copies
    assert not final.args("ADD")


def _apt_installed(stage: Stage) -> set[str]:
    runs = " ".join(stage.args("RUN"))
    found: set[str] = set()
    for match in re.finditer(r"apt-get install ([^&;|]+)", runs):
        found |= {w for w in shlex.split(match.group(1)) if not w.startswith("-")}
    return found


def native_step(stages: list[Stage]) -> str:
    """The builder's RUN that compiles the installed analysis and proves it (PERF-4a)."""
    [step] = [run for run in stages[0].args("RUN") if "build_native.py" in run]
    return step


def test_the_c_compiler_and_build_tools_are_only_in_the_builder(stages: list[Stage]) -> None:
    builder = stages[0]
    assert {"gcc", "libc6-dev"} <= _apt_installed(builder)
    runs = builder.args("RUN")
    # mypy, setuptools and hatchling: from their own lock, every hash checked, wheels only,
    # into a venv of their own that no runtime stage copies (their COPYs are checked to take
    # /opt/stockade only).
    [tools] = [run for run in runs if "requirements-build.lock" in run]
    assert re.search(
        r"/opt/build-tools/bin/python -m pip install --require-hashes --only-binary=:all:"
        r"\s+-r requirements-build\.lock",
        tools,
    ), tools
    assert "python -m venv /opt/build-tools" in tools
    assert not [
        run for run in runs if re.search(r"/opt/stockade/bin/\S+ .*requirements-build", run)
    ]
    # The wheel is built by the locked hatchling, nothing fetched unpinned to build it.
    assert re.search(
        r"/opt/build-tools/bin/python -m pip wheel .*--no-build-isolation", " ".join(runs)
    )
    for target in ("service", "executor"):
        final = chain(stages, target)
        assert not {"gcc", "libc6-dev"} & _apt_installed(final)
        text = " ".join(final.args("RUN") + final.args("COPY") + final.args("ENV"))
        assert "build-tools" not in text and "mypy" not in text and "build_native" not in text


def test_the_builder_compiles_the_installed_analysis_and_proves_it(stages: list[Stage]) -> None:
    builder = stages[0]
    runs = builder.args("RUN")
    step = native_step(stages)
    # After the wheel is installed, and the last thing done to the venv the runtime copies.
    wheel = next(i for i, run in enumerate(runs) if "pip install --no-deps /wheels/" in run)
    assert runs.index(step) > wheel and runs.index(step) == len(runs) - 1
    build, _, proof = step.partition(" && ")
    build = build.strip()
    assert (
        build
        == "/opt/build-tools/bin/python scripts/build_native.py --into /opt/stockade/bin/python"
    )
    # The proof runs in the venv's own interpreter, isolated from /src, and exits non-zero
    # (failing the build) unless all of the list is compiled, none stale, the parser an
    # extension module, and the compiled analysis still judges.
    assert proof.startswith('/opt/stockade/bin/python -I -c "'), proof
    for condition in (
        "native.compiled() == list(native.NATIVE_MODULES)",
        "native.stale() == []",
        "parser.__file__.endswith('.so')",
        "all(f.endswith('.so') for f in files)",
        "verdicts == ['allow', 'deny']",
        "sys.exit(0 if ok else ",
    ):
        assert condition in proof, condition
    # One python -c and nothing after it that could hide its exit status.
    assert proof.endswith('"') and proof.count('"') == 2, proof
    assert "&&" not in proof and "||" not in proof and ";" not in proof.split('"')[0]
    # The script and its lock reach the build (COPY), before the step.
    copies = builder.args("COPY")
    assert "scripts/build_native.py ./scripts/" in copies
    assert "requirements-build.lock ./" in copies


@pytest.mark.parametrize("target", ["service", "executor"])
def test_final_stage_runs_as_a_fixed_non_root_user(stages: list[Stage], target: str) -> None:
    final = chain(stages, target)
    users = final.args("USER")
    assert users, "final stage has no USER"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0, "USER must be a numeric non-root uid"
    assert user == "10001", "the manifests' runAsUser is 10001"
    # USER comes after every RUN, so nothing later runs as root.
    keys = [k for k, _ in final.instructions]
    assert keys.index("USER") > max(i for i, k in enumerate(keys) if k == "RUN")


def test_entrypoint_is_stockade_serve(stages: list[Stage]) -> None:
    final = chain(stages)
    entrypoint = json.loads(final.args("ENTRYPOINT")[-1])
    assert entrypoint[-2:] == ["stockade", "serve"]
    # An init (tini) as PID 1 forwards SIGTERM and reaps orphaned command processes.
    assert entrypoint[0].endswith("tini") and entrypoint[1] == "--"
    cmd = json.loads(final.args("CMD")[-1])
    assert cmd == ["all"]
    env = " ".join(final.args("ENV"))
    assert "PATH=/opt/stockade/bin:$PATH" in env
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # read-only root filesystem


# --- .dockerignore ------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def excluded(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip().strip("/")
        regex = _pattern_regex(pattern)
        if any(regex.match(c) for c in candidates):
            verdict = not negate
    return verdict


@pytest.fixture(scope="module")
def ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


@pytest.mark.parametrize(
    "path",
    [
        ".git/config",
        ".venv/bin/python",
        "tests/unit/test_devcerts.py",
        "deploy/k8s/base/decision.yaml",
        ".stockade/state/audit.db",
        "certs/ca.key",
        "clients/stockade/leaked.key",
        "services/stockade/decision/dev.pem",
        "services/stockade/.env",
        "services/stockade/decision/__pycache__/engine.cpython-311.pyc",
        "bench-results.json",
        # Of the scripts, only the native build; of the locks, only the runtime and build ones.
        "scripts/check_lock.py",
        "requirements-dev.lock",
        "requirements-build.in",
        # A dev build (`make native`): the builder compiles its own.
        "services/stockade/executor/paths.cpython-311-x86_64-linux-gnu.so",
        "services/stockade_native__mypyc.cpython-311-x86_64-linux-gnu.so",
        "services/stockade/executor/native-manifest.json",
        "services/.mypy_cache/3.11/stockade/executor/paths.data.json",
        "build/native/c/__native_stockade_native.c",
    ],
)
def test_build_context_excludes(ignore_patterns: list[str], path: str) -> None:
    assert excluded(path, ignore_patterns), path


def test_build_context_keeps_what_the_dockerfile_copies(
    ignore_patterns: list[str], stages: list[Stage]
) -> None:
    sources: list[str] = []
    for stage in stages:
        for copy in stage.args("COPY"):
            if copy.startswith("--from"):
                continue
            sources += copy.split()[:-1]
    assert sources
    for source in sources:
        assert not excluded(source.rstrip("/"), ignore_patterns), source
    for path in (
        "clients/stockade/devcerts.py",
        "services/stockade/errors.py",
        "services/stockade/executor/native.py",
        "README.md",
        "requirements-build.lock",
        "scripts/build_native.py",
    ):
        assert not excluded(path, ignore_patterns), path


def test_the_allow_list_is_exactly_what_the_builder_copies(ignore_patterns: list[str]) -> None:
    assert {p for p in ignore_patterns if p.startswith("!")} == {
        "!pyproject.toml",
        "!requirements.lock",
        "!requirements-build.lock",
        "!scripts/build_native.py",
        "!protos/",
        "!README.md",
        "!clients/",
        "!services/",
    }


def test_ignore_evaluator_honours_order() -> None:
    assert excluded("a/b.txt", ["*"])
    assert not excluded("a/b.txt", ["*", "!a/"])
    assert excluded("a/b.key", ["*", "!a/", "**/*.key"])
    assert not excluded("a/b.key", ["**/*.key", "!a/b.key"])
