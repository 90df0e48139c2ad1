"""Commands that change files (rm, cp, mv, chmod, dd, kill ...) and writes through the
output options of commands the lists do not describe (EXE-8e)."""

from __future__ import annotations

import os
import re
from typing import Final

from stockade.executor.bash import lists
from stockade.executor.bash.findings import Judge
from stockade.executor.bash.judges import (
    archives,
)
from stockade.executor.bash.options import (
    OptionArg,
    canonical,
    literal,
    split_arguments,
)
from stockade.executor.bash.parser import Word

# The lists table read for every write command, bound as a Final: mypyc reads it as a C
# static, where ``lists.DENY_OPTIONS`` looks the name up on the module each time.
_DENY_OPTIONS: Final = lists.DENY_OPTIONS


def judge(j: Judge, name: str, spec: lists.WriteSpec, args: list[Word]) -> None:
    """A command that changes files: deny options, then what it reads and writes."""
    if name == "kill":
        _kill(j, args)
        return
    deny_options = _DENY_OPTIONS.get(name, {})
    takes_value = spec.value_options | spec.target_options
    deny_set = frozenset(deny_options)
    operands, found = split_arguments(args, takes_value, (deny_set, takes_value))
    targets: list[Word] = []
    flags: set[str] = set()
    for arg in found:
        value = arg.text
        long_option = canonical(value.split("=", 1)[0], (deny_set, takes_value))
        if long_option in deny_options or value in deny_options:
            j.deny(deny_options.get(long_option) or deny_options[value])
            return
        for option, operand, _ in arg.options:
            flags.add(option)
            if option in deny_options:
                j.deny(deny_options[option])
                return
            if operand is not None and option in spec.target_options:
                targets.append(operand)
    if name == "dd":
        _dd(j, operands)
        return
    if name in archives.ARCHIVERS:
        handled = archives.judge(j, name, args, flags, operands)
        if handled is not None:
            operands = handled
        else:
            return
    if name == "zip" and operands:
        targets, operands = operands[:1], operands[1:]
    reads: list[Word] = []
    if spec.writes == "last":
        if targets:
            reads = operands
        elif operands:
            reads, targets = operands[:-1], operands[-1:]
    elif spec.writes in ("mode_then_paths", "owner_then_paths"):
        if not any(f.startswith("--reference") for f in flags) and operands:
            mode = operands.pop(0)
            if name == "chmod" and mode.value is not None and _setuid_mode(mode.value):
                j.deny("chmod sets the setuid/setgid bit (privilege escalation)")
                return
        targets = operands
    else:
        targets = targets + operands
    if name == "rm":
        _rm_guard(j, targets, flags)
    if name == "mktemp" and not targets:
        j.effect("mktemp creates a temporary file", "low")
        return
    if name in ("ln", "link") or (name == "cp" and flags & _CP_LINK_FLAGS):
        # Where a link points is resolved from its own directory at run time; a later
        # read in the same line may follow it (judged in Walker.created_then_globbed).
        j.creates_links = True
    for word in reads:
        j.path(word, write=False)
    for word in targets:
        j.path(word, write=True, what=f"{name} {spec.what.split()[0]}")
    if name in _BACKUP_WRITERS:
        _backups(j, name, found, targets, reads or operands)
    j.effect(f"{name} {spec.what}", spec.risk)


_BACKUP_WRITERS: Final = frozenset({"cp", "mv", "ln", "install"})


def _backups(
    j: Judge, name: str, found: list[OptionArg], targets: list[Word], sources: list[Word]
) -> None:
    """``cp -b -S rc x .bash`` renames an existing ``.bash`` to ``.bashrc``: a backup is a
    write of TARGET+SUFFIX (``-S`` alone turns backups on), judged like the target (EXE-8e).
    In a target directory the backup is DIR/SOURCE+SUFFIX."""
    backup = False
    suffix: Word | None = literal("~")
    for arg in found:
        for option, operand, _ in arg.options:
            if option in ("-b", "--backup"):
                backup = True
            elif option in ("-S", "--suffix"):
                backup = True
                suffix = operand
    if not backup:
        return
    if suffix is None or suffix.value is None:
        j.effect(f"{name} makes backups with a suffix only known at run time", "high", immune=True)
        return
    for target in targets:
        value = target.value
        if value is None:
            continue
        candidates = [value.rstrip("/") + suffix.value]
        if value.endswith("/") or os.path.isdir(j.absolute(j.expand(value))):
            candidates += [
                os.path.join(value, os.path.basename(s.value.rstrip("/"))) + suffix.value
                for s in sources
                if s.value is not None and s is not target
            ]
        for candidate in candidates:
            j.path(literal(candidate), write=True, what=f"{name} backs up to")


def _rm_guard(j: Judge, targets: list[Word], flags: set[str]) -> None:
    recursive = bool(flags & {"-r", "-R", "--recursive"})
    if "--no-preserve-root" in flags:
        j.deny("rm --no-preserve-root deletes the whole file system")
        return
    for word in targets:
        value = word.path_value
        if value is None or not recursive:
            continue
        path = j.absolute(j.expand(value))
        protected = {"/", j.home, *j.bases, *(r.path for r in j.sandbox.roots)}
        if os.path.normpath(path) in protected or value in ("*", "./*", "."):
            j.deny(f"rm -r {value} deletes a whole root or home directory")


def _kill(j: Judge, args: list[Word]) -> None:
    values = [a.value for a in args]
    # pid 0 is the whole process group and -1 every process we may signal; a leading
    # `-1` alone is a signal number (SIGHUP), so only later ones count.
    if "0" in values or "-1" in values[1:]:
        j.deny("kill of every process (pid -1 or 0)")
        return
    j.effect("kill sends signals to processes", "high")


def _dd(j: Judge, operands: list[Word]) -> None:
    for word in operands:
        value = word.value
        if value is None:
            j.ask("dd with an operand only known at run time", immune=True)
            continue
        key, _, target = value.partition("=")
        if key == "if" and target:
            j.path(literal(target), write=False)
        elif key == "of" and target:
            j.path(literal(target), write=True, what="dd writes")
    j.effect("dd copies raw data", "high")


def output_options(j: Judge, name: str, args: list[Word]) -> None:
    """For a command the lists do not describe: options named like an output file
    (``-o FILE``, ``--output=FILE``, ``--log-file FILE`` ...) are judged as writes, so
    a file outside the writable roots or a protected one is refused (EXE-8e)."""
    for k, word in enumerate(args):
        value = word.value
        if value is None or not value.startswith("-") or value == "-":
            continue
        if value == "--":
            return
        option, eq, attached = value.partition("=")
        target: Word | None = None
        if option in _WRITE_OPTIONS_OF.get(name, ()) and eq:
            target = literal(attached)
        elif option.startswith("--") or (option.startswith("-") and len(option) > 2 and eq):
            named = OUTPUT_OPTION.match(option) or option in _WRITE_OPTIONS_OF.get(name, ())
            if not named and not (eq and _OUTPUT_WORD.search(option) and _PATHLIKE.match(attached)):
                # Other names count only with a value that looks like a path
                # (`--out-file=/x`, `--export=~/y`), not `--log-level=debug`.
                continue
            target = literal(attached) if eq else (args[k + 1] if k + 1 < len(args) else None)
        elif option in _WRITE_OPTIONS_OF.get(name, ()):
            target = (
                literal(value[len(option) :])
                if len(value) > len(option) and not option.startswith("--")
                else (args[k + 1] if k + 1 < len(args) else None)
            )
        elif not option.startswith("--") and len(value) > 2 and not eq:
            # A bundle of short options (`curl -fsSLo FILE`): the first letter that
            # names an output takes the rest of the bundle or the next word.
            writes = _WRITE_OPTIONS_OF.get(name, frozenset()) | (
                frozenset() if name in _O_NOT_OUTPUT else frozenset({"-o"})
            )
            for at in range(1, len(value)):
                if not value[at].isalnum():
                    break  # not a bundle of flags (`-I/opt/x`, `-Wno-error`)
                if "-" + value[at] in writes:
                    rest = value[at + 1 :]
                    target = literal(rest) if rest else (args[k + 1] if k + 1 < len(args) else None)
                    break
        elif value.startswith("-o") and name not in _O_NOT_OUTPUT:
            target = (
                literal(value[2:])
                if len(value) > 2
                else (args[k + 1] if k + 1 < len(args) else None)
            )
        if target is not None and target.value not in ("-", ""):
            j.path(target, write=True, what=f"{name} {option} may write")


_CP_LINK_FLAGS: Final = frozenset({"-s", "--symbolic-link", "-l", "--link"})


def _setuid_mode(mode: str) -> bool:
    if mode.isdigit():
        # Four octal digits: the first carries setuid (4) and setgid (2).
        return len(mode) >= 4 and mode[-4] in "234567"
    return "s" in mode.split("=")[-1] or any("s" in part for part in mode.split(","))


OUTPUT_OPTION: Final = re.compile(
    r"--?(o|out|output|outfile|output-file|output-document|output-dir|output-directory|"
    r"log|log-file|logfile|log-output|xml-file|save|save-file|dump|dump-file|history-file|"
    r"histfile|trace-file|report|report-file|write|write-file|target|target-directory|"
    r"dest|destination|result-file|junitxml|cov-report)\Z"
)


_PIP_TARGETS: Final = frozenset({"-t", "--target", "--prefix", "--root", "--src", "-d", "--dest"})


_WRITE_OPTIONS_OF: Final[dict[str, frozenset[str]]] = {
    # Downloaders: where the body, headers, cookies, traces and logs go.
    "curl": frozenset(
        {
            "-o",
            "--output",
            "--output-dir",
            "-D",
            "--dump-header",
            "-c",
            "--cookie-jar",
            "--trace",
            "--trace-ascii",
            "--stderr",
            "--libcurl",
            "--etag-save",
            "--hsts",
            "--alt-svc",
        }
    ),
    "wget": frozenset(
        {
            "-O",
            "--output-document",
            "-o",
            "--output-file",
            "-a",
            "--append-output",
            "-P",
            "--directory-prefix",
            "--save-cookies",
            "--warc-file",
        }
    ),
    "csplit": frozenset({"-f", "--prefix"}),
    "pip": _PIP_TARGETS,
    "pip3": _PIP_TARGETS,
    "npm": frozenset({"--prefix", "--cache", "--pack-destination"}),
    "uv": frozenset({"--target", "--prefix", "-o"}),
}


_OUTPUT_WORD: Final = re.compile(
    r"out|log|dump|save|write|export|report|hist|trace|dest|target|cookie"
)


_PATHLIKE: Final = re.compile(r"[/~.]")


_O_NOT_OUTPUT: Final = frozenset(
    {"mount", "ssh", "scp", "sftp", "ps", "ls", "column", "pr", "join", "make", "gmake"}
)
