"""sed: in-place edits and the script's own ``w``/``r``/``e`` commands (programs.sed_effects)."""

from __future__ import annotations

from typing import Final

from stockade.executor.bash.findings import Judge
from stockade.executor.bash.options import (
    literal,
    split_arguments,
)
from stockade.executor.bash.parser import Word
from stockade.executor.bash.programs import sed_effects


def judge(j: Judge, args: list[Word]) -> None:
    """sed: in-place editing, and the script's own w/r/e commands."""
    scripts: list[str] = []
    script_file = False
    in_place = False
    takes_value = frozenset({"-e", "--expression", "-f", "--file", "-l", "--line-length"})
    operands, found = split_arguments(args, takes_value, (_SED_IN_PLACE, takes_value))
    for arg in found:
        value = arg.text
        if not value.startswith("--") and "i" in value[1:].split("e")[0].split("f")[0]:
            in_place = True
        for option, operand, _ in arg.options:
            if option == "--in-place":
                in_place = True
            if option in ("-e", "--expression") and operand is not None:
                if operand.value is None:
                    j.ask("sed script only known at run time", immune=True)
                else:
                    scripts.append(operand.value)
            elif option in ("-f", "--file") and operand is not None:
                script_file = True
                j.path(operand, write=False)
    if not scripts and not script_file:
        if not operands:
            j.deny("sed without a script")
            return
        first = operands.pop(0)
        if first.value is None:
            j.ask("sed script only known at run time", immune=True)
        else:
            scripts.append(first.value)
    if script_file:
        j.effect("sed runs a script file, which may write files or run commands")
    for script in scripts:
        effects = sed_effects(script)
        if effects.execute:
            j.deny("the sed script runs shell commands (e command or s///e)")
        if effects.unknown:
            j.effect("the sed script uses commands the analysis does not know")
        for target in effects.writes:
            j.path(literal(target), write=True, what="the sed script writes")
            j.effect(f"the sed script writes {target}")
        for source in effects.reads:
            j.path(literal(source), write=False)
    for word in operands:
        j.path(word, write=in_place, what="edits in place")
    if in_place:
        j.effect("sed -i edits files in place")


_SED_IN_PLACE: Final = frozenset({"--in-place"})
