"""Protected reads from the policy file (DEC-16): one source for every reading tool.

A policy DENY or ASK on reading a path — ``read_file(**/.env)`` or ``*(**/.env)`` — binds
every tool that can read it, the shell included. The decision service enforces the rule on
``read_file`` itself; the executor must also know it, to refuse ``cat .env``, to hide the
file from ``grep_files`` and ``glob_files`` and from the run-time masks. It reads the same
policy file(s) through this module, never patterns from its caller.

Which rules count: DENY and ASK rules whose tool is ``read_file`` or ``*`` (any tool) and
whose content is a path pattern. Their content is turned into an executor glob the way the
decision normalises a rule path (DEC-1 rev 2): ``./.env``, ``.env`` and the absolute path
of that file inside the working directory name one file; a pattern starting with ``**`` or
``/`` stays as written. No gRPC, no service imports.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stockade.errors import InvalidArgument

__all__ = ["READ_TOOLS", "ProtectedReads", "load_protected_reads", "protected_reads", "read_glob"]

READ_TOOLS = frozenset({"read_file", "*"})
"""Rule tools whose path content names a protected read."""

_PATTERN = re.compile(r"^\s*([A-Za-z0-9_.:\-*]+)\s*\((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class ProtectedReads:
    """Globs (executor syntax) nothing may read (deny) or only after a person agreed (ask)."""

    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()

    def merged(self, other: ProtectedReads) -> ProtectedReads:
        """Both sets, in order, without duplicates."""
        return ProtectedReads(
            tuple(dict.fromkeys((*self.deny, *other.deny))),
            tuple(dict.fromkeys((*self.ask, *other.ask))),
        )


def read_glob(content: str, cwd: str) -> str | None:
    """The executor glob for a rule's path content, or None when it is not a path pattern.

    ``**/x``, ``*.env`` and ``/abs/x`` stay as written (normalised); a relative path is
    made absolute under ``cwd`` (``./.env`` → ``/ws/.env``), with ``.`` and ``..`` folded.
    A pattern starting with ``*`` matches at any depth (the executor glob is unanchored),
    which is the strict reading of a DENY/ASK.
    """
    text = content.strip()
    if not text or "\0" in text:
        return None
    if text.startswith("~"):
        return None  # a home path: the decision's business, the executor has no home
    if text.startswith("*"):
        glob = text  # ``**/x`` and ``*.env``: any depth, as the executor's globs read them
    elif text.startswith("/"):
        glob = posixpath.normpath(text)
        if glob.startswith("//"):
            glob = "/" + glob.lstrip("/")
    else:
        glob = posixpath.normpath(posixpath.join(cwd, text))
    if glob.endswith("/"):
        glob = glob.rstrip("/") or "/"
    return glob


def protected_reads(rules: Iterable[tuple[str, str]], cwd: str) -> ProtectedReads:
    """The protected reads among ``(effect, pattern)`` rules (effect "deny"/"ask")."""
    deny: list[str] = []
    ask: list[str] = []
    for effect, pattern in rules:
        if effect not in ("deny", "ask"):
            continue
        m = _PATTERN.match(pattern)
        if m is None or m.group(1) not in READ_TOOLS:
            continue
        glob = read_glob(m.group(2), cwd)
        if glob is None:
            continue
        (deny if effect == "deny" else ask).append(glob)
    return ProtectedReads(tuple(dict.fromkeys(deny)), tuple(dict.fromkeys(ask)))


def _entries(perms: Mapping[str, Any], effect: str, origin: str) -> list[tuple[str, str]]:
    raw = perms.get(effect) or []
    if not isinstance(raw, list):
        raise InvalidArgument(f"{origin}: permissions.{effect} must be a list")
    out: list[tuple[str, str]] = []
    for entry in raw:
        if isinstance(entry, str):
            out.append((effect, entry))
        elif isinstance(entry, dict) and isinstance(entry.get("pattern"), str):
            out.append((effect, entry["pattern"]))
        else:
            raise InvalidArgument(f"{origin}: a permissions.{effect} entry must be a pattern")
    return out


def parse_policy_reads(text: str, fmt: str, cwd: str, origin: str = "policy") -> ProtectedReads:
    """The protected reads of one policy file's text (TOML or YAML)."""
    try:
        if fmt == "toml":
            data: Any = tomllib.loads(text)
        else:
            data = yaml.safe_load(text) or {}
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise InvalidArgument(f"{origin}: policy does not parse as {fmt}: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidArgument(f"{origin}: policy must be a table/mapping at the top level")
    perms = data.get("permissions") or {}
    if not isinstance(perms, dict):
        raise InvalidArgument(f"{origin}: [permissions] must be a table")
    rules = [*_entries(perms, "deny", origin), *_entries(perms, "ask", origin)]
    return protected_reads(rules, cwd)


def load_protected_reads(paths: Iterable[str | Path | None], cwd: str) -> ProtectedReads:
    """The protected reads of every given policy file, merged (None entries are skipped)."""
    out = ProtectedReads()
    for path in paths:
        if not path:
            continue
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidArgument(f"cannot read policy file {p}: {exc.strerror}") from exc
        fmt = "yaml" if p.suffix.lower() in (".yaml", ".yml") else "toml"
        out = out.merged(parse_policy_reads(text, fmt, cwd, str(p)))
    return out
