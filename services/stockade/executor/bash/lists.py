"""Every command list the bash analysis uses, as data, each entry with the reason for it.

The judgement (walker.py and judges/) holds the procedure; this module holds the knowledge: which
commands are read-only and how their arguments read, which commands wrap other commands,
which are refused and why. To change what is allowed, change this file.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final, Literal

from stockade.contract.shell import SYSTEM_BIN_DIRS, WRAPPERS, WrapperSpec

__all__ = [
    "BENIGN_GIT_CONFIG_PREFIXES",
    "ALLOWED_ENV_PREFIXES",
    "ALLOWED_ENV_VALUES",
    "ALLOWED_ENV_VARS",
    "CREDENTIAL_BASENAMES",
    "CREDENTIAL_PATHS",
    "DANGEROUS_ENV_PREFIXES",
    "DANGEROUS_ENV_VARS",
    "DENY_COMMANDS",
    "DENY_OPTIONS",
    "EVAL_COMMANDS",
    "GIT_FILTER_OPTIONS",
    "GIT_NETWORK_SUBCOMMANDS",
    "GIT_READ_SUBCOMMANDS",
    "GIT_WRITE_SUBCOMMANDS",
    "HARMLESS_BUILTINS",
    "INTERPRETERS",
    "INTERPRETER_INFO_FLAGS",
    "NETWORK_COMMANDS",
    "NETWORK_SUBCOMMANDS",
    "PACKAGE_MANAGERS",
    "SAFE_COMMANDS",
    "SAFE_DEVICES",
    "SHELLS",
    "SHELL_SPECIAL_VARS",
    "SYSTEM_BIN_DIRS",
    "VARIABLE_BUILTINS",
    "WRAPPERS",
    "WRITE_COMMANDS",
    "InterpreterSpec",
    "SafeSpec",
    "WrapperSpec",
    "WriteSpec",
    "env_verdict",
]

Operands = Literal["paths", "none", "pattern_then_paths", "filter_then_paths"]


@dataclass(frozen=True)
class SafeSpec:
    """A read-only command and how to read its arguments."""

    operands: Operands = "paths"
    """What the non-option arguments are: files read (``paths``), not files (``none``),
    a pattern then files (grep), a filter/program then files (jq)."""
    value_options: frozenset[str] = frozenset()
    """Options whose value is the next argument and is not a path (``head -n 5``)."""
    read_options: frozenset[str] = frozenset()
    """Options whose value is a file that is read (``grep -f FILE``)."""
    write_options: frozenset[str] = frozenset()
    """Options whose value is a file that is written (``sort -o FILE``): makes it a write."""
    ask_options: frozenset[str] = frozenset()
    """Options that give the command side effects (so it is no longer read-only)."""
    deny_options: frozenset[str] = frozenset()
    """Options that make the command run other programs (``rg --pre CMD``)."""
    pattern_options: frozenset[str] = frozenset()
    """Options that supply the pattern, so the first operand is a file (``grep -e PAT``)."""
    names_options: frozenset[str] = frozenset()
    """Options whose value is a file naming more files the command reads and prints
    (``sort --files0-from=F``): a read of F, and of files only known at run time."""
    names_flags: frozenset[str] = frozenset()
    """Flags that make the operands lists of more files the command reads
    (``md5sum -c LIST``): a read of each list, and of files only known at run time."""
    optional_options: frozenset[str] = frozenset()
    """Options whose value is optional, so only ever attached (``--color[=WHEN]``,
    ``-I[FMT]``): the next word is never their value (``grep --color x FILE`` reads FILE)."""
    what: str = "reads files"
    """Words for the explanation (DEC-10)."""

    @functools.cached_property
    def takes_value(self) -> frozenset[str]:
        """Every option that takes a value (made once per spec, not per command)."""
        return (
            self.value_options
            | self.read_options
            | self.write_options
            | self.pattern_options
            | self.names_options
        )


def _f(*options: str) -> frozenset[str]:
    return frozenset(options)


_GREP: Final = SafeSpec(
    operands="pattern_then_paths",
    value_options=_f(
        "-A",
        "-B",
        "-C",
        "-m",
        "--max-count",
        "--context",
        "--after-context",
        "--before-context",
        "--include",
        "--exclude",
        "--exclude-dir",
        "--label",
        "-d",
        "--directories",
        "-D",
        "--devices",
        "--binary-files",
        "--group-separator",
    ),
    read_options=_f("-f", "--file", "--exclude-from"),
    pattern_options=_f("-e", "--regexp", "-f", "--file"),
    # --color[=WHEN]: `grep --color root /etc/shadow` reads /etc/shadow.
    optional_options=_f("--color", "--colour"),
    what="searches files",
)

_RG: Final = SafeSpec(
    operands="pattern_then_paths",
    value_options=_f(
        "-A",
        "-B",
        "-C",
        "-m",
        "-g",
        "--glob",
        "--iglob",
        "-t",
        "--type",
        "-T",
        "--type-not",
        "--max-count",
        "--max-depth",
        "-d",
        "--color",
        "-M",
        "--max-columns",
        "-j",
        "--threads",
        "--sort",
        "--sortr",
        "-r",
        "--replace",
        "--context",
        "--after-context",
        "--before-context",
        "--type-add",
        "-E",
        "--encoding",
        "--max-filesize",
        "--colors",
        "--path-separator",
    ),
    read_options=_f("-f", "--file", "--ignore-file"),
    pattern_options=_f("-e", "--regexp", "-f", "--file"),
    # --pre runs an arbitrary program on every file searched: code execution.
    deny_options=_f("--pre", "--hostname-bin"),
    what="searches files",
)

_PLAIN: Final = SafeSpec()
# -c LIST checks the files LIST names: which ones is only known at run time.
_SUMS: Final = SafeSpec(names_flags=_f("-c", "--check"))
_NO_FILES: Final = SafeSpec(operands="none", what="prints text")

SAFE_COMMANDS: Final[dict[str, SafeSpec]] = {
    # --- the seed's SAFE list (EXE-7), each read-only when its arguments are ---
    "ls": SafeSpec(
        value_options=_f(
            "-I",
            "--ignore",
            "-w",
            "--width",
            "--format",
            "--sort",
            "--time",
            "-T",
            "--tabsize",
            "--block-size",
            "--hide",
            "--time-style",
            "--quoting-style",
            "--indicator-style",
        ),
        # Optional values, attached only (`ls --color ~/.ssh` lists ~/.ssh).
        optional_options=_f("--color", "--hyperlink", "--classify"),
        what="lists files",
    ),
    "cat": _PLAIN,  # prints files
    "head": SafeSpec(value_options=_f("-n", "-c", "--lines", "--bytes")),  # first lines
    # Prints the end of files (-f only waits, bounded by the timeout).
    "tail": SafeSpec(
        value_options=_f(
            "-n",
            "-c",
            "--lines",
            "--bytes",
            "-s",
            "--sleep-interval",
            "--pid",
            "--max-unchanged-stats",
        )
    ),
    # find is judged by its own expression parser (actions -delete/-exec/-fprint ...).
    "find": SafeSpec(what="lists files"),
    "grep": _GREP,  # searches files; -f FILE is judged as a read
    "egrep": _GREP,  # grep -E
    "fgrep": _GREP,  # grep -F
    # Counts; --files0-from names files it reads.
    "wc": SafeSpec(names_options=_f("--files0-from"), what="counts lines in files"),
    "echo": _NO_FILES,  # prints its arguments, touches no file
    # Prints its arguments; -v NAME is judged as an assignment.
    "printf": SafeSpec(operands="none", value_options=_f("-v"), what="prints text"),
    "pwd": _NO_FILES,  # prints the working directory
    # sort -o / -T write files; --compress-program runs a program.
    "sort": SafeSpec(
        value_options=_f(
            "-k",
            "--key",
            "-t",
            "--field-separator",
            "-S",
            "--buffer-size",
            "--parallel",
            "--batch-size",
            "--sort",
        ),
        read_options=_f("--random-source"),
        # The files named in FILE are printed: which ones is only known at run time.
        names_options=_f("--files0-from"),
        write_options=_f("-o", "--output", "-T", "--temporary-directory"),
        deny_options=_f("--compress-program"),
        what="sorts lines",
    ),
    # uniq's second operand is an output file: judged in judges/readers.py.
    "uniq": SafeSpec(
        value_options=_f(
            "-f",
            "-s",
            "-w",
            "--skip-fields",
            "--skip-chars",
            "--check-chars",
        ),
        # Attached values only: `uniq --group /etc/shadow` reads /etc/shadow.
        optional_options=_f("--group", "--all-repeated"),
        what="filters lines",
    ),
    # Cuts columns from files.
    "cut": SafeSpec(
        value_options=_f(
            "-b",
            "-c",
            "-d",
            "-f",
            "--bytes",
            "--characters",
            "--delimiter",
            "--fields",
            "--output-delimiter",
        ),
        what="cuts columns",
    ),
    "tr": SafeSpec(operands="none", what="translates characters"),  # only stdin → stdout
    # awk and sed are judged by their program text (system(), pipes, e/w commands).
    "awk": SafeSpec(operands="filter_then_paths", what="processes text"),
    # GNU awk, same checks (plus -l/@load refused).
    "gawk": SafeSpec(operands="filter_then_paths", what="processes text"),
    "mawk": SafeSpec(operands="filter_then_paths", what="processes text"),  # awk, same checks
    "nawk": SafeSpec(operands="filter_then_paths", what="processes text"),  # awk, same checks
    # Judged by its script: e/w/r commands and -i are caught.
    "sed": SafeSpec(operands="filter_then_paths", what="processes text"),
    # A JSON filter; it cannot run programs; its file options are reads.
    "jq": SafeSpec(
        operands="filter_then_paths",
        # (--tab and --seq are flags: `jq --tab . FILE` reads FILE.)
        value_options=_f("--arg", "--argjson", "--indent", "-L"),
        read_options=_f("-f", "--from-file", "--slurpfile", "--rawfile"),
        what="queries JSON",
    ),
    # Compares files; GNU diff runs no programs.
    "diff": SafeSpec(
        value_options=_f(
            "-U",
            "-C",
            "-I",
            "--ignore-matching-lines",
            "--label",
            "-W",
            "--width",
            "-x",
            "--exclude",
            "--line-format",
            "-F",
        ),
        read_options=_f("--from-file", "--to-file", "-X", "--exclude-from"),
        # --unified[=NUM], --context[=NUM]: `diff --unified /etc/shadow x` prints it.
        optional_options=_f("--unified", "--context", "--color"),
        what="compares files",
    ),
    # Reads file headers; -C writes a compiled magic file.
    "file": SafeSpec(
        value_options=_f("-F", "--separator", "-P", "--parameter"),
        read_options=_f("-m", "--magic-file"),
        # -f LIST: the types of the files LIST names (only known at run time).
        names_options=_f("-f", "--files-from"),
        # -C compiles a magic file: it writes one.
        ask_options=_f("-C", "--compile"),
        what="identifies file types",
    ),
    # Prints metadata.
    "stat": SafeSpec(value_options=_f("-c", "--format", "--printf"), what="shows file metadata"),
    # Sums file sizes.
    "du": SafeSpec(
        value_options=_f(
            "-d",
            "--max-depth",
            "-B",
            "--block-size",
            "-t",
            "--threshold",
            "--exclude",
            "--time-style",
        ),
        read_options=_f("-X", "--exclude-from"),
        names_options=_f("--files0-from"),
        # --time[=WORD] is an option of its own, not an abbreviation of --time-style.
        optional_options=_f("--time"),
        what="measures disk usage",
    ),
    # Prints free space.
    "df": SafeSpec(
        value_options=_f("-B", "--block-size", "-t", "--type", "-x", "--exclude-type"),
        optional_options=_f("--output"),  # --output[=FIELD_LIST]
        what="shows free disk space",
    ),
    # `env` alone prints the environment; with a command it is a wrapper (WRAPPERS).
    "env": SafeSpec(operands="none", what="prints the environment"),
    "printenv": SafeSpec(operands="none", what="prints the environment"),  # prints the environment
    "which": SafeSpec(operands="none", what="locates commands"),  # looks commands up on PATH
    # String operation on its argument, touches no file.
    "basename": SafeSpec(
        operands="none", value_options=_f("-s", "--suffix"), what="manipulates a path string"
    ),
    # String operation on its argument, touches no file.
    "dirname": SafeSpec(operands="none", what="manipulates a path string"),
    # Resolves paths without reading contents.
    "realpath": SafeSpec(
        read_options=_f("--relative-to", "--relative-base"), what="resolves paths"
    ),
    "readlink": SafeSpec(what="resolves links"),  # reads link targets
    # tee writes every operand: judged in judges/readers.py (a file operand makes it a write).
    "tee": SafeSpec(what="copies input to files"),
    # Prints the date; -s sets the clock (refused).
    "date": SafeSpec(
        operands="none",
        value_options=_f("-d", "--date", "--rfc-3339"),
        # -r FILE prints FILE's time (`stat FILE`).
        read_options=_f("-f", "--file", "-r", "--reference"),
        # -I[FMT], --iso-8601[=FMT]: `date -I -f FILE` reads FILE (and prints its lines).
        optional_options=_f("-I", "--iso-8601"),
        # -s sets the system clock.
        deny_options=_f("-s", "--set"),
        what="prints the date",
    ),
    "sleep": _NO_FILES,  # waits
    "true": _NO_FILES,  # does nothing
    "false": _NO_FILES,  # does nothing
    # --- more read-only tools an agent uses all the time ---
    ":": _NO_FILES,  # the null builtin
    "test": _NO_FILES,  # evaluates a condition (`[` is parsed as a test)
    "[": _NO_FILES,  # same as test
    # Numbers lines.
    "nl": SafeSpec(value_options=_f("-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w")),
    "tac": _PLAIN,  # prints files backwards
    "rev": _PLAIN,  # reverses lines
    # Formats columns.
    # (-t is --table, a flag: `column -t FILE` reads FILE.)
    "column": SafeSpec(value_options=_f("-s", "-c", "-o", "-N", "-R", "-H")),
    "fold": SafeSpec(value_options=_f("-w", "--width")),  # wraps lines
    "fmt": SafeSpec(value_options=_f("-w", "--width", "-p", "--prefix")),  # reflows text
    "paste": SafeSpec(value_options=_f("-d", "--delimiters")),  # merges lines of files
    # Joins sorted files.
    "join": SafeSpec(value_options=_f("-1", "-2", "-j", "-t", "-o", "-a", "-v", "-e")),
    "comm": _PLAIN,  # compares sorted files
    # Compares files byte by byte.
    "cmp": SafeSpec(value_options=_f("-i", "--ignore-initial", "-n", "--bytes")),
    "md5sum": _SUMS,  # checksums
    "sha1sum": _SUMS,  # checksums
    "sha256sum": _SUMS,  # checksums
    "sha512sum": _SUMS,  # checksums
    "b2sum": SafeSpec(value_options=_f("-l", "--length"), names_flags=_f("-c", "--check")),
    "cksum": SafeSpec(
        value_options=_f("-a", "--algorithm", "-l", "--length"), names_flags=_f("-c", "--check")
    ),
    # Hex dump; a second operand is an output file (judged in judges/readers.py).
    "xxd": SafeSpec(
        value_options=_f("-l", "-s", "-c", "-g", "-o", "-len", "-seek", "-cols", "-groupsize")
    ),
    # Octal dump.
    "od": SafeSpec(
        value_options=_f(
            "-A",
            "-j",
            "-N",
            "-t",
            # (-w[BYTES]: attached only; `od -w FILE` reads FILE.)
            "--address-radix",
            "--skip-bytes",
            "--read-bytes",
            "--format",
        ),
        optional_options=_f("-w", "--width", "--strings"),  # -w[BYTES], --strings[=BYTES]
    ),
    # Hex dump; -f FILE reads a format file (and prints it back in its error message).
    "hexdump": SafeSpec(
        value_options=_f("-n", "-s", "-e", "--length", "--skip", "--format"),
        read_options=_f("-f", "--format-file"),
    ),
    # Prints printable strings.
    "strings": SafeSpec(value_options=_f("-n", "-t", "--bytes", "--radix")),
    # Lists directories; -o writes a file.
    "tree": SafeSpec(
        value_options=_f(
            "-L", "-P", "-I", "-H", "-T", "--charset", "--filelimit", "--sort", "--timefmt"
        ),
        # Files tree reads: .info and .gitignore files, the HTML intro and outro.
        read_options=_f("--infofile", "--gitfile", "--hintro", "--houtro"),
        write_options=_f("-o"),
        # -R runs tree again in every directory with `-o 00Tree.html`: it writes there.
        ask_options=_f("-R"),
        what="lists files",
    ),
    "whoami": _NO_FILES,  # prints the user name
    "id": _NO_FILES,  # prints user and groups
    "uname": _NO_FILES,  # prints the kernel name
    # Prints the host name; with an operand it would set it (refused).
    "hostname": SafeSpec(
        operands="none", ask_options=_f("-F", "--file", "-b", "--boot"), what="prints the host name"
    ),
    "nproc": _NO_FILES,  # prints the CPU count
    "uptime": _NO_FILES,  # prints load and uptime
    "seq": _NO_FILES,  # prints numbers
    "yes": _NO_FILES,  # prints a line forever (bounded by the executor's timeout)
    "expr": _NO_FILES,  # arithmetic on its arguments
    "type": SafeSpec(operands="none", what="describes commands"),  # describes how a name would run
    "whereis": SafeSpec(operands="none", what="locates commands"),  # locates binaries and manuals
    "rg": _RG,  # ripgrep; --pre runs programs (refused)
    # The silver searcher; --pager runs a program (refused).
    "ag": SafeSpec(
        operands="pattern_then_paths",
        # --pager runs a program on the output.
        deny_options=_f("--pager"),
        value_options=_f(
            "-A", "-B", "-C", "-G", "-m", "-W", "--depth", "--ignore", "--ignore-dir", "--width"
        ),
        # -p FILE: an ignore file it reads.
        read_options=_f("-p", "--path-to-ignore"),
        # -g PATTERN: file names matching PATTERN; every operand is a path.
        pattern_options=_f("-g"),
        what="searches files",
    ),
    # Lists files; -x/-X run programs (refused).
    "fd": SafeSpec(
        operands="pattern_then_paths",
        value_options=_f(
            "-e",
            "--extension",
            "-t",
            "--type",
            "-d",
            "--max-depth",
            "-E",
            "--exclude",
            "-S",
            "--size",
            "-c",
            "--color",
            "-j",
            "--threads",
            "-o",
            "--owner",
            "--and",
            "--max-results",
            "--min-depth",
            "--exact-depth",
            "--changed-within",
            "--changed-before",
            "--change-newer-than",
            "--change-older-than",
            "--newer",
            "--older",
            "--format",
            "--batch-size",
            "--path-separator",
            "--max-buffer-time",
        ),
        # Directories it searches (--base-directory also moves the base of relative
        # paths: judged in judges/readers.py) and an ignore file it reads.
        read_options=_f("--base-directory", "--search-path", "--ignore-file"),
        # -x/-X run a command per result.
        deny_options=_f("-x", "--exec", "-X", "--exec-batch"),
        what="lists files",
    ),
    "cd": SafeSpec(what="changes directory"),  # judged in judges/readers.py (moves the base)
    "pushd": SafeSpec(what="changes directory"),  # like cd (moves the base for relative paths)
    # Returns to a directory already judged.
    "popd": SafeSpec(operands="none", what="changes directory"),
    "dirs": _NO_FILES,  # prints the directory stack
    "set": _NO_FILES,  # `set -euo pipefail` only changes shell options
    # Reads stdin into variables (targets judged as assignments).
    "read": SafeSpec(operands="none", value_options=_f("-p", "-d", "-n", "-N", "-t", "-u", "-a")),
    "wait": _NO_FILES,  # waits for background jobs
    "jobs": _NO_FILES,  # lists background jobs
    "shift": _NO_FILES,  # shifts positional parameters
    "getopts": _NO_FILES,  # parses options into a variable (judged as an assignment)
    "break": _NO_FILES,  # loop control
    "continue": _NO_FILES,  # loop control
    "return": _NO_FILES,  # function control
    "exit": _NO_FILES,  # ends the shell
    "unset": _NO_FILES,  # unsets variables (declaration node)
    "export": _NO_FILES,  # assignments judged separately (dangerous variables)
    "declare": _NO_FILES,  # declares variables (names and values judged as assignments)
    "typeset": _NO_FILES,  # same as declare
    "local": _NO_FILES,  # same as declare, in a function
    "readonly": _NO_FILES,  # same as declare
    "let": _NO_FILES,  # arithmetic; `$(` in its text is caught as evaluated code
    "tput": _NO_FILES,  # prints terminal capabilities
    "locale": _NO_FILES,  # prints locale settings
    "groups": _NO_FILES,  # prints group membership
    "arch": _NO_FILES,  # prints the machine architecture
    "cal": _NO_FILES,  # prints a calendar
    "numfmt": _NO_FILES,  # formats numbers
    "sha224sum": _SUMS,  # checksums
    "sha384sum": _SUMS,  # checksums
    "base32": _PLAIN,  # encodes; decoding only prints
    "base64": _PLAIN,  # encodes or decodes to stdout
    # Converts encodings; -o writes a file.
    # An encoding name with a `/` is a charmap file iconv reads (`iconv -f /etc/shadow`).
    "iconv": SafeSpec(
        read_options=_f("-f", "-t", "--from-code", "--to-code"), write_options=_f("-o", "--output")
    ),
    "zcat": _PLAIN,  # prints compressed files
    "bzcat": _PLAIN,
    "xzcat": _PLAIN,  # prints compressed files
    # Lists open files (metadata only).
    "lsof": SafeSpec(operands="none", what="lists open files"),
    # Lists processes (the executor sees only its own pod).
    "ps": SafeSpec(operands="none", what="lists processes"),
    "free": _NO_FILES,  # prints memory use
    "getconf": _NO_FILES,  # prints system limits
    # Wrappers used alone (WRAPPERS handles them with a command): they run nothing.
    "command": SafeSpec(operands="none", what="describes commands"),  # `command -v git`
    "builtin": _NO_FILES,
    "exec": _NO_FILES,  # `exec >log 2>&1`: only its redirections count (judged separately)
    "nice": _NO_FILES,  # prints the niceness
    "nohup": _NO_FILES,
    "time": _NO_FILES,  # alone: times nothing
    "timeout": _NO_FILES,  # alone: a usage error
    "stdbuf": _NO_FILES,  # alone: a usage error
    "setsid": _NO_FILES,  # alone: a usage error
    "xargs": _NO_FILES,  # runs echo on its input
    # -C/-F run a callback or function of shell code.
    "mapfile": SafeSpec(
        operands="none", value_options=_f("-d", "-n", "-O", "-s", "-u", "-c"), deny_options=_f("-C")
    ),
    # Same as mapfile.
    "readarray": SafeSpec(
        operands="none", value_options=_f("-d", "-n", "-O", "-s", "-u", "-c"), deny_options=_f("-C")
    ),
    # Prints completions; -C/-F run code (refused).
    # -W/-X expand their words again (`compgen -W '$(id)'` runs id): judged in judges/variables.py.
    "compgen": SafeSpec(
        operands="none",
        deny_options=_f("-C", "-F"),
        value_options=_f("-W", "-X", "-G", "-P", "-S", "-A", "-o", "-V"),
    ),
    # `hash -p /bin/bash cat` makes `cat` run a shell (BASH_CMDS by another name).
    "hash": SafeSpec(operands="none", deny_options=_f("-p")),
}
"""Read-only commands (EXE-7's SAFE list, extended): ALLOW when every argument check passes."""

HARMLESS_BUILTINS: Final = frozenset({"set", "shift", "wait", "jobs", "true", "false", ":"})
"""Builtins that only change this shell's own state: never a reason to ask."""


SHELLS: Final = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "zsh",
        "ksh",
        "mksh",
        "pdksh",
        "csh",
        "tcsh",
        "fish",
        "ash",
        "rbash",
        "yash",
        "elvish",
        "nu",
        "xonsh",
        "pwsh",
        "powershell",
        "rc",
        "es",
        "oksh",
        "loksh",
        "posh",
    }
)
"""Shells: a shell runs text the analysis cannot see (EXE-6: bare shells and ``-c`` refused)."""

EVAL_COMMANDS: Final[dict[str, str]] = {
    "eval": "eval runs a string as shell code, which cannot be checked before it runs",
    "source": "source runs a file's commands in this shell",
    ".": "`.` runs a file's commands in this shell",
    "trap": "trap stores shell code to run later",
    "fc": "fc re-runs commands from the history",
    "alias": "alias redefines command names",
    "enable": "enable can load builtins from shared libraries",
    "bind": "bind maps keys to shell commands",
    "complete": "complete stores shell code to run later",
}
"""Builtins that run or store shell code: DENY (``source FILE`` of a plain file: ASK)."""


VARIABLE_BUILTINS: Final = frozenset(
    {
        "read",
        "mapfile",
        "readarray",
        "getopts",
        "printf",
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
        "unset",
        "let",
        "test",
        "[",
        "wait",
        "compgen",
    }
)
"""Builtins whose arguments name variables or arithmetic: a static argument with ``$(``
in it is code bash runs when it evaluates an array subscript (``test -v 'a[$(id)]'``)."""

DENY_COMMANDS: Final[dict[str, str]] = {
    # Privilege escalation: the executor must never gain rights it was not given.
    "sudo": "sudo runs commands as another user",
    "su": "su switches user",
    "doas": "doas runs commands as another user",
    "pkexec": "pkexec runs commands as another user",
    "sudoedit": "sudoedit edits files as another user",
    "runuser": "runuser runs commands as another user",
    "sg": "sg runs commands with another group",
    "newgrp": "newgrp switches group",
    "chroot": "chroot changes the root directory (needs privileges; escapes path checks)",
    "unshare": "unshare manipulates namespaces",
    "nsenter": "nsenter enters other namespaces",
    "setpriv": "setpriv changes process privileges",
    "capsh": "capsh changes capabilities and runs a shell",
    "firejail": "firejail starts another sandbox",
    "bwrap": "bwrap starts another sandbox",
    "systemd-run": "systemd-run starts commands outside this sandbox",
    "machinectl": "machinectl controls containers",
    "docker": "docker controls containers (root-equivalent)",
    "podman": "podman controls containers",
    "kubectl": "kubectl controls a cluster",
    "crictl": "crictl controls containers",
    # Interactive programs with shell escapes (GTFOBins): editors and pagers.
    "vi": "vi is an interactive editor with shell escapes",
    "vim": "vim is an interactive editor with shell escapes (`:!sh`, `-c`)",
    "nvim": "nvim is an interactive editor with shell escapes",
    "view": "view is vim, with shell escapes",
    "vimdiff": "vimdiff is vim, with shell escapes",
    "ex": "ex is an editor with shell escapes",
    "ed": "ed is an editor with shell escapes (`!sh`)",
    "emacs": "emacs is an interactive editor with shell escapes",
    "nano": "nano is an interactive editor (and can run commands)",
    "pico": "pico is an interactive editor",
    "joe": "joe is an interactive editor",
    "mcedit": "mcedit is an interactive editor",
    "less": "less is an interactive pager with shell escapes (`!sh`)",
    "more": "more is an interactive pager with shell escapes (`!sh`)",
    "most": "most is an interactive pager with shell escapes",
    "pg": "pg is an interactive pager with shell escapes",
    "man": "man runs a pager with shell escapes",
    "info": "info is an interactive reader",
    "screen": "screen starts shells",
    "tmux": "tmux starts shells",
    "script": "script starts a shell",
    "expect": "expect runs scripted shells",
    "watch": "watch runs its command through sh -c",
    "entr": "entr runs commands whenever files change",
    "run-parts": "run-parts runs every script in a directory",
    "ssh-agent": "ssh-agent holds private keys (and runs a command with them)",
    "parallel": "GNU parallel runs its commands through a shell",
    "strace": "strace runs and controls other programs",
    "ltrace": "ltrace runs and controls other programs",
    "gdb": "gdb can run arbitrary code",
    "lldb": "lldb can run arbitrary code",
    "mc": "mc is an interactive file manager with a shell",
    "ftp": "ftp is interactive, with shell escapes and network",
    # Destruction of disks, file systems and the machine.
    "mkfs": "mkfs formats a file system",
    "mke2fs": "mke2fs formats a file system",
    "mkswap": "mkswap formats a swap area",
    "fdisk": "fdisk edits partition tables",
    "sfdisk": "sfdisk edits partition tables",
    "parted": "parted edits partition tables",
    "wipefs": "wipefs erases file-system signatures",
    "shred": "shred destroys file contents irrecoverably",
    "wipe": "wipe destroys file contents irrecoverably",
    "blkdiscard": "blkdiscard erases a device",
    "hdparm": "hdparm changes disk settings",
    "shutdown": "shutdown stops the machine",
    "reboot": "reboot restarts the machine",
    "halt": "halt stops the machine",
    "poweroff": "poweroff stops the machine",
    "init": "init changes the run level",
    "telinit": "telinit changes the run level",
    "systemctl": "systemctl controls system services",
    "service": "service controls system services",
    "mount": "mount changes the file-system layout",
    "umount": "umount changes the file-system layout",
    "swapon": "swapon changes system memory",
    "swapoff": "swapoff changes system memory",
    "insmod": "insmod loads kernel modules",
    "rmmod": "rmmod unloads kernel modules",
    "modprobe": "modprobe loads kernel modules",
    "sysctl": "sysctl changes kernel settings",
    "iptables": "iptables changes the firewall",
    "ip6tables": "ip6tables changes the firewall",
    "nft": "nft changes the firewall",
    "ifconfig": "ifconfig changes network interfaces",
    "route": "route changes routing",
    "ip": "ip changes network configuration",
    "killall": "killall kills processes by name",
    "pkill": "pkill kills processes by name",
    # Accounts and credentials.
    "useradd": "useradd creates accounts",
    "userdel": "userdel deletes accounts",
    "usermod": "usermod changes accounts",
    "adduser": "adduser creates accounts",
    "deluser": "deluser deletes accounts",
    "groupadd": "groupadd creates groups",
    "passwd": "passwd changes passwords",
    "chpasswd": "chpasswd changes passwords",
    "visudo": "visudo edits sudo rules",
    "ssh-keygen": "ssh-keygen creates or changes keys",
    "ssh-add": "ssh-add loads private keys into an agent",
    "gpg": "gpg handles private keys",
    "security": "security reads keychains",
    "secret-tool": "secret-tool reads stored secrets",
    # Persistence: scheduled and background jobs outlive the call.
    "crontab": "crontab installs scheduled jobs (persistence)",
    "at": "at schedules jobs (persistence)",
    "batch": "batch schedules jobs (persistence)",
    "disown": "disown detaches jobs so they outlive the call",
    "start-stop-daemon": "start-stop-daemon starts daemons",
    "daemonize": "daemonize starts daemons",
    # System package managers change the machine, not the project.
    "apt": "apt installs system packages",
    "apt-get": "apt-get installs system packages",
    "aptitude": "aptitude installs system packages",
    "dpkg": "dpkg installs system packages",
    "yum": "yum installs system packages",
    "dnf": "dnf installs system packages",
    "rpm": "rpm installs system packages",
    "apk": "apk installs system packages",
    "pacman": "pacman installs system packages",
    "zypper": "zypper installs system packages",
    "snap": "snap installs system packages",
    "flatpak": "flatpak installs system packages",
    "brew": "brew installs system packages",
    "nix-env": "nix-env installs system packages",
    # Code from strings or other languages reached through innocuous-looking tools.
    "xdg-open": "xdg-open launches programs",
    "open": "open launches programs",
    "osascript": "osascript runs AppleScript",
}
"""Refused outright, whatever the arguments: destructive, privilege-escalating,
shell-spawning, persistent or interactive programs (EXE-7's DANGEROUS list, extended)."""

NETWORK_COMMANDS: Final[dict[str, str]] = {
    "curl": "downloads or uploads data",
    "wget": "downloads data",
    "nc": "opens raw network connections",
    "ncat": "opens raw network connections",
    "netcat": "opens raw network connections",
    "socat": "relays network connections",
    "telnet": "opens network connections",
    "ssh": "logs in to another machine",
    "scp": "copies files over the network",
    "sftp": "copies files over the network",
    "rsync": "copies files, possibly over the network",
    "tftp": "copies files over the network",
    "lftp": "copies files over the network",
    "aria2c": "downloads data",
    "axel": "downloads data",
    "http": "sends HTTP requests (httpie)",
    "https": "sends HTTP requests (httpie)",
    "xh": "sends HTTP requests",
    "websocat": "opens websocket connections",
    "ssh-keyscan": "contacts remote hosts",
    "nmap": "scans the network",
    "ping": "sends network packets",
    "traceroute": "sends network packets",
    "mtr": "sends network packets",
    "dig": "queries DNS",
    "nslookup": "queries DNS",
    "host": "queries DNS",
    "whois": "queries remote servers",
    "openssl": "can open TLS connections (s_client) and handle keys",
    "gh": "calls the GitHub API",
    "aws": "calls a cloud API with stored credentials",
    "gcloud": "calls a cloud API with stored credentials",
    "az": "calls a cloud API with stored credentials",
    "gsutil": "copies data to cloud storage",
    "rclone": "copies data to remote storage",
    "s3cmd": "copies data to cloud storage",
    "smbclient": "copies files over the network",
    "mail": "sends mail",
    "torsocks": "runs a command through Tor",
    "proxychains": "runs a command through proxies",
    "proxychains4": "runs a command through proxies",
    "sendmail": "sends mail",
    "mutt": "sends mail",
}
"""Network tools (EXE-7's NETWORK list): DENY unless network is enabled, then ASK."""


@dataclass(frozen=True)
class InterpreterSpec:
    """A language runtime: a script file is ASK, inline code too, stdin programs DENY."""

    inline_options: frozenset[str]
    """Options whose value is program text (``python -c CODE``)."""
    value_options: frozenset[str] = frozenset()
    """Other options that take a value."""
    module_options: frozenset[str] = frozenset()
    """Options that name a module to run instead of a file (``python -m``)."""
    language: str = ""
    """Words for the explanation."""


INTERPRETERS: Final[dict[str, InterpreterSpec]] = {
    "python": InterpreterSpec(_f("-c"), _f("-W", "-X", "-Q"), _f("-m"), "Python"),
    "python3": InterpreterSpec(_f("-c"), _f("-W", "-X", "-Q"), _f("-m"), "Python"),
    "python2": InterpreterSpec(_f("-c"), _f("-W", "-X", "-Q"), _f("-m"), "Python"),
    "pypy": InterpreterSpec(_f("-c"), _f("-W", "-X"), _f("-m"), "Python"),
    "pypy3": InterpreterSpec(_f("-c"), _f("-W", "-X"), _f("-m"), "Python"),
    "perl": InterpreterSpec(_f("-e", "-E"), _f("-I", "-M", "-m"), frozenset(), "Perl"),
    "ruby": InterpreterSpec(_f("-e"), _f("-I", "-r"), frozenset(), "Ruby"),
    "node": InterpreterSpec(
        _f("-e", "--eval", "-p", "--print"), _f("-r", "--require"), frozenset(), "JavaScript"
    ),
    "nodejs": InterpreterSpec(
        _f("-e", "--eval", "-p", "--print"), _f("-r", "--require"), frozenset(), "JavaScript"
    ),
    "deno": InterpreterSpec(_f("eval"), frozenset(), frozenset(), "JavaScript"),
    "bun": InterpreterSpec(_f("-e", "--eval"), frozenset(), frozenset(), "JavaScript"),
    "php": InterpreterSpec(_f("-r"), _f("-d", "-c"), frozenset(), "PHP"),
    "lua": InterpreterSpec(_f("-e"), _f("-l"), frozenset(), "Lua"),
    "luajit": InterpreterSpec(_f("-e"), _f("-l"), frozenset(), "Lua"),
    "Rscript": InterpreterSpec(_f("-e"), frozenset(), frozenset(), "R"),
    "R": InterpreterSpec(_f("-e"), frozenset(), frozenset(), "R"),
    "tclsh": InterpreterSpec(frozenset(), frozenset(), frozenset(), "Tcl"),
    "wish": InterpreterSpec(frozenset(), frozenset(), frozenset(), "Tcl"),
    "julia": InterpreterSpec(
        _f("-e", "--eval", "-E", "--print"), frozenset(), frozenset(), "Julia"
    ),
    "java": InterpreterSpec(
        frozenset(), _f("-cp", "-classpath", "--class-path"), _f("-jar"), "Java"
    ),
    "dotnet": InterpreterSpec(frozenset(), frozenset(), frozenset(), ".NET"),
    "groovy": InterpreterSpec(_f("-e"), frozenset(), frozenset(), "Groovy"),
    "scala": InterpreterSpec(_f("-e"), frozenset(), frozenset(), "Scala"),
    "pwsh": InterpreterSpec(_f("-c", "-Command"), frozenset(), frozenset(), "PowerShell"),
}
"""Language runtimes: running a program is a side effect the analysis cannot see into."""

INTERPRETER_INFO_FLAGS: Final = frozenset({"--version", "-V", "-version", "--help", "-h"})
"""Flags that make a runtime print information and exit (``python --version``)."""

PACKAGE_MANAGERS: Final[dict[str, str]] = {
    "npm": "may modify node_modules/ and download packages",
    "npx": "may download and run a package",
    "yarn": "may modify node_modules/ and download packages",
    "pnpm": "may modify node_modules/ and download packages",
    "pip": "may install Python packages and download them",
    "pip3": "may install Python packages and download them",
    "uv": "may install Python packages and download them",
    "poetry": "may install Python packages and download them",
    "pipenv": "may install Python packages and download them",
    "conda": "may install packages and download them",
    "cargo": "builds Rust code (build scripts run) and may download crates",
    "go": "builds Go code and may download modules",
    "gem": "may install Ruby gems and download them",
    "bundle": "may install Ruby gems and download them",
    "composer": "may install PHP packages and download them",
    "mvn": "builds Java code (plugins run) and may download dependencies",
    "gradle": "builds Java code (build scripts run) and may download dependencies",
    "make": "runs build recipes from the Makefile, which can run any command",
    "cmake": "configures or runs a build, which can run any command",
    "ninja": "runs build steps, which can run any command",
    "pytest": "runs the test suite, which can run any code",
    "tox": "runs test environments and may download packages",
    "nox": "runs test sessions and may download packages",
    "rustc": "compiles code",
    "gcc": "compiles code",
    "cc": "compiles code",
    "clang": "compiles code",
    "g++": "compiles code",
    "javac": "compiles code",
    "tsc": "compiles TypeScript",
    "mypy": "type-checks code (may write a cache)",
    "ruff": "lints code (may fix files and write a cache)",
    "black": "formats code in place",
    "prettier": "formats code (may rewrite files)",
    "eslint": "lints code (may fix files)",
}
"""Build and package tools: legitimate side effects, so ASK with a specific explanation."""

NETWORK_SUBCOMMANDS: Final[dict[str, frozenset[str]]] = {
    # The subcommands that download: their needs_network is set (network disabled: they
    # fail inside the sandbox, so the explanation warns).
    "npm": _f("install", "i", "ci", "add", "update", "publish", "exec"),
    "npx": _f(),
    "yarn": _f("install", "add", "upgrade", "publish", "dlx"),
    "pnpm": _f("install", "i", "add", "update", "dlx", "publish"),
    "pip": _f("install", "download"),
    "pip3": _f("install", "download"),
    "uv": _f("pip", "add", "sync", "run", "tool", "venv"),
    "poetry": _f("install", "add", "update", "publish"),
    "cargo": _f("install", "fetch", "update", "publish", "build", "run", "test"),
    "go": _f("get", "install", "mod", "build", "run", "test"),
    "gem": _f("install", "update", "push"),
    "bundle": _f("install", "update"),
    "composer": _f("install", "require", "update"),
}
"""Subcommands of package managers that use the network (needs_network=True)."""

WriteRole = Literal["all", "last", "dest_after_t", "mode_then_paths", "owner_then_paths"]


@dataclass(frozen=True)
class WriteSpec:
    """A command that writes files given as operands."""

    writes: WriteRole
    """Which operands are written: all, the last (cp src... dst; others read), all after
    a mode/owner operand (chmod MODE FILE...)."""
    value_options: frozenset[str] = frozenset()
    """Options whose value is the next argument."""
    target_options: frozenset[str] = frozenset()
    """Options whose value is the written target (``cp -t DIR``)."""
    what: str = "changes files"
    """Words for the explanation."""
    risk: Literal["low", "medium", "high"] = "medium"
    """Risk when the targets are inside the writable roots."""


WRITE_COMMANDS: Final[dict[str, WriteSpec]] = {
    "mkdir": WriteSpec("all", _f("-m", "--mode"), what="creates directories", risk="low"),
    "touch": WriteSpec(
        "all",
        _f("-d", "-t", "-r", "--date", "--reference"),
        what="creates or updates files",
        risk="low",
    ),
    "cp": WriteSpec(
        "last", _f("-S", "--suffix"), _f("-t", "--target-directory"), what="copies files"
    ),
    "mv": WriteSpec(
        "all", _f("-S", "--suffix"), _f("-t", "--target-directory"), what="moves files"
    ),
    "ln": WriteSpec(
        "last", _f("-S", "--suffix"), _f("-t", "--target-directory"), what="creates links"
    ),
    "install": WriteSpec(
        "last",
        _f("-m", "--mode", "-o", "--owner", "-g", "--group", "-S", "--suffix"),
        _f("-t", "--target-directory"),
        what="copies files",
    ),
    "rm": WriteSpec("all", what="deletes files", risk="high"),
    "rmdir": WriteSpec("all", what="deletes directories"),
    "unlink": WriteSpec("all", what="deletes a file", risk="high"),
    "truncate": WriteSpec(
        "all", _f("-s", "--size", "-r", "--reference"), what="truncates files", risk="high"
    ),
    "chmod": WriteSpec("mode_then_paths", what="changes permissions"),
    "chown": WriteSpec("owner_then_paths", what="changes ownership"),
    "chgrp": WriteSpec("owner_then_paths", what="changes group ownership"),
    "split": WriteSpec(
        "last", _f("-l", "-b", "-n", "-a", "--lines", "--bytes"), what="splits a file into pieces"
    ),
    "patch": WriteSpec(
        "all",
        _f("-p", "-i", "-F", "--strip", "--input"),
        # The output, reject and backup-prefix files are written wherever they name.
        _f("-o", "--output", "-r", "--reject-file", "-B", "--prefix"),
        what="patches files",
    ),
    # Named pipes and device nodes are files too (a FIFO planted where a tool reads blocks it).
    "mkfifo": WriteSpec("all", _f("-m", "--mode", "-Z", "--context"), what="creates named pipes"),
    "mknod": WriteSpec("all", _f("-m", "--mode", "-Z", "--context"), what="creates special files"),
    "dd": WriteSpec("all", what="copies raw data", risk="high"),
    "tar": WriteSpec("all", what="packs or unpacks archives"),
    "zip": WriteSpec("all", what="writes an archive"),
    "unzip": WriteSpec("all", what="unpacks an archive"),
    "gzip": WriteSpec("all", what="compresses files in place"),
    "gunzip": WriteSpec("all", what="decompresses files in place"),
    "bzip2": WriteSpec("all", what="compresses files in place"),
    "xz": WriteSpec("all", what="compresses files in place"),
    "mktemp": WriteSpec("all", what="creates a temporary file", risk="low"),
    "kill": WriteSpec("all", what="sends a signal to processes", risk="high"),
}
"""Commands that write their operands: ASK inside the writable roots, DENY outside."""

DENY_OPTIONS: Final[dict[str, dict[str, str]]] = {
    # GTFOBins: these options make an innocuous tool run commands.
    "tar": {
        "--checkpoint-action": "tar --checkpoint-action runs commands",
        "--to-command": "tar --to-command runs commands",
        "--use-compress-program": "tar --use-compress-program runs a program",
        "-I": "tar -I runs a program",
        "--info-script": "tar --info-script runs a script",
        "--new-volume-script": "tar --new-volume-script runs a script",
        "-F": "tar -F runs a script",
        "--rsh-command": "tar --rsh-command runs a program",
        "--rmt-command": "tar --rmt-command runs a program",
    },
    "zip": {
        "-TT": "zip -TT runs a command to test the archive",
        "--unzip-command": "zip --unzip-command runs a command",
    },
    "rsync": {"-e": "rsync -e runs a remote shell command", "--rsh": "rsync --rsh runs a command"},
    "split": {"--filter": "split --filter runs a shell command"},
    "install": {"--strip-program": "install --strip-program runs a program"},
}
"""Options that turn a file tool into a command runner (GTFOBins): DENY."""

GIT_READ_SUBCOMMANDS: Final = frozenset(
    {
        "status",
        "log",
        "diff",
        "show",
        "rev-parse",
        "ls-files",
        "ls-tree",
        "cat-file",
        "blame",
        "annotate",
        "describe",
        "shortlog",
        "reflog",
        "rev-list",
        "merge-base",
        "name-rev",
        "for-each-ref",
        "show-ref",
        "count-objects",
        "grep",
        "whatchanged",
        "cherry",
        "check-ignore",
        "check-attr",
        "var",
        "version",
        "help",
        "diff-tree",
        "diff-files",
        "diff-index",
        "verify-commit",
        "verify-tag",
        "show-branch",
        "range-diff",
        "fsck",
        "check-ref-format",
        "branch",
        "tag",
        "stash",
        "remote",
        "config",
        "worktree",
        "submodule",
        "notes",
        "symbolic-ref",
        "ls-remote",
        "archive",
        "bisect",
        "format-patch",
        "get-tar-commit-id",
    }
)
"""git subcommands that can be read-only (some only in forms judges/git.py recognises:
``branch`` without a name, ``stash list``, ``config --get`` ...)."""

GIT_NETWORK_SUBCOMMANDS: Final = frozenset(
    {"clone", "fetch", "pull", "push", "ls-remote", "send-email", "request-pull"}
)
"""git subcommands that talk to remotes: network (and push is exfiltration)."""

GIT_WRITE_SUBCOMMANDS: Final[dict[str, str]] = {
    "add": "stages changes",
    "commit": "creates a commit",
    "checkout": "changes files in the working tree",
    "switch": "switches branches",
    "restore": "restores files in the working tree",
    "reset": "moves HEAD and may discard changes",
    "merge": "merges branches",
    "rebase": "rewrites history",
    "cherry-pick": "applies commits",
    "revert": "reverts commits",
    "am": "applies patches",
    "apply": "applies a patch to files",
    "mv": "moves files",
    "rm": "deletes files",
    "init": "creates a repository",
    "clean": "deletes untracked files",
    "gc": "repacks the repository",
    "prune": "prunes objects",
    "repack": "repacks objects",
    "update-index": "changes the index",
    "update-ref": "changes references",
    "filter-branch": "rewrites history",
    "replace": "replaces objects",
    "mergetool": "runs merge tools",
    "difftool": "runs diff tools",
    "commit-tree": "creates commits",
    "hash-object": "writes objects",
    "read-tree": "changes the index",
    "write-tree": "writes objects",
    "sparse-checkout": "changes the working tree",
    "maintenance": "schedules maintenance (may install jobs)",
    "lfs": "manages large files (may download)",
}
"""git subcommands that change the repository: ASK."""

GIT_DENY_OPTIONS: Final[dict[str, str]] = {
    "--upload-pack": "git --upload-pack runs a command",
    "--receive-pack": "git --receive-pack runs a command",
    "--exec": "git --exec runs a command",
    "--exec-path": "git --exec-path changes where git finds its programs",
    "--config-env": "git --config-env sets configuration that can run commands",
    "--open-files-in-pager": "git grep -O runs a pager command",
    "-O": "git grep -O runs a pager command",
    "--ext-diff": "git --ext-diff runs an external diff program",
    "--template": "git --template copies hook scripts",
    "--extcmd": "git difftool --extcmd runs a command",
    "-x": "git rebase -x runs a command",
}
"""git options that run programs (GTFOBins): DENY."""

GIT_FILTER_OPTIONS: Final = frozenset(
    {
        "--env-filter",
        "--tree-filter",
        "--index-filter",
        "--parent-filter",
        "--msg-filter",
        "--commit-filter",
        "--tag-name-filter",
        "--setup",
    }
)
"""``git filter-branch`` options whose value is shell code run for every commit: DENY."""

BENIGN_GIT_CONFIG_PREFIXES: Final[tuple[str, ...]] = (
    # Settings that cannot make git run a program; every other key (core.*, alias.*,
    # *.command, credential.*, include.*, url.*, filter.* ...) can, so -c/config writes
    # of them are refused.
    "user.",
    "color.",
    "init.defaultbranch",
    "advice.",
    "log.",
    "pull.rebase",
    "push.default",
    "core.quotepath",
    "core.abbrev",
    "i18n.",
    "format.pretty",
    "column.",
    "status.",
    "diff.renames",
    "merge.conflictstyle",
)

DANGEROUS_ENV_VARS: Final = frozenset(
    {
        # Make the dynamic loader or the shell run other code.
        "PATH",
        "BASH_ENV",
        "ENV",
        # (IFS is not here: `IFS= read -r line` is everyday shell; `${IFS}` tricks only
        # work in words that are judged dynamic anyway.)
        "PS4",
        "PROMPT_COMMAND",
        "SHELLOPTS",
        "BASHOPTS",
        "GCONV_PATH",
        "HOSTALIASES",
        "CDPATH",
        "GLOBIGNORE",
        "BASH_XTRACEFD",
        # Programs that other programs launch (pagers, editors, helpers).
        "PAGER",
        "MANPAGER",
        "SYSTEMD_PAGER",
        "EDITOR",
        "VISUAL",
        "BROWSER",
        "LESSOPEN",
        "LESSCLOSE",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "TAR_OPTIONS",
        # git: config, hooks and commands it runs.
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_EXEC_PATH",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_EXTERNAL_DIFF",
        "GIT_ASKPASS",
        "GIT_TEMPLATE_DIR",
        "GIT_PROXY_COMMAND",
        "GIT_SEQUENCE_EDITOR",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CEILING_DIRECTORIES",
        # Where configuration is read from (a planted config there runs code).
        "HOME",
        "XDG_CONFIG_HOME",
        "ZDOTDIR",
        "INPUTRC",
        # Interpreter start-up hooks.
        "PYTHONSTARTUP",
        "PYTHONPATH",
        "PYTHONHOME",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "NODE_PATH",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "LUA_INIT",
        "LUA_PATH",
        # Shell behaviour and loader paths found since (EXE-8b rev 2).
        "EXECIGNORE",
        "SHELL",
        "LOCPATH",
        "NLSPATH",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "GOFLAGS",
        "RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "MAKEFLAGS",
        "LESS",
        "LESSKEY",
        "MANOPT",
        "TERMINFO",
        "TERMCAP",
        "R_PROFILE",
        "R_PROFILE_USER",
        "GEM_PATH",
        "GEM_HOME",
        "RUBYGEMS_GEMDEPS",
        "PIP_CONFIG_FILE",
        "NPM_CONFIG_USERCONFIG",
        "COMPOSER_HOME",
        "DOTNET_STARTUP_HOOKS",
        "CORECLR_PROFILER_PATH",
        # cp/mv/ln/install -b name their backups TARGET+SUFFIX: `.bash` + `rc`.
        "SIMPLE_BACKUP_SUFFIX",
    }
)
"""Variables whose value makes an ordinary command run other code: setting them is DENY
(compared on the upper-cased name too: ``npm_config_*`` and ``http_proxy`` are read in
lower case)."""

DANGEROUS_ENV_PREFIXES: Final[tuple[str, ...]] = (
    "LD_",  # LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT: the loader runs a library of choice
    "DYLD_",  # the same on macOS
    # BASH_CMDS[cat]=/bin/bash turns `cat` into a shell, BASH_ALIASES, BASH_ENV, BASH_FUNC_*
    # (exported functions), BASH_LOADABLES_PATH, BASH_XTRACEFD, BASH_ARGV0 ...
    "BASH_",
    "GIT_",  # GIT_CONFIG_*, GIT_SSH_COMMAND, GIT_DIR, GIT_EXEC_PATH, GIT_TRACE=file ...
    "PYTHON",  # PYTHONSTARTUP, PYTHONPATH, PYTHONWARNINGS (imports a module) ...
    "NODE_",  # NODE_OPTIONS=--require, NODE_PATH
    "PERL",  # PERL5OPT, PERL5LIB, PERLLIB, PERL5DB
    "RUBY",  # RUBYOPT, RUBYLIB
    "JAVA_",  # JAVA_TOOL_OPTIONS
    "_JAVA",
    "JDK_JAVA",
    "LUA_",  # LUA_INIT runs code
    "NPM_CONFIG_",  # npm_config_script_shell, npm_config_node_options (any case)
    "PS",  # PS0..PS4: prompt strings are expanded ($(...) in PS4 runs under set -x)
    "GLIBC_",  # GLIBC_TUNABLES (loader bugs)
    "MALLOC_",
)
"""Prefixes of DANGEROUS_ENV_VARS, compared on the upper-cased name. ``PS`` is exact for
``PS0``..``PS4`` only (see :func:`env_verdict`)."""

ALLOWED_ENV_VARS: Final = frozenset(
    {
        # Locale and time zone: change how text and dates are printed.
        "LANG",
        "LANGUAGE",
        "TZ",
        # Terminal size and colours.
        "COLUMNS",
        "LINES",
        "NO_COLOR",
        "FORCE_COLOR",
        "CLICOLOR",
        "CLICOLOR_FORCE",
        "COLORTERM",
        "TERM",
        "GREP_COLOR",
        "GREP_COLORS",
        "LS_COLORS",
        # Shell variables of everyday scripts (word splitting, getopts, read, time).
        "IFS",
        "OPTIND",
        "OPTERR",
        "REPLY",
        "TIMEFORMAT",
        # Flags that only quieten or change output of common tools.
        "CI",
        "DEBUG",
        "VERBOSE",
        "NODE_ENV",
        "RUST_BACKTRACE",
        "RUST_LOG",
        "CARGO_TERM_COLOR",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONHASHSEED",
        "PYTHONFAULTHANDLER",
        "GIT_TERMINAL_PROMPT",
    }
)
"""Variables a command may set in its environment without asking (EXE-8b rev 2: an allow-list
replaces the deny-list). Anything else is ASK; DANGEROUS_ENV_VARS / _PREFIXES are DENY."""

ALLOWED_ENV_PREFIXES: Final[tuple[str, ...]] = ("LC_",)
"""Prefixes of ALLOWED_ENV_VARS (``LC_ALL``, ``LC_NUMERIC`` ...)."""

ALLOWED_ENV_VALUES: Final[dict[str, frozenset[str]]] = {
    # A pager that is `cat` (or none) runs no other program.
    "PAGER": frozenset({"cat", ""}),
    "GIT_PAGER": frozenset({"cat", ""}),
    "MANPAGER": frozenset({"cat", ""}),
    "SYSTEMD_PAGER": frozenset({"cat", ""}),
}
"""Otherwise-dangerous variables that are harmless with these exact values."""

SHELL_SPECIAL_VARS: Final = frozenset(
    {
        "HOME",
        "PATH",
        "CDPATH",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "EXECIGNORE",
        "FIGNORE",
        "GLOBIGNORE",
        "GLOBSORT",
        "HISTFILE",
        "HISTCONTROL",
        "HISTIGNORE",
        "HOSTFILE",
        "INPUTRC",
        "MAIL",
        "MAILPATH",
        "PROMPT_COMMAND",
        "PROMPT_DIRTRIM",
        "FUNCNEST",
        "TMOUT",
        "TMPDIR",
        "SHELL",
        "PWD",
        "OLDPWD",
        "POSIXLY_CORRECT",
        "COMP_WORDBREAKS",
        "READLINE_LINE",
        "AUTO_RESUME",
        "EPOCHREALTIME",
        "SRANDOM",
    }
)
"""Variables bash itself reads while it runs: setting one changes how later commands run
even when it is not exported (``BASH_*`` and ``PS*`` are in the dangerous prefixes)."""


# Allowed variables whose value, with a slash in it, is a file the C library or curses
# loads (locale data, a zone file, a terminfo entry) rather than a name.
_NAMES_A_FILE_WHEN_SLASHED: Final = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "LC_ALL",
        "LC_CTYPE",
        "LC_MESSAGES",
        "LC_COLLATE",
        "LC_NUMERIC",
        "LC_TIME",
        "LC_MONETARY",
        "LC_ADDRESS",
        "LC_IDENTIFICATION",
        "LC_MEASUREMENT",
        "LC_NAME",
        "LC_PAPER",
        "LC_TELEPHONE",
    }  # fmt: skip
)


def env_verdict(name: str, value: str | None) -> Literal["allow", "ask", "deny"]:
    """How setting ``name`` (to ``value`` when known) in a command's environment is judged:
    allowed names, ASK for anything not on the allow-list, DENY for variables that make
    ordinary commands run other code."""
    upper = name.upper()
    allowed_values = ALLOWED_ENV_VALUES.get(name)
    if allowed_values is not None and value is not None and value in allowed_values:
        return "allow"
    if name in ALLOWED_ENV_VARS or name.startswith(ALLOWED_ENV_PREFIXES):
        if name in _NAMES_A_FILE_WHEN_SLASHED and (value is None or "/" in value):
            # `LC_ALL=/tmp/x`, `TZ=/path`, `TERM=../x`: the C library loads that file.
            return "ask"
        return "allow"
    if upper.startswith("GIT_TRACE"):
        # Traces go to stderr or to the file named, which filevars.py judges as a write.
        return "allow"
    if name in DANGEROUS_ENV_VARS or upper in DANGEROUS_ENV_VARS:
        return "deny"
    for prefix in DANGEROUS_ENV_PREFIXES:
        if upper.startswith(prefix):
            if prefix == "PS" and not (len(upper) == 3 and upper[2].isdigit()):
                continue
            return "deny"
    return "ask"


CREDENTIAL_PATHS: Final[tuple[str, ...]] = (
    # System secrets.
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d/**",
    "/etc/ssh/ssh_host_*",
    "/etc/security/opasswd",
    "/etc/ssl/private/**",
    # Kubernetes and container secrets mounted into pods.
    "/var/run/secrets/**",
    "/run/secrets/**",
    # Other processes' environment and memory hold tokens.
    "/proc/*/environ",
    "/proc/*/mem",
    "/proc/*/cmdline",
    # The user's keys and tokens (~ is the home directory).
    "~/.ssh/**",
    "~/.aws/**",
    "~/.azure/**",
    "~/.config/gcloud/**",
    "~/.kube/**",
    "~/.docker/config.json",
    "~/.npmrc",
    "~/.yarnrc",
    "~/.pypirc",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.config/gh/**",
    "~/.config/hub",
    "~/.gnupg/**",
    "~/.password-store/**",
    "~/.vault-token",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.gem/credentials",
    "~/.m2/settings.xml",
    "~/.gradle/gradle.properties",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.bash_history",
    "~/.zsh_history",
    "~/.python_history",
    "~/.local/share/keyrings/**",
    "~/.config/rclone/rclone.conf",
    # More tokens and histories found in the red-team pass of session 6: container
    # registries (podman, skopeo, buildah), coding agents' CLIs, model hubs, object stores,
    # cloud and password-manager CLIs, and the histories of database and language shells
    # (passwords typed on their command lines).
    "~/.config/containers/auth.json",
    "/run/user/*/containers/auth.json",
    "~/.claude/.credentials.json",
    "~/.codex/auth.json",
    "~/.cache/huggingface/token",
    "~/.huggingface/token",
    "~/.s3cfg",
    "~/.boto",
    "~/.databrickscfg",
    "~/.config/op/**",
    "~/.config/doctl/config.yaml",
    "~/.config/configstore/firebase-tools.json",
    "~/.config/helm/repositories.yaml",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.sqlite_history",
    "~/.rediscli_history",
    "~/.node_repl_history",
    "~/.local/share/fish/fish_history",
    # Cluster administrator credentials and private keys on nodes.
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/pki/**",
    "/etc/rancher/k3s/k3s.yaml",
    "/var/lib/kubelet/pki/**",
    "/etc/pki/tls/private/**",
    "/etc/letsencrypt/live/**",
    "/etc/letsencrypt/archive/**",
)
"""Credential files: any access is DENY. Globs: ``*`` within a component, ``**`` across."""

CREDENTIAL_BASENAMES: Final[tuple[str, ...]] = (
    # Secrets by file name, refused when OUTSIDE the workspace (inside it they are the
    # project's own files; policy can still deny them through denied_read_globs).
    ".env",
    ".env.*",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "credentials",
    "credentials.json",
    ".htpasswd",
)

SAFE_DEVICES: Final = frozenset(
    {
        "/dev/null",  # discards
        "/dev/zero",  # zeros
        "/dev/stdout",  # this process's own output
        "/dev/stderr",
        "/dev/stdin",
        "/dev/tty",  # the caller's terminal (none in the executor)
        "/dev/urandom",  # randomness
        "/dev/random",
        "/dev/fd/0",
        "/dev/fd/1",
        "/dev/fd/2",
    }
)
"""Devices that redirections and arguments may use freely."""
