"""Read-only commands from the safe list: their options (judged against the lists) and
the files they read."""

from __future__ import annotations

import re
from typing import Final

from stockade.executor.bash import lists
from stockade.executor.bash.findings import Judge, short, word_text
from stockade.executor.bash.judges import awk, find, sed
from stockade.executor.bash.judges.writes import OUTPUT_OPTION
from stockade.executor.bash.options import (
    literal,
    may_split,
    split_arguments,
    until,
)
from stockade.executor.bash.parser import Word


def judge(j: Judge, name: str, spec: lists.SafeSpec, args: list[Word], stdin_args: bool) -> None:
    """A command from the read-only list: its options against the list, then its operands."""
    if name in ("find",):
        find.judge(j, args)
        return
    if name == "sed":
        sed.judge(j, args)
        return
    if name in ("awk", "gawk", "mawk", "nawk"):
        awk.judge(j, args)
        return
    if name in ("cd", "pushd"):
        cd(j, args)
        return
    if name == "popd":
        return
    if name == "jq":
        args = _jq_named_files(j, args)
    if name in RESPONSE_FILE_COMMANDS:
        _response_files(j, args)
    operands, pattern_given, lists_given = _options(j, name, spec, args)
    if name == "hostname" and operands:
        j.deny("hostname NAME changes the machine's host name")
        return
    if name == "xxd" and len(operands) >= 2:
        j.path(operands[0], write=False)
        if j.path(operands[1], write=True, what="writes") is not None:
            j.effect(f"writes {word_text(operands[1])}", "low")
        return
    if name == "tee":
        for word in operands:
            if j.path(word, write=True, what="writes") is not None:
                j.effect(f"writes {word_text(word)}", "low")
        return
    if name == "uniq" and len(operands) >= 2:
        j.path(operands[0], write=False)
        if j.path(operands[1], write=True, what="writes") is not None:
            j.effect(f"writes {word_text(operands[1])}", "low")
        return
    kind = spec.operands
    if kind == "none":
        if name in _DIRECTORY_LISTS:
            _directory_lists(j, args, _DIRECTORY_LISTS[name])
        if name in _OPTION_BUILTINS or _has_dangerous_options(spec):
            _dynamic_options(j, name, args, builtin=name in _OPTION_BUILTINS)
        return
    if kind in ("pattern_then_paths", "filter_then_paths") and not pattern_given:
        if operands and operands[0].value is None:
            _dynamic_pattern(j, name, operands[0], args)
        if name == "jq":
            _jq_modules(j, args, operands[0] if operands else None)
        operands = operands[1:]
    if name == "jq":
        operands = until(operands, ("--args", "--jsonargs"))
    if stdin_args:
        j.ask(f"{name} gets file names from stdin (xargs), which cannot be checked")
    if lists_given:
        j.ask(
            f"{name} {lists_given} reads the files named in "
            f"{', '.join(word_text(w) for w in operands) or 'stdin'}, "
            "which are only known at run time",
            "high",
            immune=True,
        )
    if name == "fd":
        _fd_base(j, args, operands)
    for word in operands:
        j.path(word, write=False)


_DIRECTORY_LISTS: Final = {"whereis": (("-B", "-M", "-S"), True), "lsof": (("+D", "+d"), False)}
"""Programs that take no file operands but list directories an option names: ``whereis
-B DIR... -f NAME`` (every word up to the next option), ``lsof +D DIR``."""


def _directory_lists(j: Judge, args: list[Word], table: tuple[tuple[str, ...], bool]) -> None:
    """Judge the directories named after the table's options as reads (as ``ls DIR`` is);
    several words per option, or one."""
    options, several = table
    listing = False
    for word in args:
        value = word.value
        if value is not None and value.startswith(("-", "+")):
            listing = value in options
            continue
        if listing:
            j.path(word, write=False)
            listing = several


def _fd_base(j: Judge, args: list[Word], operands: list[Word]) -> None:
    """``fd --base-directory DIR`` resolves its relative paths (operands, ``--search-path``)
    from DIR: each is judged from there too (DIR itself is judged as a read)."""
    base: str | None = None
    relative: list[str] = []
    for k, word in enumerate(args):
        value = word.value
        if value is None:
            continue
        if value == "--":
            break
        for option in ("--base-directory", "--search-path"):
            given: str | None = None
            if value == option and k + 1 < len(args):
                given = args[k + 1].value
            elif value.startswith(option + "="):
                given = value[len(option) + 1 :]
            if given is not None:
                if option == "--base-directory":
                    base = given
                elif not given.startswith("/"):
                    relative.append(given)
    if base is None:
        return
    relative.extend(w.value for w in operands if w.value and not w.value.startswith("/"))
    for path in relative:
        j.path(literal(base.rstrip("/") + "/" + path), write=False)


RESPONSE_FILE_COMMANDS: Final = frozenset({"strings"})
"""Programs built on GNU libiberty (binutils): every argument ``@FILE``, in any position,
is replaced by the words read from FILE before options are parsed, and an unreadable
word is printed back in the error (``strings @/etc/shadow`` shows its lines)."""


def _response_files(j: Judge, args: list[Word]) -> None:
    """Judge each ``@FILE`` argument as a read of FILE."""
    for word in args:
        value = word.value
        if value is not None and value.startswith("@") and len(value) > 1:
            j.path(literal(value[1:]), write=False)


_JQ_MODULE: Final = re.compile(r"\b(?:import|include|modulemeta)\b")


def _jq_modules(j: Judge, args: list[Word], program: Word | None) -> None:
    """jq's ``import "x" as $d;`` reads x.json and ``include "x";`` runs x.jq, looked up
    from the program's own directory, ``-L`` and ``~/.jq``, ``..`` allowed: ``jq -n
    'import "../../etc/x" as $d; $d'`` prints a file anywhere (the checker does not
    resolve jq's search path). A program that imports or includes, one read from a file
    (``-f``, which may do so) and a search path given (``-L``) are asked, bypass-immune."""
    for word in args:
        value = word.value or ""
        if value in ("-f", "--from-file") or value.startswith(("--from-file=", "-L")):
            j.ask(
                f"jq {value.split('=')[0][:11]} reads modules or a program from files",
                "high",
                immune=True,
            )
            return
    text = program.value if program is not None else None
    if text is not None and _JQ_MODULE.search(text):
        j.ask(
            'the jq program imports or includes files (import "x" reads x.json from '
            "jq's search path, which the checker does not resolve)",
            "high",
            immune=True,
        )


def _jq_named_files(j: Judge, args: list[Word]) -> list[Word]:
    """jq's ``--rawfile NAME FILE`` / ``--slurpfile NAME FILE`` take two arguments:
    judge FILE, and drop both so the rest parses as usual (``--arg NAME VALUE`` too)."""
    out: list[Word] = []
    i = 0
    while i < len(args):
        value = args[i].value
        if value in ("--rawfile", "--slurpfile"):
            if i + 2 < len(args):
                j.path(args[i + 2], write=False)
            i += 3
            continue
        if value in ("--arg", "--argjson"):
            i += 3
            continue
        out.append(args[i])
        i += 1
    return out


def _options(
    j: Judge, name: str, spec: lists.SafeSpec, args: list[Word]
) -> tuple[list[Word], bool, str]:
    """Walk options (judging their values); return the operands, whether a pattern
    option (``grep -e``) was given and the flag that makes the operands lists of files
    (``md5sum -c``; empty when none was)."""
    tables = _TABLES.get(name)
    if tables is None or tables[0] is not spec:
        tables = _tables(spec)
    _, takes_value, known = tables
    operands, found = split_arguments(args, takes_value, known, spec.optional_options)
    pattern_given = False
    lists_given = ""
    for arg in found:
        for option, operand, next_word in arg.options:
            if next_word and operand is not None and operand.value is None:
                _splits(j, name, operand, f"the value of {option}")
            if option in spec.deny_options:
                j.deny(f"{name} {option} runs another program")
            elif option in spec.ask_options:
                j.effect(f"{name} {option} changes files")
            if option in spec.pattern_options or (name == "rg" and option == "--files"):
                # (`rg --files DIR...` takes no pattern: every operand is a path.)
                pattern_given = True
            if option in spec.names_flags:
                lists_given = option
            if (
                operand is not None
                and option.startswith("--")
                and not any(option in k for k in known)
                and OUTPUT_OPTION.match(option)
            ):
                # An option the list does not know, named like an output file
                # (`--output=`, `--log-file=`): judged as the write it may be (EXE-8e).
                j.path(operand, write=True, what=f"{name} {option} may write")
                j.effect(f"{name} {option} may write {word_text(operand)}", "low")
                continue
            if operand is not None:
                if option in spec.write_options:
                    j.path(operand, write=True, what=f"{name} {option} writes")
                    j.effect(f"{name} {option} writes {word_text(operand)}", "low")
                elif option in spec.read_options:
                    j.path(operand, write=False)
                elif option in spec.names_options:
                    j.path(operand, write=False)
                    j.ask(
                        f"{name} {option} reads the files named in {word_text(operand)}, "
                        "which are only known at run time",
                        "high",
                        immune=True,
                    )
    return operands, pattern_given, lists_given


def _splits(j: Judge, name: str, word: Word, what: str) -> bool:
    """A dynamic word outside double quotes is split (and globbed) by bash into any number
    of words: more options and files the command reads (`grep -e $p a.txt` with
    p='x /etc/shadow'), never judged. True when it asked."""
    if not may_split(word):
        return False
    j.ask(
        f"{what} ({short(word.text, 30)}) is only known at run time and, unquoted, may "
        f"split into several words: options and files {name} reads",
        "high",
        immune=True,
    )
    return True


# Builtins on the read-only list whose options change what they do (`printf -v NAME`,
# `hash -p`, `compgen -C`, `jobs -x`, `wait -p`): a word only known at run time before
# their first operand may be (or split into) such options.
_OPTION_BUILTINS: Final = frozenset(
    {"printf", "hash", "compgen", "jobs", "wait", "mapfile", "readarray", "read", "set"}
)


def _has_dangerous_options(spec: lists.SafeSpec) -> bool:
    return bool(
        spec.deny_options
        or spec.read_options
        or spec.write_options
        or spec.ask_options
        or spec.names_options
        or spec.names_flags
    )


def _dynamic_options(j: Judge, name: str, args: list[Word], *, builtin: bool) -> None:
    """A command that takes no files but has options that read, write or run (`date -f`,
    `hash -p`, `jobs -x`): a word only known at run time may become such an option
    (`date +$fmt` with fmt='x -f .env' prints .env). bash's builtins stop reading options
    at their first operand; other programs read them anywhere."""
    for word in args:
        value = word.value
        if value == "--":
            return
        if value is not None:
            if builtin and not value.startswith("-"):
                return
            continue
        if may_split(word) or word.text[1:2] in ("$", "`", "\\", "-"):
            j.ask(
                f"{name} gets a word only known at run time ({short(word.text, 30)}), which "
                "may be (or split into) options that read, write or run",
                "high",
                immune=True,
            )
            return


def _dynamic_pattern(j: Judge, name: str, word: Word, args: list[Word]) -> None:
    """The pattern or filter (the first operand) is only known at run time: it may split
    into several words, or, before ``--``, be an option (`rg "$p" .` with p='--pre=sh'
    runs sh on every file)."""
    if _splits(j, name, word, f"the pattern of {name}"):
        return
    if word.text[1:2] not in ("$", "`", "\\", "-"):
        return  # starts with a literal character: never an option
    position = next(k for k, a in enumerate(args) if a is word)
    if not any(a.value == "--" for a in args[:position]):
        j.ask(
            f"the pattern of {name} ({short(word.text, 30)}) is only known at run time and "
            "may be an option (write `-- PATTERN` or `-e PATTERN`)",
            "high",
            immune=True,
        )


def _tables(
    spec: lists.SafeSpec,
) -> tuple[lists.SafeSpec, frozenset[str], tuple[frozenset[str], ...]]:
    """The spec, the options that take a value and its option sets by severity (for
    abbreviations), as :func:`_options` reads them."""
    known = (
        spec.names_options,
        spec.names_flags,
        spec.deny_options,
        spec.write_options,
        spec.ask_options,
        spec.read_options,
        spec.pattern_options,
        spec.value_options,
        spec.optional_options,
    )
    return spec, spec.takes_value, known


# Made once per command of the list, not per command line: compiled (mypyc), the spec's
# cached_property takes_value is made again on every access.
_TABLES: Final = {name: _tables(spec) for name, spec in lists.SAFE_COMMANDS.items()}


def cd(j: Judge, args: list[Word]) -> None:
    """cd/pushd: the directory becomes the base for the paths that follow."""
    operands = [a for a in args if a.value is None or not a.value.startswith("-")]
    target = operands[0] if operands else literal("~")
    j.change_dir(target)


def history(j: Judge, args: list[Word]) -> None:
    """``history -w FILE`` / ``-a FILE`` write the history to FILE (``-r``/``-n``
    read it); without FILE they use HISTFILE, judged where it is set."""
    flags = "".join(
        w.value[1:] for w in args if w.value and w.value.startswith("-") and w.value != "-"
    )
    operands = [w for w in args if w.value is None or not w.value.startswith("-")]
    if not operands:
        return
    if set(flags) & set("aw"):
        j.path(operands[0], write=True, what="history writes")
    elif set(flags) & set("rn"):
        j.path(operands[0], write=False)
