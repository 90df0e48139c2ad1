"""Interpreters (python, node ...), ``eval``/``source`` and package managers."""

from __future__ import annotations

import os
import re
from typing import Final

from stockade.executor.bash import lists
from stockade.executor.bash.findings import Judge, word_text
from stockade.executor.bash.parser import RawCommand, Word

# What a pipe or a here-string feeds: stdin by any of its names, or another inherited fd
# (`source /dev/fd/3 3<<< 'rm -rf ~'`).
_STDIN: Final = re.compile(
    r"-\Z|/dev/stdin\Z|/dev/fd/\d+\Z|/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd/\d+\Z"
)


# The lists tables read per command, bound as Finals (C statics for mypyc, where
# ``lists.NAME`` looks the name up on the module each time).
_EVAL_COMMANDS: Final = lists.EVAL_COMMANDS
_INTERPRETERS: Final = lists.INTERPRETERS
_INTERPRETER_INFO_FLAGS: Final = lists.INTERPRETER_INFO_FLAGS
_NETWORK_SUBCOMMANDS: Final = lists.NETWORK_SUBCOMMANDS
_PACKAGE_MANAGERS: Final = lists.PACKAGE_MANAGERS


def _normal(path: str) -> str:
    """``path`` without ``.``, doubled or leading extra slashes (``//dev/./stdin``)."""
    if not path:
        return path
    normal = os.path.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("/") else normal


def eval_command(j: Judge, name: str, args: list[Word]) -> None:
    """eval/source and friends: eval is refused; source of a file runs it in this shell."""
    if name not in ("source", "."):
        j.deny(_EVAL_COMMANDS[name])
        return
    if args and args[0].value == "--":
        args = args[1:]  # `source -- FILE` (bash's no_options)
    target = args[0] if args else None
    if target is None or target.value is None or _STDIN.match(_normal(target.value)):
        j.deny(f"{name} of downloaded or generated content cannot be checked")
        return
    j.path(target, write=False)
    j.effect(f"runs the commands in {target.value} in this shell", "high")


def interpreter(j: Judge, name: str, args: list[Word], raw: RawCommand) -> None:
    """python, node and other interpreters: inline code, modules, program files, stdin."""
    spec = _INTERPRETERS[name]
    language = spec.language
    i = 0
    info = False
    while i < len(args):
        word = args[i]
        value = word.value
        if value is None:
            j.effect(f"runs a {language} program chosen at run time", "high", immune=True)
            return
        if value == "-":
            break
        option = value if value.startswith("--") else value[:2]
        if value.startswith("-") and option in spec.inline_options:
            j.effect(f"runs inline {language} code", "high")
            return
        if value in spec.inline_options:  # `deno eval CODE`
            j.effect(f"runs inline {language} code", "high")
            return
        if value.startswith("-") and option in spec.module_options:
            module = value[2:] or (word_text(args[i + 1]) if i + 1 < len(args) else "")
            phrase = _PACKAGE_MANAGERS.get(module)
            if phrase is not None:
                package_manager(j, module, args[i + 2 :] if not value[2:] else args[i + 1 :])
            else:
                j.effect(f"runs the {language} module {module!r}")
            return
        if value.startswith("-") and len(value) > 1:
            if value in _INTERPRETER_INFO_FLAGS:
                info = True
            i += 2 if value in spec.value_options else 1
            continue
        j.scan_credentials(args[i + 1 :])
        j.path(word, write=False)
        j.effect(f"runs the {language} program {value}, which can do anything")
        return
    if info and i >= len(args):
        return  # `python --version`
    if any(r.op in ("<<", "<<<") for r in raw.redirects):
        j.effect(f"runs inline {language} code from a here-document", "high")
        return
    j.deny(
        f"{name} without a program file reads its program from stdin "
        "(the download-and-execute shape)"
    )


def package_manager(j: Judge, name: str, args: list[Word]) -> None:
    """A package manager: always a side effect; some subcommands use the network."""
    sub = next((a.value for a in args if a.value and not a.value.startswith("-")), "")
    network = _NETWORK_SUBCOMMANDS.get(name)
    if network is not None and (not network or sub in network):
        j.needs_network = True
    phrase = _PACKAGE_MANAGERS[name]
    j.effect(phrase, "medium")
