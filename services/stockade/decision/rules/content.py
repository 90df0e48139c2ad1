"""The matchable content of a call (DEC-1/2): which argument fields count, their
normalised paths, run_bash's sub-commands in both normalised forms, the input bounds,
and the DENY/ASK field-by-field matching semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stockade.contract.shell import MAX_COMMAND_CHARS
from stockade.contract.tools import PRIMARY_FIELDS
from stockade.decision.rules.paths import normalize_path
from stockade.decision.rules.shellwords import (
    BARE_PREFIXES,
    crude_split,
    normalize_both,
    option_set_forms,
    subcommand_form,
)
from stockade.errors import InvalidArgument

CONTENT_FIELDS: tuple[str, ...] = ("command", "file_path", "path", "pattern", "url")
"""Argument names a call's content is taken from, in this order."""

PATH_FIELDS = frozenset({"file_path", "path"})
"""Content fields that hold filesystem paths and are normalised before matching."""
_PATH_FIELD_ORDER = tuple(k for k in CONTENT_FIELDS if k in PATH_FIELDS)


BASH_TOOL = "run_bash"


class CallContent:
    """The matchable content of one call, computed once per decision (not shared).

    A plain slotted class rather than a dataclass: one is built per decision, and an
    explicit ``__init__`` that finds the primary field inline costs about half as much.
    """

    __slots__ = (
        "tool_name", "fields", "paths", "sub_commands", "allow_sub_commands", "whole_command",
        "primary_field",
    )  # fmt: skip

    def __init__(
        self,
        tool_name: str,
        fields: Mapping[str, str],
        paths: Mapping[str, str],
        sub_commands: tuple[str, ...] = (),
        allow_sub_commands: tuple[str, ...] = (),
        whole_command: str = "",
    ) -> None:
        self.tool_name = tool_name
        self.fields = fields
        """Raw content fields present in the arguments (command, file_path, path, pattern, url)."""
        self.paths = paths
        """Normalised absolute paths for the path fields present."""
        self.sub_commands = sub_commands
        """For run_bash: each simple command's text, names normalised (DENY/ASK form)."""
        self.allow_sub_commands = allow_sub_commands
        """For run_bash: the same with privilege wrappers kept (ALLOW form)."""
        self.whole_command = whole_command
        """For run_bash: the whole command with whitespace collapsed."""
        declared = PRIMARY_FIELDS.get(tool_name)
        if declared is None and fields:
            for name in CONTENT_FIELDS:
                if name in fields:
                    declared = name
                    break
        self.primary_field: str | None = declared
        """The field an ALLOW rule matches: the tool's declared one, else the first present."""

    def __repr__(self) -> str:
        return (
            f"CallContent(tool_name={self.tool_name!r}, fields={self.fields!r}, "
            f"paths={self.paths!r}, sub_commands={self.sub_commands!r})"
        )

    @property
    def primary_content(self) -> str | None:
        """The primary field's raw value, if present."""
        name = self.primary_field
        return None if name is None else self.fields.get(name)


MAX_CONTENT_CHARS = MAX_COMMAND_CHARS
"""The longest content field (command, path, pattern, url) a call may bring to matching."""
MAX_SUB_COMMAND_CHARS = 4 * MAX_COMMAND_CHARS
"""The most text the executor's sub-commands of one command may hold in total (they repeat
nested parts of the command, so a little more than the command itself)."""


def _refuse_long(fields: Mapping[str, str]) -> None:
    name, value = max(fields.items(), key=lambda kv: len(kv[1]))
    raise InvalidArgument(
        f"arguments.{name} is {len(value)} characters, over the limit of "
        f"{MAX_CONTENT_CHARS} (MAX_COMMAND_CHARS, the executor's command cap)",
        field=f"arguments.{name}",
        limit=str(MAX_CONTENT_CHARS),
    )


_EXTRA_FIELDS: Mapping[str, tuple[str, ...]] = {
    tool: (*CONTENT_FIELDS, extra)
    for tool, extra in PRIMARY_FIELDS.items()
    if extra not in CONTENT_FIELDS
}
"""CONTENT_FIELDS plus the tool's declared primary field (``query`` for search_papers), for
the tools whose primary field is not among them (computed once: one look-up per call)."""


def call_content(
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    cwd: str,
    sub_commands: Sequence[str] | None = None,
) -> CallContent:
    """Extract and normalise the content of a call.

    ``sub_commands`` are the executor's simple-command texts for run_bash; when None the
    command is split crudely (see ``crude_split``).

    Raises ``InvalidArgument`` naming the limit for a content field longer than
    ``MAX_CONTENT_CHARS`` (the executor's command cap) or sub-commands over
    ``MAX_SUB_COMMAND_CHARS`` in total: matching is linear in the input, and the input is
    bounded.
    """
    # A plain loop, not a comprehension and max(): on Python 3.11 this is about half the
    # cost, and every decision pays it.
    get = arguments.get
    fields: dict[str, str] = {}
    too_long = False
    for k in _EXTRA_FIELDS.get(tool_name, CONTENT_FIELDS):
        v = get(k)
        if isinstance(v, str):
            fields[k] = v
            if len(v) > MAX_CONTENT_CHARS:
                too_long = True
    if too_long:
        _refuse_long(fields)
    if sub_commands and sum(map(len, sub_commands)) > MAX_SUB_COMMAND_CHARS:
        raise InvalidArgument(
            f"the inspection's sub-commands hold over {MAX_SUB_COMMAND_CHARS} characters "
            "(MAX_SUB_COMMAND_CHARS)",
            field="inspection.sub_commands",
            limit=str(MAX_SUB_COMMAND_CHARS),
        )
    paths: dict[str, str] = {}
    if fields:
        for k in _PATH_FIELD_ORDER:
            v = fields.get(k)
            if v:
                paths[k] = normalize_path(v, cwd)
    if tool_name != BASH_TOOL or "command" not in fields:
        return CallContent(tool_name, fields, paths)
    command = fields["command"]
    raw_subs = tuple(sub_commands) if sub_commands is not None else crude_split(command)
    # Both normalised forms from one split per sub-command (they differ only for wrappers).
    subs: list[str] = []
    allow_subs: list[str] = []
    for raw in raw_subs:
        deny_form, allow_form = normalize_both(raw)
        if deny_form:
            subs.append(deny_form)
            bare = subcommand_form(deny_form)
            if bare is not None:
                subs.append(bare)  # `git -C . push` is also matched as `git push` (DENY/ASK)
            # `git push` with no arguments pushes too: a DENY/ASK on `git push *` (a prefix
            # and any arguments, none included) matches it (BARE_PREFIXES: the prefixes of
            # the compiled rules, so other calls pay one set look-up).
            if deny_form in BARE_PREFIXES:
                subs.append(deny_form + " ")
            if bare is not None and bare in BARE_PREFIXES:
                subs.append(bare + " ")
            # `rm -fr x` as `rm -f -r x`: a DENY/ASK on `rm -rf *` matches options as a set.
            subs += option_set_forms(bare if bare is not None else deny_form)
        if allow_form:
            allow_subs.append(allow_form)
    return CallContent(
        tool_name,
        fields,
        paths,
        tuple(subs),
        tuple(allow_subs),
        " ".join(command.split()),
    )


def content_matches(
    call: CallContent,
    text: Callable[[str], bool],
    path: Callable[[str], bool],
    command: Callable[[str], bool],
) -> bool:
    """DENY/ASK content semantics (DEC-1/2), shared by one rule and a tier's screen: any
    content field matches as text; path fields also in their normalised form; for
    run_bash's command, also any single sub-command."""
    for name, value in call.fields.items():
        if name in PATH_FIELDS:
            norm = call.paths.get(name)
            if (norm is not None and path(norm)) or text(value):
                return True
        elif name == "command" and call.tool_name == BASH_TOOL:
            if text(value):
                return True
            for sub in call.sub_commands:
                if command(sub):
                    return True
        elif text(value):
            return True
    return False
