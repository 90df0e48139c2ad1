"""awk (EXE-8b): the program is lexed (programs.awk_effects) for system(), pipes,
redirections, getline and ARGV."""

from __future__ import annotations

import re

from stockade.executor.bash.findings import Judge
from stockade.executor.bash.options import (
    literal,
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
        }
    )
    operands, found = split_arguments(args, takes_value, (_AWK_DENY, takes_value))
    for arg in found:
        for option, operand, _ in arg.options:
            if option in ("-l", "--load"):
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


_AWK_DENY = frozenset({"--load"})

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
