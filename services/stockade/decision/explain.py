"""Plain-words explanations with a risk level for every decision (DEC-10); no LLM needed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Risk(Enum):
    """How risky a call is."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


@dataclass(frozen=True)
class Explanation:
    """A risk level and one sentence."""

    risk: Risk
    """How risky the call is."""
    summary: str
    """One sentence in plain words."""


# Commands whose presence makes a bash call high risk whatever else the analysis says.
_HIGH_RISK = frozenset(
    {
        "rm", "dd", "mkfs", "shred", "sudo", "doas", "su", "chmod", "chown", "curl", "wget",
        "nc", "ncat", "ssh", "scp", "eval", "kill", "pkill", "reboot", "shutdown", "mount",
    }
)  # fmt: skip
_DOWNLOADERS = frozenset({"npm", "pip", "pip3", "yarn", "pnpm", "cargo", "apt", "apt-get", "go"})
_EFFECTS = {
    "npm": "may modify node_modules/ and download packages",
    "pip": "may install Python packages and download them",
    "git": "runs git in the repository",
    "rm": "deletes files",
    "curl": "fetches data over the network",
    "wget": "downloads files over the network",
}
_FILE_VERBS = {
    "read_file": "Reads",
    "file_write": "Writes",
    "file_edit": "Edits",
    "grep_files": "Searches",
    "glob_files": "Lists files matching",
}


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def explain_call(
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    sub_commands: Sequence[str] = (),
    read_only: bool | None = None,
    needs_network: bool = False,
    inside_working_dir: bool | None = None,
    analysis_reasons: Sequence[str] = (),
) -> Explanation:
    """Derive a risk level and a sentence from the call and the executor's analysis."""
    if tool_name == "run_bash":
        return _explain_bash(
            str(arguments.get("command", "")),
            sub_commands,
            read_only=read_only,
            needs_network=needs_network,
            reasons=analysis_reasons,
        )
    path = arguments.get("file_path") or arguments.get("path") or arguments.get("pattern")
    verb = _FILE_VERBS.get(tool_name)
    if verb is not None:
        target = f"`{_short(str(path))}`" if path else "files"
        outside = inside_working_dir is False
        if tool_name in ("file_write", "file_edit"):
            risk = Risk.HIGH if outside else Risk.MEDIUM
            where = "outside the working directory" if outside else "inside the working directory"
            return Explanation(risk, f"{verb} {target} {where}")
        risk = Risk.MEDIUM if outside else Risk.LOW
        return Explanation(
            risk, f"{verb} {target}" + (" outside the working directory" if outside else "")
        )
    return _tool_explanation(tool_name, bool(read_only))


_TOOL_EXPLANATIONS: dict[tuple[str, bool], Explanation] = {}


def _tool_explanation(tool_name: str, read_only: bool) -> Explanation:
    """The sentence for any other tool; it depends on the name and read_only alone, and
    Explanation is immutable, so one instance per pair is kept (bounded: names come from
    callers)."""
    key = (tool_name, read_only)
    hit = _TOOL_EXPLANATIONS.get(key)
    if hit is not None:
        return hit
    risk = Risk.LOW if read_only else Risk.MEDIUM
    out = Explanation(risk, f"Calls tool `{tool_name}`" + (" (read-only)" if read_only else ""))
    if len(_TOOL_EXPLANATIONS) < 4096:
        _TOOL_EXPLANATIONS[key] = out
    return out


def _explain_bash(
    command: str,
    sub_commands: Sequence[str],
    *,
    read_only: bool | None,
    needs_network: bool,
    reasons: Sequence[str],
) -> Explanation:
    names = [s.split(" ", 1)[0] for s in sub_commands if s]
    effects = [_EFFECTS[n] for n in dict.fromkeys(names) if n in _EFFECTS]
    sentence = f"Runs `{_short(command)}`"
    if effects:
        sentence += ": " + "; ".join(effects)
    elif read_only:
        sentence += ": reads only"
    if reasons:
        sentence += f" ({_short('; '.join(reasons), 120)})"
    if any(n in _HIGH_RISK for n in names) or needs_network:
        return Explanation(Risk.HIGH, sentence)
    if read_only:
        return Explanation(Risk.LOW, sentence)
    if any(n in _DOWNLOADERS for n in names):
        return Explanation(Risk.MEDIUM, sentence)
    return Explanation(Risk.MEDIUM, sentence)
