"""awk (EXE-8b): the program is lexed (programs.awk_effects) for system(), pipes,
redirections, getline and ARGV."""

from __future__ import annotations

import re
from typing import Final

from stockade.executor.bash.findings import Judge, short
from stockade.executor.bash.options import (
    canonical,
    literal,
    may_split,
    split_arguments,
)
from stockade.executor.bash.parser import Word
from stockade.executor.bash.programs import awk_effects


def judge(j: Judge, args: list[Word]) -> None:
    """awk and its variants: options, the program (lexed), program files and the files read."""
    program: str | None = None
    program_file = False
    takes_value = frozenset(
        {
            "-F",
            "-v",
            "-f",
            "-e",
            "--source",
            "-i",
            "--include",
            "-l",
            "--load",
            "-E",
            "--file",
            "--assign",
            "--field-separator",
            "--exec",
            "-W",
        }
    )
    operands, found = split_arguments(
        args, takes_value, (_AWK_DENY, _AWK_WRITE_OPTIONS, takes_value), _AWK_OPTIONAL
    )
    info = False
    for arg in found:
        for option, operand, next_word in arg.options:
            if next_word and operand is not None and may_split(operand):
                # `awk -v x=$v 1 FILE`: the value splits into more words, one of which can
                # take the program's place (`{system(...)}`) (EXE-8c).
                j.ask(
                    f"awk {option} gets a value only known at run time, which may split "
                    "into more words (a program, files)",
                    "high",
                    immune=True,
                )
            if option == "-W" and operand is not None:
                # `-W dump-variables=FILE` is gawk's (and POSIX's) spelling of the long
                # option; mawk's `-W exec FILE` runs a program file.
                if operand.value is None:
                    j.ask("awk -W with an option only known at run time", immune=True)
                    continue
                name, eq, attached = operand.value.partition("=")
                option = canonical("--" + name, (_AWK_DENY, _AWK_WRITE_OPTIONS, _AWK_W_HARMLESS))
                operand = literal(attached) if eq else None
                info = info or option in _AWK_INFO
                if option not in _AWK_DENY | _AWK_WRITE_OPTIONS | _AWK_W_HARMLESS:
                    j.effect(f"awk -W {short(name, 20)} is an option the analysis does not know")
                    program_file = True
                    continue
            if option in _AWK_WRITES:
                # gawk's --dump-variables / --pretty-print / --profile[=FILE] (-d/-o/-p
                # with FILE attached) write FILE, or awkvars.out / awkprof.out here.
                target = operand if operand is not None else literal(_AWK_WRITES[option])
                if j.path(target, write=True, what=f"awk {option} writes") is not None:
                    j.effect(f"awk {option} writes {target.text}", "low")
            elif option in ("-D", "--debug"):
                j.effect("awk --debug runs the debugger (commands read from a file)")
                if operand is not None:
                    j.path(operand, write=False)
            elif option in _AWK_INFO:
                info = True  # prints and exits: the program is not run
            elif option in ("-l", "--load"):
                j.deny("awk -l loads a shared library")
            elif option in ("-f", "-E", "--file", "--exec", "-i", "--include"):
                program_file = True
                if operand is not None:
                    j.path(operand, write=False)
            elif option in ("-e", "--source") and operand is not None:
                if operand.value is None:
                    j.ask("awk program only known at run time", immune=True)
                else:
                    program = (program or "") + "\n" + operand.value
    if program is None and not program_file:
        if info:
            return
        if not operands:
            j.deny("awk without a program")
            return
        first = operands.pop(0)
        if first.value is None:
            j.ask("awk program only known at run time", immune=True)
        else:
            program = first.value
    if program_file:
        j.effect("awk runs a program file, which may write files or run commands")
    if program is not None:
        judge_program(j, program)
    for word in operands:
        if (
            word.value is not None
            and _VAR_NAME.match(word.value.split("=", 1)[0])
            and ("=" in word.value)
        ):
            continue  # `awk '...' var=value file`: an assignment, not a file
        j.path(word, write=False)


def judge_program(j: Judge, program: str) -> None:
    """Judge an awk program from its tokens (EXE-8b: lexed, not regex-scanned)."""
    effects = awk_effects(program)
    for reason in dict.fromkeys(effects.runs):
        j.deny(f"the awk program {reason}")
    if effects.unknown:
        j.effect("the awk program has text the analysis cannot read", immune=True)
    for target in effects.writes:
        if target is None:
            j.effect("the awk program redirects output to a file named at run time",
                        "high", immune=True)  # fmt: skip
        elif j.path(literal(target), write=True, what="the awk program writes") is not None:
            j.effect(f"the awk program writes {target}", "low")
    for source in effects.reads:
        if source is None:
            j.ask("the awk program reads a file named at run time (getline <)",
                     "high", immune=True)  # fmt: skip
        else:
            j.path(literal(source), write=False)
    if effects.argv:
        j.ask(
            "the awk program changes ARGV, ARGC or ENVIRON (it reads files chosen at run time)",
            "high",
            immune=True,
        )


_AWK_DENY: Final = frozenset({"--load"})

# gawk options that write a file: the value is optional and only ever attached (`-d` alone
# writes the default file; `-d FILE` reads FILE as the program's input).
_AWK_WRITES: Final = {
    "-d": "awkvars.out",
    "--dump-variables": "awkvars.out",
    "-o": "awkprof.out",
    "--pretty-print": "awkprof.out",
    "-p": "awkprof.out",
    "--profile": "awkprof.out",
}
_AWK_WRITE_OPTIONS: Final = frozenset(_AWK_WRITES)
_AWK_INFO: Final = frozenset({"--version", "-V", "--help", "-h", "--usage", "--copyright", "-C"})
_AWK_OPTIONAL: Final = frozenset({*_AWK_WRITES, "-D", "--debug"})

# `-W NAME` options that only change how the program runs or what is printed.
_AWK_W_HARMLESS: Final = frozenset(
    {
        "--version",
        "--usage",
        "--help",
        "--copyright",
        "--posix",
        "--traditional",
        "--compat",
        "--lint",
        "--interactive",
        "--dump",
        "--sprintf",
        "--random",
        "--posix_space",
        "--re-interval",
        "--characters-as-bytes",
        "--sandbox",
        "--bignum",
        "--non-decimal-data",
        "--optimize",
        "--no-optimize",
    }
)

_VAR_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
