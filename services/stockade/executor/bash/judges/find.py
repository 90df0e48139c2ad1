"""find: -delete, -fprint*, and -exec/-ok whose command is judged like any other."""

from __future__ import annotations

from typing import Final

from stockade.executor.bash.findings import Judge, short, word_text
from stockade.executor.bash.options import (
    literal,
)
from stockade.executor.bash.parser import RawCommand, Word


def judge(j: Judge, args: list[Word]) -> None:
    """find: starting points read (deleted under, with -delete), -exec/-ok commands
    judged like any other, -fprint* writes."""
    i = 0
    while i < len(args) and args[i].value in ("-H", "-L", "-P", "-D"):
        i += 2 if args[i].value == "-D" else 1
    starts: list[Word] = []
    while i < len(args):
        value = args[i].value
        if value is not None and (value.startswith("-") or value in ("(", ")", "!", ",")):
            break
        starts.append(args[i])
        i += 1
    expression = args[i:]
    deletes = False
    k = 0
    while k < len(expression):
        value = expression[k].value
        nxt = expression[k + 1] if k + 1 < len(expression) else None
        if value in ("-exec", "-execdir", "-ok", "-okdir"):
            end = k + 1
            while end < len(expression) and expression[end].value not in (";", "+"):
                end += 1
            inner = expression[k + 1 : end]
            j.effect(f"find {value} runs a command for every file found")
            saved = j.current
            if inner:
                j.current = short(" ".join(w.text for w in inner))
                resolved = j.resolve_name(inner[0])
                if resolved is None:
                    j.record(word_text(inner[0]), inner[1:])
                else:
                    name, by_path = resolved
                    j.words(name, by_path, list(inner[1:]), _EMPTY, stdin_args=False)
            else:
                j.deny(f"find {value} without a command")
            j.current = saved
            k = end + 1
            continue
        if value == "-delete":
            deletes = True
        elif value in ("-fprint", "-fprint0", "-fls", "-fprintf") and nxt is not None:
            j.path(nxt, write=True, what=f"find {value} writes")
            j.effect(f"find {value} writes a file", "low")
            k += 3 if value == "-fprintf" else 2
            continue
        elif value in ("-newer", "-anewer", "-cnewer", "-samefile", "-files0-from") or (
            # -newerXY FILE compares with FILE's time (Y=t: a date string, no file).
            value is not None and len(value) == 8 and value.startswith("-newer") and value[7] != "t"
        ):
            if nxt is not None:
                j.path(nxt, write=False)
                if value == "-files0-from":
                    # The starting points are read from the file: where find looks (and
                    # what -exec gets) is only known at run time.
                    j.ask(
                        f"find -files0-from takes its starting points from {word_text(nxt)}",
                        "high",
                        immune=True,
                    )
            k += 2
            continue
        elif value is None:
            j.ask("find has an argument only known at run time", immune=True)
        k += 1
    if not starts:
        starts = [literal(".")]
    for word in starts:
        j.path(word, write=deletes, what="deletes files under")
    if deletes:
        j.effect("find -delete deletes files", "high")


_EMPTY: Final = RawCommand(Word("", "", False, False, False), (), (), (), None)
