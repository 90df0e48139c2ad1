"""A deterministic provider that replays a script of model turns (AGT-9).

Script files are YAML or JSON::

    # what the "model" says and which tools it calls, one entry per model turn
    turns:
      - text: "Let me read the README."
        tool_calls:
          - name: read_file
            arguments: {file_path: README.md}
      - text: "The README describes Stockade."   # no tool_calls: the final answer

Each ``complete`` returns the next turn. A forced final answer (``allow_tools=False``)
returns the next turn's text without its tool calls. When the script runs out, the
provider answers with a final text saying so. Tool call ids are
``call_<provider tag>_<turn>_<index>`` unless the script gives an ``id``: the tag is random
per provider (one provider per RunTurn), so default ids never repeat across sessions or
turns (the executor, approvals and the audit trail know a call by its id within a session).
Token usage is estimated at four characters a token.

Subagents draw their turns from the same script, in order: after a turn that calls
``subagent``, the next turns are the child's, until one without tool calls (the child's
answer); then the lead's turns continue. Context summaries for compaction never consume a
turn: the provider answers them itself with a short deterministic summary.

Optional per turn: ``prompt_tokens: N`` reports N prompt tokens for that turn instead of
the estimate (to exercise the token limits from a script).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from stockade.errors import InvalidArgument
from stockade.llm.base import SUMMARY_PROMPT, Message, ModelToolCall, ModelTurn, ToolSchema

SCRIPT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def parse_script(data: Any, *, source: str = "script") -> list[ModelTurn]:
    """Validate a loaded script and return its turns; raise InvalidArgument on bad shape."""
    if not isinstance(data, Mapping) or not isinstance(data.get("turns"), Sequence):
        raise InvalidArgument(f"{source}: a script is a mapping with a list 'turns'")
    turns: list[ModelTurn] = []
    for i, raw in enumerate(data["turns"]):
        if not isinstance(raw, Mapping):
            raise InvalidArgument(f"{source}: turn {i + 1} is not a mapping")
        text = raw.get("text", "")
        if not isinstance(text, str):
            raise InvalidArgument(f"{source}: turn {i + 1} text must be a string")
        calls = []
        for j, call in enumerate(raw.get("tool_calls") or []):
            if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
                raise InvalidArgument(f"{source}: turn {i + 1} tool call {j + 1} needs a name")
            args = call.get("arguments", {})
            if not isinstance(args, Mapping):
                raise InvalidArgument(
                    f"{source}: turn {i + 1} tool call {j + 1} arguments must be a mapping"
                )
            calls.append(
                ModelToolCall(
                    # Empty: the provider gives a default id unique to its own run.
                    id=str(call.get("id") or ""),
                    name=call["name"],
                    arguments=dict(args),
                )
            )
        prompt_tokens = raw.get("prompt_tokens", 0)
        if (
            not isinstance(prompt_tokens, int)
            or isinstance(prompt_tokens, bool)
            or prompt_tokens < 0
        ):
            raise InvalidArgument(f"{source}: turn {i + 1} prompt_tokens must be an integer >= 0")
        turns.append(
            ModelTurn(
                text=text,
                tool_calls=tuple(calls),
                prompt_tokens=prompt_tokens,
                completion_tokens=_tokens(text + json.dumps([c.arguments for c in calls])),
            )
        )
    return turns


def load_script(script_dir: Path, name: str) -> list[ModelTurn]:
    """Load ``name`` (``.yaml``, ``.yml`` or ``.json``) from ``script_dir``; names cannot
    climb out of the folder."""
    if not SCRIPT_NAME.match(name) or ".." in name:
        raise InvalidArgument(f"script name {name!r} is not a plain file name")
    for candidate in (name, f"{name}.yaml", f"{name}.yml", f"{name}.json"):
        path = script_dir / candidate
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            try:
                data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
            except (ValueError, yaml.YAMLError) as exc:
                raise InvalidArgument(f"script {name!r} does not parse: {exc}") from None
            return parse_script(data, source=f"script {name!r}")
    raise InvalidArgument(f"no script named {name!r} in {script_dir}")


class ScriptedProvider:
    """Replays scripted turns in order."""

    def __init__(self, turns: Sequence[ModelTurn]) -> None:
        self._turns = list(turns)
        self._next = 0
        self._tag = uuid.uuid4().hex[:12]

    async def complete(
        self, messages: list[Message], tools: list[ToolSchema], *, allow_tools: bool = True
    ) -> ModelTurn:
        """The next scripted turn (without tool calls when tools are not allowed)."""
        prompt = sum(_tokens(m.content) for m in messages)
        if messages and messages[0].role == "system" and messages[0].content == SUMMARY_PROMPT:
            return self._summary(messages, prompt)
        if self._next >= len(self._turns):
            return ModelTurn(text="(the script has no more turns)", prompt_tokens=prompt)
        turn = self._turns[self._next]
        self._next += 1
        if any(not c.id for c in turn.tool_calls):
            turn = replace(
                turn,
                tool_calls=tuple(
                    c if c.id else replace(c, id=f"call_{self._tag}_{self._next}_{j + 1}")
                    for j, c in enumerate(turn.tool_calls)
                ),
            )
        prompt = turn.prompt_tokens or prompt
        if not allow_tools:
            return ModelTurn(
                text=turn.text, prompt_tokens=prompt, completion_tokens=turn.completion_tokens
            )
        return ModelTurn(
            text=turn.text,
            tool_calls=turn.tool_calls,
            prompt_tokens=prompt,
            completion_tokens=turn.completion_tokens,
        )

    @staticmethod
    def _summary(messages: list[Message], prompt: int) -> ModelTurn:
        """A deterministic summary: the first line of each summarised entry, shortened."""
        transcript = messages[-1].content if len(messages) > 1 else ""
        lines = [line[:80] for line in transcript.splitlines() if line.strip()][:12]
        text = "Earlier steps: " + " | ".join(lines) if lines else "Earlier steps: (none)"
        return ModelTurn(text=text[:1000], prompt_tokens=prompt, completion_tokens=_tokens(text))
