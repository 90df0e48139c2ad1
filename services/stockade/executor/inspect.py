"""Inspect: the executor's tool-level judgement of a call (SPEC EXE-13).

Pure and fast: no file is opened, no command runs; paths are resolved (``lstat`` only) and
bash is parsed. The result feeds the decision service (DEC-3 P1 / P6):

* a path the sandbox refuses, or a bash command the analysis denies → DENY, bypass-immune;
* a write (file_write, file_edit) → ASK, not immune: an ALLOW rule or acceptEdits settles it;
* a bash command with side effects → ASK, immune when the analysis says so;
* plus whether the path lies inside the working directory (acceptEdits), whether the call
  is read-only (plan mode), a risk level and a one-sentence explanation (DEC-10).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from stockade.contract.tools import EXECUTOR_TOOLS
from stockade.errors import InvalidArgument, UnknownTool
from stockade.executor.bash import BashAnalysis, BashAnalyzer, analyze
from stockade.executor.paths import PathSandbox, is_protected_write
from stockade.executor.reach import bash_reach_rules, can_reach
from stockade.executor.tools.glob import split_glob

__all__ = [
    "EXECUTOR_TOOLS",
    "Inspection",
    "Risk",
    "ToolRule",
    "inspect_call",
    "parses_in_child",
]

Risk = Literal["low", "medium", "high"]


@dataclass(frozen=True)
class ToolRule:
    """A tool-level rule for the decision service (source TOOL)."""

    effect: Literal["deny", "ask"]
    """DENY or ASK."""
    reason: str
    """Why, in plain words."""
    bypass_immune: bool
    """Neither an ALLOW rule nor bypass mode can settle it."""


@dataclass(frozen=True)
class Inspection:
    """The executor's findings for one call."""

    tool_name: str
    """The inspected tool."""
    rules: tuple[ToolRule, ...]
    """Tool-level DENY / ASK rules (empty: nothing to object)."""
    inside_working_dir: bool
    """The call's path (or bash working dir) lies inside the working directory."""
    read_only: bool
    """The call has no side effects."""
    risk: Risk
    """How risky the call is."""
    explanation: str
    """One sentence saying what the call does."""
    analysis: BashAnalysis | None = None
    """The bash analysis (run_bash only)."""
    paths: tuple[str, ...] = field(default_factory=tuple)
    """Canonical paths the call names (as far as they could be resolved)."""

    @property
    def denied(self) -> bool:
        """Whether a tool-level DENY is present."""
        return any(rule.effect == "deny" for rule in self.rules)

    @property
    def verdict(self) -> Literal["allow", "ask", "deny"]:
        """The tool-level verdict on its own (before any policy)."""
        if self.denied:
            return "deny"
        return "ask" if self.rules else "allow"


def _is_within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def _path_arg(args: Mapping[str, Any], name: str, *, required: bool) -> str | None:
    value = args.get(name)
    if value is None or value == "":
        if required:
            raise InvalidArgument(f"argument {name!r} is required", argument=name)
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"argument {name!r} must be a string", argument=name)
    return value


def _refused(tool: str, reason: str, resolved: str, inside: bool = False) -> Inspection:
    return Inspection(
        tool_name=tool,
        rules=(ToolRule("deny", reason, True),),
        inside_working_dir=inside,
        read_only=tool in ("read_file", "glob_files", "grep_files"),
        risk="high",
        explanation=f"Refused by the path sandbox: {reason}.",
        paths=(resolved,) if resolved else (),
    )


def _asked_read(tool: str, resolved: str, ask_read_globs: Sequence[str]) -> ToolRule | None:
    """A bypass-immune ASK when the read can touch a path the policy asks about (DEC-16)."""
    if not ask_read_globs or tool == "glob_files":
        return None  # a listing shows names, not contents
    glob = is_protected_write(resolved, ask_read_globs)
    if glob is None and tool == "grep_files" and os.path.isdir(resolved):
        glob = next((g for g in ask_read_globs if can_reach(resolved, g)), None)
    if glob is None:
        return None
    return ToolRule(
        "ask", f"reading {resolved} may touch {glob!r}, which the policy asks about", True
    )


def _inspect_read(
    tool: str,
    args: Mapping[str, Any],
    sandbox: PathSandbox,
    denied_read_globs: Sequence[str],
    ask_read_globs: Sequence[str] = (),
) -> Inspection:
    if tool == "read_file":
        raw = _path_arg(args, "file_path", required=True)
        assert raw is not None
        what = ("Reads ", "")
    elif tool == "grep_files":
        raw = _path_arg(args, "path", required=False) or sandbox.cwd
        pattern = args.get("pattern", "")
        # The model's pattern is text, never a format string (`x{2}` is a regex).
        what = ("Searches ", f" for the pattern {pattern!r}")
    else:  # glob_files: the pattern's literal folder is the path that is checked (EXE-5)
        pattern = _path_arg(args, "pattern", required=True)
        assert pattern is not None
        base_arg = _path_arg(args, "path", required=False)
        literal, rest = split_glob(pattern)
        if ".." in rest.split("/"):
            return _refused(tool, "glob patterns with a '..' component are refused", "")
        if pattern.startswith("/"):
            raw = literal
        elif literal:
            raw = f"{base_arg}/{literal}" if base_arg else literal
        else:
            raw = base_arg or sandbox.cwd
        what = (f"Lists files matching {pattern!r} under ", "")
    decision = sandbox.check(raw)
    if not decision.allowed:
        return _refused(tool, decision.reason, decision.resolved)
    glob = is_protected_write(decision.resolved, denied_read_globs) if tool == "read_file" else None
    if glob is not None:
        reason = f"reading {decision.resolved} is denied by policy ({glob!r})"
        return _refused(tool, reason, decision.resolved)
    asked = _asked_read(tool, decision.resolved, ask_read_globs)
    return Inspection(
        tool_name=tool,
        rules=(asked,) if asked is not None else (),
        inside_working_dir=sandbox.inside_cwd(decision.resolved),
        read_only=True,
        risk="low",
        explanation=f"{what[0]}{decision.resolved}{what[1]}.",
        paths=(decision.resolved,),
    )


def _inspect_write(tool: str, args: Mapping[str, Any], sandbox: PathSandbox) -> Inspection:
    raw = _path_arg(args, "file_path", required=True)
    assert raw is not None
    decision = sandbox.check(raw, write=True)
    inside = bool(decision.resolved) and sandbox.inside_cwd(decision.resolved)
    if not decision.allowed:
        return _refused(tool, decision.reason, decision.resolved, inside)
    if tool == "file_write":
        content = args.get("content")
        size = len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else 0
        explanation = f"Writes {size} bytes to {decision.resolved}."
    else:
        count = "every occurrence of" if args.get("replace_all") else "one occurrence of"
        explanation = f"Edits {decision.resolved}: replaces {count} a text."
    return Inspection(
        tool_name=tool,
        rules=(ToolRule("ask", f"{tool} modifies {decision.resolved}", False),),
        inside_working_dir=inside,
        read_only=False,
        risk="medium",
        explanation=explanation,
        paths=(decision.resolved,),
    )


def _inspect_bash(
    args: Mapping[str, Any],
    sandbox: PathSandbox,
    *,
    network_enabled: bool,
    denied_read_globs: Sequence[str],
    ask_read_globs: Sequence[str] = (),
    analyzer: BashAnalyzer | None = None,
) -> Inspection:
    command = args.get("command")
    if not isinstance(command, str):
        raise InvalidArgument("argument 'command' must be a string", argument="command")
    cwd = sandbox.cwd
    working_dir = _path_arg(args, "working_dir", required=False) or cwd
    wd = sandbox.check(working_dir)
    if not wd.allowed:
        return _refused("run_bash", f"working_dir: {wd.reason}", wd.resolved)
    sandbox = sandbox.with_cwd(wd.resolved)
    analysis = (analyzer.analyze if analyzer is not None else analyze)(
        command,
        sandbox=sandbox,
        network_enabled=network_enabled,
        denied_read_globs=tuple(denied_read_globs) or sandbox.denied_read_globs,
    )
    rules: tuple[ToolRule, ...] = ()
    reason = "; ".join(analysis.reasons) or analysis.explanation
    if analysis.verdict == "deny":
        rules = (ToolRule("deny", reason, True),)
    else:
        if analysis.verdict == "ask":
            rules = (ToolRule("ask", reason, analysis.bypass_immune),)
        # Protected reads the analysis cannot see by name (DEC-16): asked-about paths and
        # recursive reads that can reach a protected path.
        rules += tuple(
            ToolRule("ask", why, immune)
            for why, immune in bash_reach_rules(
                analysis,
                cwd=sandbox.cwd,
                deny=tuple(denied_read_globs) or sandbox.denied_read_globs,
                ask=ask_read_globs,
            )
        )
    return Inspection(
        tool_name="run_bash",
        rules=rules,
        inside_working_dir=_is_within(wd.resolved, cwd),
        read_only=analysis.read_only,
        risk=analysis.risk,
        explanation=analysis.explanation,
        analysis=analysis,
        paths=(wd.resolved,),
    )


def inspect_call(
    tool_name: str,
    args: Mapping[str, Any],
    *,
    sandbox: PathSandbox,
    network_enabled: bool = False,
    denied_read_globs: Sequence[str] = (),
    ask_read_globs: Sequence[str] = (),
    analyzer: BashAnalyzer | None = None,
) -> Inspection:
    """Judge one call of an executor tool; raises UnknownTool for any other tool and
    InvalidArgument when the protected argument is missing or not a string.

    ``denied_read_globs`` default to the sandbox's; ``ask_read_globs`` are the paths the
    policy asks about (DEC-16): reading one is a bypass-immune ASK.
    """
    denied_read_globs = tuple(denied_read_globs) or sandbox.denied_read_globs
    if tool_name in ("read_file", "glob_files", "grep_files"):
        return _inspect_read(tool_name, args, sandbox, denied_read_globs, ask_read_globs)
    if tool_name in ("file_write", "file_edit"):
        return _inspect_write(tool_name, args, sandbox)
    if tool_name == "run_bash":
        return _inspect_bash(
            args,
            sandbox,
            network_enabled=network_enabled,
            denied_read_globs=denied_read_globs,
            ask_read_globs=ask_read_globs,
            analyzer=analyzer,
        )
    raise UnknownTool(f"the executor has no tool {tool_name!r}", tool=tool_name)


def parses_in_child(
    tool_name: str, args: Mapping[str, Any], denied_read_globs: Sequence[str] = ()
) -> bool:
    """Whether the event loop should inspect this call in a thread: a bash command that
    waits for the isolated child parser (not ASCII) or that may read a repository's
    object store under protected reads (:meth:`BashAnalyzer.judged_in_thread`)."""
    command = args.get("command") if tool_name == "run_bash" else None
    return isinstance(command, str) and BashAnalyzer.judged_in_thread(command, denied_read_globs)
