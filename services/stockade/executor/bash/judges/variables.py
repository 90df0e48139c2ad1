"""The shell's own state (EXE-8b): assignments (an allow-list of what a command may set),
variable-setting builtins, declarations, arithmetic on values not known here, ``set -k``
/ ``set -a``, and variables that name files programs write (EXE-8e)."""

from __future__ import annotations

import re
from typing import Final

from stockade.executor.bash import lists
from stockade.executor.bash.filevars import FILE_VARIABLES, written_file
from stockade.executor.bash.findings import Judge, expanded, short
from stockade.executor.bash.options import (
    literal,
)
from stockade.executor.bash.parser import ParsedScript, Word, arithmetic_assignments
from stockade.executor.confine.env import command_env


def builtin(j: Judge, name: str, args: list[Word]) -> bool:
    """Judge the variable names a builtin sets; False after a DENY."""
    for word in args:
        value = word.value
        if value is not None and ("$(" in value or "`" in value) and name != "printf":
            j.deny(f"{name} argument {short(value, 30)!r} is evaluated as code")
            return False
    values = [w.value for w in args]
    if not _arithmetic_in_arguments(j, name, values):
        return False
    if name in _NAMING_BUILTINS:
        for word in args:
            if word.value is None and not _STATIC_NAME.match(word.text):
                j.ask(
                    f"{name} gets a variable name only known at run time (a name like "
                    "a[$(cmd)] would run cmd)",
                    "high",
                    immune=True,
                )
                break
    if name in ("test", "[") and any(
        v in ("-v", "-R") and (k + 1 >= len(values) or values[k + 1] is None)
        for k, v in enumerate(values)
    ):
        j.ask(f"{name} -v tests a variable name only known at run time", "high", immune=True)
    if name in ("declare", "typeset", "local") and any(
        v is not None and v.startswith("-") and "n" in v[1:] for v in values
    ):
        j.deny(f"{name} -n makes a name reference (an indirect assignment)")
        return False
    if name == "unset" and not _unset(j, values):
        return False
    targets: list[str | None] = []
    if name == "printf":
        for k, value in enumerate(values[:-1]):
            if value == "-v":
                targets.append(values[k + 1])
    elif name in ("read", "mapfile", "readarray"):
        # Options that take a value; `read -a NAME` names the target array.
        valued = _READ_VALUED if name == "read" else _MAPFILE_VALUED
        skip = False
        for value in values:
            if skip:
                skip = False
            elif value == "-a" and name == "read":
                continue  # the next word is the target: taken as an operand below
            elif value is not None and value.startswith("-") and len(value) > 1:
                skip = value[:2] in valued and len(value) == 2
            else:
                targets.append(value)
    elif name == "getopts" and len(values) >= 2:
        targets.append(values[1])
    if name == "read" and not targets:
        targets.append("REPLY")  # `read` alone reads into REPLY
    elif name in ("mapfile", "readarray") and not targets:
        targets.append("MAPFILE")
    elif name == "wait":
        # `wait -p VAR` assigns the job's pid to VAR (a subscript in its name runs code).
        for k, value in enumerate(values[:-1]):
            if value is not None and value.startswith("-") and value.endswith("p"):
                targets.append(values[k + 1])
    elif name == "let":
        for value in values:
            if value is not None:
                j.shell.integer_names.update(_IDENTIFIER.findall(value))
    j.shell.runtime_values.extend(t.split("[", 1)[0] for t in targets if t is not None)
    for target in targets:
        if target is not None and target.split("[", 1)[0] in ARITHMETIC_SPECIALS:
            j.shell.integer_names.add(target.split("[", 1)[0])
    for target in targets:
        if target is None:
            j.deny(f"{name} assigns a variable whose name is only known at run time")
            return False
        base = target.split("[", 1)[0]
        if "[" in target and ("$" in target or "`" in target):
            j.deny(f"{name} assigns {target!r}, whose subscript is evaluated as code")
            return False
        before = len(j.findings)
        assignment(j, base, None, exported=False)
        if len(j.findings) > before:
            return False
    if name in _DECLARATION_BUILTINS:
        return _declaration(j, name, args)
    if name == "compgen":
        return _compgen(j, args)
    return True


def _arithmetic_in_arguments(j: Judge, name: str, values: list[str | None]) -> bool:
    """``let 'PATH=1'``, ``unset 'a[PATH=1]'``, ``[ -v 'a[HOME=1]' ]``, ``read 'a[PATH++]'``:
    the text of ``let`` and the subscripts of the names these builtins take are evaluated
    as arithmetic, and an assignment there sets the variable (EXE-8b); False after a DENY."""
    if name not in lists.VARIABLE_BUILTINS:
        return True
    for k, value in enumerate(values):
        if value is None:
            continue
        if name == "let":
            text = value
        elif "[" in value and (name != "printf" or (k and values[k - 1] == "-v")):
            text = value[value.index("[") + 1 :]
        else:
            continue
        targets, indirect = arithmetic_assignments(text)
        if indirect:
            j.deny(f"{name} {short(value, 30)!r} assigns a variable named only at run time")
            return False
        before = len(j.findings)
        for target in targets:
            assignment(j, target, "1", exported=False)
        if len(j.findings) > before:
            return False
    return True


def _declaration(j: Judge, name: str, args: list[Word]) -> bool:
    """``export``/``declare``/``local``/``readonly``/``typeset`` assign every argument of
    the form NAME=value, quoted or not (``export 'GIT_CONFIG_COUNT=1'``, ``declare
    "X=y"``, a brace expansion ``export {PATH,X}=/tmp``): judge each (EXE-8b)."""
    flags = "".join(
        w.value[1:]
        for w in args
        if w.value is not None and w.value.startswith("-") and len(w.value) > 1
    )
    exported = name == "export" or "x" in flags
    if "f" in flags and (exported or name == "export"):
        j.ask(f"{name} -f exports a function to the programs it runs", "high")
    integer = "i" in flags
    for word in args:
        value = word.value
        if value is None:
            # `local -i y="$1"`: an integer variable with a value known at run time.
            match = _DECLARED.match(word.text)
            if match is not None and match.group(2) and integer:
                j.shell.integer_names.add(match.group(1))
                j.shell.runtime_values.append(match.group(1))
            continue  # otherwise asked about above (a name only known at run time)
        if value.startswith(("-", "+")) and len(value) > 1:
            continue
        match = _DECLARED.match(value)
        if match is None:
            j.deny(f"{name} argument {short(value, 30)!r} is not a variable name")
            return False
        var = match.group(1)
        assigned = value[match.end() :] if match.group(2) else None
        if integer:
            j.shell.integer_names.add(var)
        if assigned is not None and integer and not _LITERAL_NUMBER.match(assigned):
            arithmetic_text(j, assigned, var)
        assignment(j, var, assigned, exported=exported)
    return True


def _compgen(j: Judge, args: list[Word]) -> bool:
    """``compgen -W WORDS`` / ``-X PATTERN`` expand their text again at run time, with
    command substitution: ``compgen -W '$(id)'`` runs id (EXE-8b)."""
    for k, word in enumerate(args):
        value = word.value
        if value is None or not value.startswith("-") or value == "--":
            continue
        letters = value[1:]
        for option in ("W", "X", "G", "P", "S"):
            if option not in letters:
                continue
            position = letters.index(option)
            attached = letters[position + 1 :]
            text: str | None = attached if attached else None
            if not attached:
                text = args[k + 1].value if k + 1 < len(args) else ""
            if text is None or any(c in text for c in "$`"):
                j.deny(f"compgen -{option} expands its words again (code in them runs)")
                return False
    return True


def arithmetic(j: Judge) -> None:
    """Arithmetic on a value that is not a literal number runs the code in its array
    subscripts (``y='a[$(cmd)]'; echo $((y))``, EXE-8b): every variable bash evaluates
    as arithmetic or as a name must hold a value known here without ``$``/backticks."""
    names = dict.fromkeys((*j.shell.parsed.arithmetic_names, *j.shell.integer_names))
    if not names:
        return
    dynamic = set(j.shell.runtime_values)
    values: dict[str, list[str]] = {}
    for assignment in j.shell.parsed.assignments:
        if assignment.value is None or assignment.value.value is None:
            dynamic.add(assignment.name)
        else:
            values.setdefault(assignment.name, []).append(assignment.value.value)
    for name in names:
        if name.startswith("$"):
            j.ask(
                f"evaluates the text of {short(name, 30)} as arithmetic, only known at run "
                "time (a value like a[$(cmd)] would run cmd)",
                "high",
                immune=True,
            )
            return
        if name.isdigit() or name in ("_", "@", "*"):
            j.ask(
                f"evaluates ${name} as arithmetic: a positional parameter or $_ holds "
                "text from elsewhere (a value like a[$(cmd)] would run cmd)",
                "high",
                immune=True,
            )
            return
        if name in dynamic:
            j.ask(
                f"evaluates ${name} as arithmetic or as a variable name, but its value is "
                "only known at run time (a value like a[$(cmd)] would run cmd)",
                "high",
                immune=True,
            )
            return
        for value in values.get(name, ()):
            arithmetic_text(j, value, name)


def arithmetic_text(j: Judge, text: str, name: str) -> None:
    """A static ``text`` bash evaluates as arithmetic: code in a subscript runs, and an
    assignment in it sets that variable (``y='PATH=1'; : $((y))``)."""
    if _LITERAL_NUMBER.match(text):
        return
    targets, indirect = arithmetic_assignments(text)
    if indirect:
        j.deny(
            f"the value {short(text, 30)!r} of {name} is evaluated as arithmetic and "
            "assigns a variable named only at run time"
        )
        return
    for target in targets:
        assignment(j, target, "1", exported=False)
    if not any(c in text for c in "$`"):
        return
    j.deny(
        f"the value {short(text, 30)!r} of {name} is evaluated as arithmetic, which runs "
        "the command substitutions in its subscripts"
    )


def shell_options(j: Judge) -> None:
    """``set -a`` exports every later assignment; ``set -k`` moves ``NAME=value`` words
    after a command name into its environment, where the analysis cannot follow them
    (EXE-8b): the first is taken into account, the second refused."""
    for raw in j.shell.parsed.commands:
        if raw.name.value not in ("set", "shopt") or raw.name.quoted:
            continue
        j.current = short(" ".join([raw.name.text, *(a.text for a in raw.args)]))
        values = [a.value for a in expanded(raw.args)]
        shopt = raw.name.value == "shopt"
        if shopt and not any(v is not None and v.startswith("-") and "u" in v for v in values):
            # Options that make globs reach more (hidden files, any case, subdirectories,
            # extended patterns): every glob of the line is expanded that way (EXE-8c).
            if any(v is None or v in _WIDER_GLOBS for v in values):
                j.shell.wide_globs = True
        option_names: list[str | None] = []
        takes_name = False
        for value in values:
            if takes_name:
                option_names.append(value)
                takes_name = False
                continue
            if value is None:
                j.ask(f"{raw.name.value} with an option only known at run time", immune=True)
                continue
            if value == "--" and not shopt:
                break  # the rest are positional parameters
            if value.startswith("-") and len(value) > 1:
                letters = value[1:]
                if shopt:
                    if "o" in letters:
                        # `shopt -s -o keyword`: the names are set -o names.
                        option_names.extend(v for v in values if v and v[0] not in "-+")
                    continue
                takes_name = "o" in letters
                if "k" in letters:
                    option_names.append("keyword")
                if "a" in letters:
                    option_names.append("allexport")
            elif value.startswith("+") and not shopt:
                if "o" in value[1:]:
                    takes_name = True
                    option_names.append(None)
            elif not shopt:
                break  # `set x y`: positional parameters
        turning_off = False
        for option in option_names:
            if option is None:
                turning_off = True
                continue
            if turning_off:
                turning_off = False
                continue
            if option == "keyword":
                j.deny(
                    f"{raw.name.value} -k (keyword) moves NAME=value words after a command "
                    "into its environment, which the analysis cannot follow"
                )
            elif option == "allexport":
                j.shell.export_all = True
    j.current = ""
    if not j.shell.wide_globs and any(a.name == "GLOBIGNORE" for a in j.shell.parsed.assignments):
        j.shell.wide_globs = True  # a GLOBIGNORE turns dotglob on


# bash evaluates a value assigned to these as arithmetic at once (OPTIND, RANDOM, SRANDOM
# and HISTCMD have assignment functions of their own): `read OPTIND < f` with f holding
# `a[$(cmd)]` runs cmd, like an integer variable's assignment (EXE-8b).
ARITHMETIC_SPECIALS: Final = frozenset({"OPTIND", "RANDOM", "SRANDOM", "HISTCMD"})


_WIDER_GLOBS: Final = frozenset({"dotglob", "nocaseglob", "globstar", "extglob", "globasciiranges"})


def assignment(j: Judge, name: str, value: str | None = None, *, exported: bool = True) -> None:
    """Judge setting the variable ``name`` (EXE-8b rev 2: an allow-list of what a command
    may set; anything else asks, variables that make commands run other code deny).

    ``exported``: it reaches the environment of commands (a ``X=1 cmd`` prefix, ``env``,
    ``export``, ``declare -x``). A plain ``x=1`` only sets a shell variable, which matters
    only for the variables bash itself reads, the ones already in the command's
    environment, and everything after ``set -a``."""
    key = (name, value, exported)
    if key in j.shell.judged_names:
        return  # `export X=1` is seen as an argument and as an assignment
    j.shell.judged_names.add(key)
    verdict = lists.env_verdict(name, value)
    if verdict == "allow":
        return
    if verdict == "deny":
        j.deny(f"sets {name}, which makes ordinary commands run other code")
        return
    if (
        not exported
        and not j.shell.export_all
        and name not in lists.SHELL_SPECIAL_VARS
        and name not in _EXECUTOR_ENV
    ):
        return
    place = "bash's own" if name in lists.SHELL_SPECIAL_VARS else "the environment's"
    j.ask(
        f"sets {name} ({place} variable): only harmless variables (LANG, LC_*, TZ, "
        "COLUMNS, NO_COLOR ...) may be set without asking",
        "medium",
    )


def _unset(j: Judge, values: list[str | None]) -> bool:
    """``unset NAME…`` (``-v`` variables, ``-f`` functions, ``-n`` the reference itself);
    False after a DENY."""
    functions = False
    for value in values:
        if value is None or value == "--":
            continue
        if value.startswith("-") and len(value) > 1:
            functions = "f" in value and "v" not in value
            continue
        if not functions and not unset_variable(j, value.split("[", 1)[0]):
            return False
    return True


def unset_variable(j: Judge, name: str) -> bool:
    """Removing a variable (``unset``, ``env -u``) is judged like setting it where that
    matters: ``unset PATH; ls`` runs ./ls (bash then looks in the current directory), and
    the executor's ``GIT_CONFIG_*`` / ``HOME`` settings are what keep git's configuration
    to the repository's own (EXE-9). False after a DENY."""
    if name not in _EXECUTOR_ENV:
        return True  # nothing the executor relies on: removing it enables nothing
    verdict = lists.env_verdict(name, "")
    if verdict == "deny":
        why = (
            "without it bash runs commands from the current directory"
            if name == "PATH"
            else "it is part of the executor's neutralisation of git"
        )
        j.deny(f"unsets {name}, which the executor sets for every command ({why})")
        return False
    if verdict == "ask":
        j.ask(f"unsets {name}, which the executor sets for every command", "medium")
    return True


def file_variables(j: Judge) -> None:
    """Assignments of variables that name a file programs write (EXE-8e)."""
    for assignment in j.shell.parsed.assignments:
        file_variable(j, assignment.name, assignment.value)


def file_variable(j: Judge, name: str, value: Word | None) -> None:
    """``GIT_TRACE=/path``, ``HISTFILE=...``: a write of the file named, judged by the
    path sandbox like a redirection."""
    if name.upper() not in FILE_VARIABLES and written_file(name, "x") is None:
        return
    if value is None or value.value is None:
        if value is not None:
            j.effect(
                f"sets {name}, which names a file, to a value only known at run time",
                "high",
                immune=True,
            )
        return
    if value.value.startswith("af_unix:") and name.upper().startswith("GIT_TRACE"):
        # git connects to that socket and writes its trace there (a daemon's socket,
        # /var/run/docker.sock: Landlock does not govern connect() on unix sockets).
        j.ask(
            f"{name}={short(value.value, 40)} makes git send its trace to a unix socket",
            "high",
            immune=True,
        )
        return
    target = written_file(name, value.value)
    if target is None:
        return
    if j.path(literal(target), write=True, what=f"{name}= makes programs write") is not None:
        j.effect(f"{name}={short(target, 40)} makes programs write that file", "low")


_NAMING_BUILTINS: Final = frozenset(
    {"declare", "typeset", "local", "export", "readonly", "let", "unset"}
)


_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_DECLARATION_BUILTINS: Final = frozenset({"declare", "typeset", "local", "export", "readonly"})


_DECLARED: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\])?(\+?=)?")


_LITERAL_NUMBER: Final = re.compile(
    r"\s*[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+(?:#[0-9a-zA-Z@_]+)?)\s*\Z"
)


_EXECUTOR_ENV: Final = frozenset(command_env(cwd="/", tmp_dir="/"))


_STATIC_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\+)?=")


_READ_VALUED: Final = frozenset({"-d", "-i", "-n", "-N", "-p", "-t", "-u"})


_MAPFILE_VALUED: Final = frozenset({"-d", "-n", "-O", "-s", "-u", "-C", "-c"})


_SETTERS: Final = frozenset(
    {
        "read",
        "mapfile",
        "readarray",
        "getopts",
        "printf",
        "wait",
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
        "let",
        "unset",
        "compgen",
    }  # fmt: skip
)


def static_values(parsed: ParsedScript) -> dict[str, list[str] | None]:
    """Every value each variable is given in the script, None for a variable that is also
    given one only known at run time (or appended to, or set by a builtin)."""
    values: dict[str, list[str] | None] = {}
    for assignment in parsed.assignments:
        name = assignment.name
        current = values.get(name, [])
        raw = assignment.raw
        word = assignment.value
        if (
            current is None
            or word is None
            or word.value is None
            or word.glob
            or assignment.kind == "arithmetic"
            or raw.startswith((name + "+=", name + "["))
        ):
            values[name] = None
        else:
            current.append(word.value)
            values[name] = current
    for command in parsed.commands:
        if command.name.value in _SETTERS:
            for word in command.args:
                target = (word.value or word.text).split("=", 1)[0].split("[", 1)[0]
                values[target] = None
    return values
