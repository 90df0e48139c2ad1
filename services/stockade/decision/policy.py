"""Policy sources (DEC-7): policy files (TOML or YAML), environment variables, hot reload.

A policy file looks like::

    mode = "default"
    [permissions]
    deny  = ["run_bash(rm *)", "read_file(**/.env)"]
    ask   = ["file_write"]
    allow = ["run_bash(git status)", "read_file"]
    [limits]
    denial_max_consecutive = 3
    denial_max_total = 20
    approval_timeout_seconds = 120

A rule entry is a pattern string or a table ``{pattern = "...", reason = "..."}``.
``[tools.NAME] read_only = true`` declares a tool beyond the seed's table (a ToolProvider's),
so the implicit default ALLOW applies to it (an undeclared tool is ASK, DEC-3 rev 2); only
the managed file may declare tools (a project file's ``[tools]`` are ignored).
The environment adds ``AGENT_PERMISSIONS_DENY|ALLOW|ASK`` (comma-separated patterns),
``AGENT_PERMISSION_MODE`` and ``AGENT_DENIAL_MAX_CONSECUTIVE|TOTAL``. ``PolicyStore``
keeps the last good policy when a reload fails, and says why.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stockade.contract.tools import SEED_TOOLS, Interrupt, Location, ToolTraits
from stockade.decision.engine import CompiledPolicy
from stockade.decision.modes import Mode, parse_mode
from stockade.decision.rules import Effect, Rule, RuleIndex, Source
from stockade.errors import InvalidArgument, StockadeError

log = logging.getLogger(__name__)

ENV_RULE_VARS: Mapping[Effect, str] = {
    Effect.DENY: "AGENT_PERMISSIONS_DENY",
    Effect.ASK: "AGENT_PERMISSIONS_ASK",
    Effect.ALLOW: "AGENT_PERMISSIONS_ALLOW",
}
ENV_MODE_VAR = "AGENT_PERMISSION_MODE"
ENV_LIMIT_VARS: Mapping[str, str] = {
    "denial_max_consecutive": "AGENT_DENIAL_MAX_CONSECUTIVE",
    "denial_max_total": "AGENT_DENIAL_MAX_TOTAL",
}
_TOP_KEYS = frozenset({"mode", "permissions", "limits", "tools"})
_TOOL_KEYS = frozenset({"read_only"})
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")
_LIMIT_KEYS = frozenset({"denial_max_consecutive", "denial_max_total", "approval_timeout_seconds"})


@dataclass(frozen=True)
class PolicyDoc:
    """One parsed policy source before compilation."""

    rules: tuple[Rule, ...] = ()
    mode: Mode | None = None
    limits: Mapping[str, float] = field(default_factory=dict)
    tools: Mapping[str, ToolTraits] = field(default_factory=dict)
    """Tools this policy declares (``[tools.NAME]``) beyond the seed's table (DEC-3 rev 2)."""


def split_patterns(text: str) -> list[str]:
    """Split a comma-separated pattern list, keeping commas inside parentheses."""
    out: list[str] = []
    depth = 0
    buf: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            out.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
    out.append("".join(buf).strip())
    return [p for p in out if p]


def parse_policy_text(
    text: str, fmt: str = "toml", *, source: Source = Source.MANAGED
) -> PolicyDoc:
    """Parse policy text; raise ``InvalidArgument`` (or ``InvalidPattern``) saying what is wrong."""
    fmt = (fmt or "toml").lower()
    try:
        if fmt == "toml":
            data: Any = tomllib.loads(text)
        elif fmt in ("yaml", "yml"):
            data = yaml.safe_load(text) or {}
        else:
            raise InvalidArgument(f"unknown policy format {fmt!r}; expected toml or yaml")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise InvalidArgument(f"policy does not parse as {fmt}: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidArgument("policy must be a table/mapping at the top level")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise InvalidArgument(f"unknown policy keys: {', '.join(sorted(unknown))}")
    mode = parse_mode(str(data["mode"])) if data.get("mode") else None
    perms = data.get("permissions") or {}
    if not isinstance(perms, dict):
        raise InvalidArgument("[permissions] must be a table")
    bad = set(perms) - {e.value for e in Effect}
    if bad:
        raise InvalidArgument(f"unknown [permissions] keys: {', '.join(sorted(bad))}")
    rules: list[Rule] = []
    for effect in (Effect.DENY, Effect.ASK, Effect.ALLOW):
        entries = perms.get(effect.value) or []
        if not isinstance(entries, list):
            raise InvalidArgument(f"permissions.{effect.value} must be a list")
        rules.extend(_rule_entry(e, effect, source) for e in entries)
    limits = data.get("limits") or {}
    if not isinstance(limits, dict):
        raise InvalidArgument("[limits] must be a table")
    bad = set(limits) - _LIMIT_KEYS
    if bad:
        raise InvalidArgument(f"unknown [limits] keys: {', '.join(sorted(bad))}")
    checked: dict[str, float] = {}
    for key, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise InvalidArgument(f"limits.{key} must be a positive number, got {value!r}")
        checked[key] = float(value)
    # Compile every pattern now so a bad one is reported with the file, not at first use.
    RuleIndex(rules)
    return PolicyDoc(
        rules=tuple(rules), mode=mode, limits=checked, tools=_declared_tools(data.get("tools"))
    )


def _declared_tools(raw: object) -> dict[str, ToolTraits]:
    """``[tools.NAME] read_only = true``: tools a deployment adds (a ToolProvider's), so the
    implicit default ALLOW (P8) and plan mode know them. The seed's tools are fixed."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidArgument("[tools] must be a table of tool tables")
    out: dict[str, ToolTraits] = {}
    for name, spec in raw.items():
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise InvalidArgument(f"tools: {name!r} is not a tool name")
        if name in SEED_TOOLS:
            raise InvalidArgument(
                f"tools.{name}: a built-in tool's traits are fixed (stockade.contract.tools)"
            )
        if not isinstance(spec, dict):
            raise InvalidArgument(f"tools.{name} must be a table")
        bad = set(spec) - _TOOL_KEYS
        if bad:
            raise InvalidArgument(f"unknown tools.{name} keys: {', '.join(sorted(bad))}")
        read_only = spec.get("read_only", False)
        if not isinstance(read_only, bool):
            raise InvalidArgument(f"tools.{name}.read_only must be true or false")
        out[name] = ToolTraits(name, read_only, read_only, Interrupt.BLOCK, Location.REMOTE)
    return out


def _rule_entry(entry: object, effect: Effect, source: Source) -> Rule:
    if isinstance(entry, str):
        return Rule(effect, entry.strip(), source)
    if isinstance(entry, dict) and isinstance(entry.get("pattern"), str):
        reason = entry.get("reason", entry.get("message", ""))
        return Rule(effect, entry["pattern"].strip(), source, str(reason or ""))
    raise InvalidArgument(
        f"permissions.{effect.value}: each entry must be a pattern string or "
        f"{{pattern, reason}}, got {entry!r}"
    )


def policy_format(path: Path) -> str:
    """``yaml`` for .yaml/.yml files, else ``toml``."""
    return "yaml" if path.suffix.lower() in (".yaml", ".yml") else "toml"


def env_policy(environ: Mapping[str, str]) -> PolicyDoc:
    """The ENV source: rule lists, mode and denial limits from the seed's variables."""
    rules: list[Rule] = []
    for effect in (Effect.DENY, Effect.ASK, Effect.ALLOW):
        for pattern in split_patterns(environ.get(ENV_RULE_VARS[effect], "")):
            rules.append(Rule(effect, pattern, Source.ENV))
    mode_text = environ.get(ENV_MODE_VAR, "").strip()
    limits: dict[str, float] = {}
    for key, var in ENV_LIMIT_VARS.items():
        raw = environ.get(var, "").strip()
        if raw:
            try:
                value = int(raw)
            except ValueError as exc:
                raise InvalidArgument(f"{var} must be a positive integer, got {raw!r}") from exc
            if value <= 0:
                raise InvalidArgument(f"{var} must be a positive integer, got {raw!r}")
            limits[key] = float(value)
    RuleIndex(rules)
    return PolicyDoc(
        rules=tuple(rules), mode=parse_mode(mode_text) if mode_text else None, limits=limits
    )


def compile_policy(
    *docs: PolicyDoc,
    cwd: str = "/",
    mode_override: Mode | None = None,
    origin: str = "",
) -> CompiledPolicy:
    """Merge sources in order (rules concatenate; later modes/limits win) and compile."""
    rules: list[Rule] = []
    mode = Mode.DEFAULT
    limits: dict[str, float] = {}
    tools: dict[str, ToolTraits] = dict(SEED_TOOLS)
    for doc in docs:
        rules.extend(doc.rules)
        if doc.mode is not None:
            mode = doc.mode
        limits.update(doc.limits)
        tools.update(doc.tools)
    if mode_override is not None:
        mode = mode_override
    index = RuleIndex(rules, cwd=cwd)
    index.build()  # pattern sets compiled at load: no first call pays, bad ones fail here
    return CompiledPolicy(
        index=index,
        mode=mode,
        version=policy_version(rules, mode, limits, tools),
        denial_max_consecutive=int(limits.get("denial_max_consecutive", 3)),
        denial_max_total=int(limits.get("denial_max_total", 20)),
        approval_timeout_seconds=limits.get("approval_timeout_seconds", 120.0),
        cwd=cwd,
        origin=origin,
        tools=tools,
    )


def policy_version(
    rules: list[Rule],
    mode: Mode,
    limits: Mapping[str, float],
    tools: Mapping[str, ToolTraits] | None = None,
) -> str:
    """A short, stable hash of the compiled policy (DEC-13)."""
    doc: dict[str, Any] = {
        "mode": mode.value,
        "limits": dict(sorted(limits.items())),
        "rules": [[r.effect.value, r.pattern, r.source.value, r.reason] for r in rules],
    }
    extra = sorted(
        [name, t.read_only] for name, t in (tools or {}).items() if name not in SEED_TOOLS
    )
    if extra:
        doc["tools"] = extra  # only when declared, so older versions keep their hash
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def rule_lists_doc(
    deny: list[str],
    ask: list[str],
    allow: list[str],
    *,
    limits: Mapping[str, float | None] | None = None,
) -> PolicyDoc:
    """The ENV source from already-split rule lists (as the service's settings hold them)."""
    rules = [
        Rule(effect, p.strip(), Source.ENV)
        for effect, patterns in ((Effect.DENY, deny), (Effect.ASK, ask), (Effect.ALLOW, allow))
        for p in patterns
        if p.strip()
    ]
    RuleIndex(rules)
    kept = {k: float(v) for k, v in (limits or {}).items() if v is not None}
    return PolicyDoc(rules=tuple(rules), limits=kept)


EnvSource = PolicyDoc | Mapping[str, str] | None
"""The environment part of a policy: a ready ``PolicyDoc``, raw variables, or os.environ."""


def _env_doc(env: EnvSource) -> PolicyDoc:
    if isinstance(env, PolicyDoc):
        return env
    return env_policy(os.environ if env is None else env)


def _read_doc(path: Path, source: Source) -> PolicyDoc:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read policy file {path}: {exc.strerror}") from exc
    try:
        return parse_policy_text(text, policy_format(path), source=source)
    except StockadeError as exc:
        exc.message = f"{path}: {exc.message}"
        exc.args = (exc.message,)
        raise


def load_policy(
    path: str | Path | None,
    environ: EnvSource = None,
    *,
    cwd: str = "/",
    mode_override: Mode | None = None,
    project_path: str | Path | None = None,
) -> CompiledPolicy:
    """Load the managed policy file, the project file (if any) and the environment.

    Rules keep that order (MANAGED, PROJECT, ENV). Mode and limits: the environment wins,
    then the managed file, then the project file.
    """
    docs: list[PolicyDoc] = []
    origins: list[str] = []
    if path:
        docs.append(_read_doc(Path(path), Source.MANAGED))
        origins.append(str(path))
    if project_path:
        project = _read_doc(Path(project_path), Source.PROJECT)
        managed = docs[0] if docs else PolicyDoc()
        # The managed file's mode and limits win over the project's (an admin's policy is
        # not loosened by a project); the environment still wins over both.
        docs.append(
            PolicyDoc(
                rules=project.rules,
                mode=project.mode if managed.mode is None else None,
                limits={k: v for k, v in project.limits.items() if k not in managed.limits},
            )
        )
        origins.append(str(project_path))
    docs.append(_env_doc(environ))
    origin = " + ".join([*origins, "environment"])
    return compile_policy(*docs, cwd=cwd, mode_override=mode_override, origin=origin)


@dataclass(frozen=True)
class ReloadResult:
    """What a reload did."""

    changed: bool
    version: str
    error: str = ""


class PolicyStore:
    """Holds the current policy; reloads it on change or on demand, keeping the last good one."""

    def __init__(
        self,
        path: str | Path | None,
        environ: EnvSource = None,
        *,
        cwd: str = "/",
        mode_override: Mode | None = None,
        project_path: str | Path | None = None,
    ) -> None:
        self.path = Path(path) if path else None
        self.project_path = Path(project_path) if project_path else None
        self._environ = _env_doc(environ)
        self._cwd = cwd
        self._mode_override = mode_override
        self._fingerprint = self._stat()
        self.current: CompiledPolicy = self._load()
        self.last_error = ""
        _warn_lint(self.current)

    def _load(self) -> CompiledPolicy:
        return load_policy(
            self.path,
            self._environ,
            cwd=self._cwd,
            mode_override=self._mode_override,
            project_path=self.project_path,
        )

    def _stat(self) -> tuple[tuple[int, int] | None, ...]:
        out: list[tuple[int, int] | None] = []
        for path in (self.path, self.project_path):
            try:
                st = path.stat() if path is not None else None
            except OSError:
                st = None
            out.append(None if st is None else (st.st_mtime_ns, st.st_size))
        return tuple(out)

    def reload(self) -> ReloadResult:
        """Load the files again; on failure keep the current policy and record why."""
        self._fingerprint = self._stat()
        try:
            fresh = self._load()
        except StockadeError as exc:
            self.last_error = exc.message
            log.warning(
                "policy reload failed, keeping version %s: %s", self.current.version, exc.message
            )
            return ReloadResult(False, self.current.version, exc.message)
        self.last_error = ""
        changed = fresh.version != self.current.version
        if changed:
            log.info("policy reloaded: %s -> %s", self.current.version, fresh.version)
            self.current = fresh
            _warn_lint(fresh)
        return ReloadResult(changed, fresh.version)

    def reload_if_changed(self) -> ReloadResult | None:
        """Reload when a file's modification time or size changed; else None."""
        if (self.path is None and self.project_path is None) or self._stat() == self._fingerprint:
            return None
        return self.reload()

    async def watch(self, interval_s: float = 1.0) -> None:
        """Poll the file for changes until cancelled (no inotify dependency needed)."""
        while True:
            await asyncio.sleep(interval_s)
            self.reload_if_changed()


def _warn_lint(policy: CompiledPolicy) -> None:
    from stockade.decision.lint import lint_rules  # lint imports rules only; avoid a cycle

    findings = lint_rules(policy.rules)
    for finding in findings[:20]:
        log.warning("policy rule %s never takes effect: %s", finding.rule.pattern, finding.reason)
    if len(findings) > 20:
        log.warning("%d more shadowed rules; run `stockade policy lint`", len(findings) - 20)
